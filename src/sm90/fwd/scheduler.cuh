// Which (m_block, head, batch) tile a persistent CTA works on next, and which K/V blocks it reads.
#pragma once

#include "sm90/fwd/params.hpp"
#include "sm90/fwd/sequence.cuh"
#include "sm90/fwd/tile_config.hpp"

namespace hfa::sm90::fwd {

struct WorkTile {
  int m_block;  // which kBlockM rows of the sequence (of (query, head) pairs with PackGQA)
  int head;     // the query head; with PackGQA the head group, i.e. the kv head
  int batch;
  Sequence seq;
};

// Persistent schedule, one CTA per SM. Every CTA starts with tile blockIdx.x; then
//   static:  tile + gridDim.x — right when all tiles cost the same (no window);
//   dynamic: the next unclaimed tile of a global counter — windowed tiles cost ∝ their visible
//            keys (∝ m_block when causal), and CTAs that drew short ones come back for more
//            instead of idling at the end.
// Tile order: no window, m_block fastest, so CTAs that run together share one head's K/V in
// L2. Windowed, longest first (LPT) within sections of (batch, head) pairs whose K/V fit in L2.
// Varlen tiles span the longest sequence; a shorter one's surplus tiles have no rows, and the
// producer skips them (tile_has_rows) so that consumers only ever see tiles with work.
template <typename Config>
__device__ __forceinline__ int next_tile(const Params& p, int tile) {
  if constexpr (Config::kWindowed) {
    if (p.tile_counter != nullptr) return atomicAdd(p.tile_counter, 1) + int(gridDim.x);
  }
  return tile + int(gridDim.x);
}

template <typename Config>
__device__ __forceinline__ WorkTile decode_tile(const Params& p, int tile) {
  int m_block, pair;
  if constexpr (!Config::kWindowed) {
    m_block = tile % p.num_m_blocks;
    pair = tile / p.num_m_blocks;
  } else {
    const int pairs = p.tile_heads * p.batch;
    const int section_tiles = p.heads_per_section * p.num_m_blocks;
    const int section = tile / section_tiles;
    const int in_section = tile % section_tiles;
    const int first_pair = section * p.heads_per_section;
    const int pairs_here = min(p.heads_per_section, pairs - first_pair);
    pair = first_pair + in_section % pairs_here;
    m_block = p.num_m_blocks - 1 - in_section / pairs_here;
  }
  const int batch = pair / p.tile_heads;
  return {m_block, pair % p.tile_heads, batch, sequence_of(p, batch)};
}

template <typename Config>
__device__ __forceinline__ bool tile_has_rows(const Params& p, const WorkTile& tile) {
  return tile.m_block * Config::kBlockM < (tile.seq.seqlen_q << p.pack_shift);
}

// The queries of the tile's first and last rows.
template <typename Config>
__device__ __forceinline__ int first_query(const Params& p, const WorkTile& tile) {
  return query_of_row(p, tile.m_block * Config::kBlockM);
}
template <typename Config>
__device__ __forceinline__ int last_query(const Params& p, const WorkTile& tile) {
  return query_of_row(p, (tile.m_block + 1) * Config::kBlockM - 1);
}

// K/V blocks [n_begin, n_end) that a tile sees; the mainloop walks them from n_end − 1 down, so
// the blocks that need masking on the right (the causal diagonal, the seqlen_k tail) come first.
struct BlockRange {
  int n_begin;
  int n_end;
  __device__ __forceinline__ int count() const { return n_end - n_begin; }
};

template <typename Config>
__device__ __forceinline__ BlockRange block_range(const Params& p, const WorkTile& tile) {
  const int n_blocks = (tile.seq.seqlen_k + Config::kBlockN - 1) / Config::kBlockN;
  if constexpr (!Config::kWindowed) {
    return {0, n_blocks};
  } else {
    // Query i sees keys [i + diagonal − left, i + diagonal + right]: the tile's first query
    // bounds the range below, its last one above.
    const int first_row = first_query<Config>(p, tile);
    const int last_row = min(last_query<Config>(p, tile), tile.seq.seqlen_q - 1);
    int n_begin = 0, n_end = n_blocks;
    if (p.window_right >= 0) {
      const int last_key = last_row + tile.seq.diagonal() + p.window_right;
      n_end = last_key < 0 ? 0 : min(n_blocks, last_key / Config::kBlockN + 1);
    }
    if (p.window_left >= 0) {
      const int first_key = first_row + tile.seq.diagonal() - p.window_left;
      n_begin = first_key <= 0 ? 0 : first_key / Config::kBlockN;
    }
    return {n_begin, max(n_begin, n_end)};
  }
}

// Whether block n_block has keys some row of the tile must not see.
template <typename Config>
__device__ __forceinline__ bool block_needs_mask(const Params& p, const WorkTile& tile, int n_block) {
  const int block_first_key = n_block * Config::kBlockN;
  const int block_last_key = block_first_key + Config::kBlockN - 1;
  bool needed = block_last_key >= tile.seq.seqlen_k;
  if constexpr (Config::kWindowed) {
    // The first query has the lowest right bound, the last query the highest left bound.
    const int first_row = first_query<Config>(p, tile);
    const int last_row = last_query<Config>(p, tile);
    if (p.window_right >= 0) {
      needed |= block_last_key > first_row + tile.seq.diagonal() + p.window_right;
    }
    if (p.window_left >= 0) {
      needed |= block_first_key < last_row + tile.seq.diagonal() - p.window_left;
    }
  }
  return needed;
}

}  // namespace hfa::sm90::fwd
