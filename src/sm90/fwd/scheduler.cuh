// Which (m_block, head, batch) tile a persistent CTA works on next, and which K/V blocks it reads.
#pragma once

#include <type_traits>

#include "sm90/common/block_sparse.cuh"
#include "sm90/common/sequence.cuh"
#include "sm90/common/tile_order.cuh"
#include "sm90/common/window.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/tile_config.hpp"

namespace hfa::sm90::fwd {

struct WorkTile {
  int m_block;  // which kBlockM rows of the sequence (of (query, head) pairs with PackGQA)
  int head;     // the query head; with PackGQA the head group, i.e. the kv head
  int batch;
  Sequence seq;
};

// A tile row's query index within its sequence: with PackGQA, rows are (query, head) pairs,
// head fastest (see Params::pack_shift).
__device__ __forceinline__ int query_of_row(const Params& p, int row) { return row >> p.pack_shift; }
// And its query head: the tile's head (group) and, with PackGQA, the row's place in the group.
__device__ __forceinline__ int head_of_row(const Params& p, const WorkTile& tile, int row) {
  return (tile.head << p.pack_shift) + (row & ((1 << p.pack_shift) - 1));
}

// Persistent schedule, one CTA per SM. Every CTA starts with tile blockIdx.x; then
//   static:  tile + gridDim.x — right when all tiles cost the same (no window);
//   dynamic: the next unclaimed tile of a global counter — windowed tiles cost ∝ their visible
//            keys (∝ m_block when causal), and CTAs that drew short ones come back for more
//            instead of idling at the end.
// Tile order (tile_order.cuh): no window, m_block fastest, so CTAs that run together share one
// head's K/V in L2. Windowed, longest first (LPT: the last m_blocks) within sections of (batch,
// head) pairs whose K/V fit in L2.
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
  TilePosition at;
  if constexpr (!Config::kWindowed) {
    at = blocks_fastest(tile, p.num_m_blocks);
  } else {
    at = sectioned_ranks(tile, p.num_m_blocks, p.tile_heads * p.batch, p.sections);
    at.rank = p.num_m_blocks - 1 - at.rank;
  }
  const int batch = at.pair / p.tile_heads;
  return {at.rank, at.pair % p.tile_heads, batch, sequence_of(p, batch)};
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

// The walk over the K/V blocks a tile sees: a BlockRange, or a block-sparse mask's lists
// (Config::kBlockSparse). The producer and the consumers both take it from block_range below.
template <typename Config>
using TileBlocks = std::conditional_t<Config::kBlockSparse, SparseKeyBlocks, BlockRange>;

// K/V blocks a tile sees; the mainloop walks them from end − 1 down, so the blocks that need
// masking on the right (the causal diagonal, the seqlen_k tail) come first. Block-sparse: the
// mask's blocks of the tile's query block (the tile is one, kSparseBlock rows, without PackGQA),
// partial ones first. A listed block the window hides is still walked, all masked: exact, and
// masks that also need a window are rare (FlexAttention states causal in the mask itself).
template <typename Config>
__device__ __forceinline__ TileBlocks<Config> block_range(const Params& p, const WorkTile& tile) {
  if constexpr (Config::kBlockSparse) {
    return sparse_key_blocks(p.block_sparse, tile.batch, tile.head, tile.m_block);
  } else {
    return key_blocks<Config::kBlockN, Config::kWindowed>(
        p, tile.seq, first_query<Config>(p, tile),
        min(last_query<Config>(p, tile), tile.seq.seqlen_q - 1));
  }
}

// Whether block n_block has keys some row of the tile must not see by the window or the
// sequence's end (a block-sparse walk adds its partial blocks: mainloop.cuh).
template <typename Config>
__device__ __forceinline__ bool block_needs_mask(const Params& p, const WorkTile& tile, int n_block) {
  const int block_first_key = n_block * Config::kBlockN;
  const int block_last_key = block_first_key + Config::kBlockN - 1;
  if constexpr (!Config::kWindowed) return block_last_key >= tile.seq.seqlen_k;
  return sm90::block_needs_mask(p, tile.seq, first_query<Config>(p, tile),
                                last_query<Config>(p, tile), block_first_key, block_last_key);
}

}  // namespace hfa::sm90::fwd
