// Which (m_block, head, batch) tile a persistent CTA works on next, and which K/V blocks it reads.
#pragma once

#include "sm90/fwd/params.hpp"
#include "sm90/fwd/tile_config.hpp"

namespace hfa::sm90::fwd {

struct WorkTile {
  int m_block;
  int head;
  int batch;
};

// Persistent schedule, one CTA per SM. Every CTA starts with tile blockIdx.x; then
//   static:  tile + gridDim.x — right when all tiles cost the same (non-causal);
//   dynamic: the next unclaimed tile of a global counter — causal tiles cost ∝ m_block, and
//            CTAs that drew short ones come back for more instead of idling at the end.
// Tile order: non-causal, m_block fastest, so CTAs that run together share one head's K/V in
// L2. Causal, longest first (LPT) within sections of (batch, head) pairs whose K/V fit in L2.
template <typename Config>
__device__ __forceinline__ int next_tile(const Params& p, int tile) {
  if constexpr (Config::kCausal) {
    if (p.tile_counter != nullptr) return atomicAdd(p.tile_counter, 1) + int(gridDim.x);
  }
  return tile + int(gridDim.x);
}

template <typename Config>
__device__ __forceinline__ WorkTile decode_tile(const Params& p, int tile) {
  if constexpr (!Config::kCausal) {
    const int m_block = tile % p.num_m_blocks;
    const int pair = tile / p.num_m_blocks;
    return {m_block, pair % p.heads_q, pair / p.heads_q};
  } else {
    const int pairs = p.heads_q * p.batch;
    const int section_tiles = p.heads_per_section * p.num_m_blocks;
    const int section = tile / section_tiles;
    const int in_section = tile % section_tiles;
    const int first_pair = section * p.heads_per_section;
    const int pairs_here = min(p.heads_per_section, pairs - first_pair);
    const int pair = first_pair + in_section % pairs_here;
    const int m_block = p.num_m_blocks - 1 - in_section / pairs_here;
    return {m_block, pair % p.heads_q, pair / p.heads_q};
  }
}

// K/V blocks [n_begin, n_end) that tile m_block sees; the mainloop walks them from n_end − 1
// down, so the only blocks that need masking (the causal diagonal and the seqlen_k tail) come
// first.
struct BlockRange {
  int n_begin;
  int n_end;
  __device__ __forceinline__ int count() const { return n_end - n_begin; }
};

template <typename Config>
__device__ __forceinline__ BlockRange block_range(const Params& p, int m_block) {
  const int n_blocks = (p.seqlen_k + Config::kBlockN - 1) / Config::kBlockN;
  if constexpr (!Config::kCausal) {
    return {0, n_blocks};
  } else {
    // The tile's last row i sees keys j <= i + seqlen_k - seqlen_q (bottom-right aligned).
    const int last_row = min((m_block + 1) * Config::kBlockM, p.seqlen_q) - 1;
    const int last_key = last_row + p.seqlen_k - p.seqlen_q;
    return {0, last_key < 0 ? 0 : min(n_blocks, last_key / Config::kBlockN + 1)};
  }
}

// Whether block n_block has keys some row of tile m_block must not see.
template <typename Config>
__device__ __forceinline__ bool block_needs_mask(const Params& p, int m_block, int n_block) {
  const int block_last_key = (n_block + 1) * Config::kBlockN - 1;
  bool needed = block_last_key >= p.seqlen_k;
  if constexpr (Config::kCausal) {
    needed |= block_last_key > m_block * Config::kBlockM + p.seqlen_k - p.seqlen_q;
  }
  return needed;
}

}  // namespace hfa::sm90::fwd
