// Which key block a CTA owns, and which query blocks it walks. One CTA per tile (no persistent
// loop: every CTA keeps its K/V block and dK/dV accumulators for its whole life).
#pragma once

#include <type_traits>

#include "sm90/bwd/params.hpp"
#include "sm90/common/block_sparse.cuh"
#include "sm90/common/sequence.cuh"
#include "sm90/common/tile_order.cuh"
#include "sm90/common/window.cuh"

namespace hfa::sm90::bwd {

struct KeyTile {
  int n_block;     // which kBlockN keys of the sequence
  int kv_head;
  int first_head;  // the CTA walks the queries of Params::heads_per_tile query heads from this
                   // one, all of kv_head's GQA group or a part of it
  int batch;
  Sequence seq;
  int allocated_k;  // keys the sequence has in k, v, dk, dv (seq.seqlen_k of them used)
};

// A block-sparse tile's walk (TileConfig::kBlockSparse): for each of its query heads, the query
// tiles listed for its key block (sparse_query_blocks; for_each_sparse_step, producer.cuh).
// steps: all of them, over every head of the tile.
struct SparseTileWalk {
  int steps;
  __device__ __forceinline__ int count() const { return steps; }
};

// What a tile walks: the query blocks of a BlockRange (the same for each of its heads), or a
// block-sparse mask's lists.
template <typename Config>
using TileSteps = std::conditional_t<Config::kBlockSparse, SparseTileWalk, BlockRange>;

template <typename Config>
struct Scheduler {
  // Tile order (tile_order.cuh), in launch order since the grid is one CTA a tile: no window,
  // n_block fastest (the CTAs running together stream one head's Q and dO through L2).
  // Windowed, within sections of (batch, head group) pairs: n_block ascending, so that under a
  // causal mask the first key blocks, which see the most queries, go first (LPT) — except in
  // the deterministic mode, where it descends (see turn). Deterministic without a window, in
  // sections too: a tile waits at every query block for the key block before it (turn), and
  // with n_block fastest that one started a moment earlier, so each tile of a pair waited a
  // little longer than the last; a section's pairs between them put the tiles of one pair
  // several launches apart.
  static __device__ __forceinline__ KeyTile tile(const Params& p, int index) {
    const bool deterministic = p.ws.dq_turns != nullptr;
    const int head_groups = p.heads_q / p.heads_per_tile;
    TilePosition at;
    if (Config::kWindowed || deterministic) {
      at = sectioned_ranks(index, p.num_n_blocks, head_groups * p.batch, p.sections);
      if (Config::kWindowed && deterministic) at.rank = p.num_n_blocks - 1 - at.rank;
    } else {
      at = blocks_fastest(index, p.num_n_blocks);
    }
    const int batch = at.pair / head_groups;
    const int first_head = at.pair % head_groups * p.heads_per_tile;
    return {at.rank, first_head / p.heads_per_kv, first_head, batch, sequence_of(p, batch),
            allocated_keys(p, batch)};
  }

  // The query blocks that see the tile's keys (empty past the used keys). Block-sparse: the
  // steps its heads' lists hold (a listed pair the window hides is still walked, all masked: exact,
  // as in the forward).
  static __device__ __forceinline__ TileSteps<Config> query_range(const Params& p, const KeyTile& t) {
    if constexpr (Config::kBlockSparse) {
      int steps = 0;
      for (int head = t.first_head; head < t.first_head + p.heads_per_tile; ++head) {
        steps += p.query_lists.counts[p.query_lists.key_entry(t.batch, head, t.n_block)].steps;
      }
      return {steps};
    } else {
      return query_blocks<Config::kBlockM, Config::kWindowed>(p, t.seq,
                                                             t.n_block * Config::kBlockN,
                                                             Config::kBlockN);
    }
  }

  // Deterministic dQ: the key blocks that see query block m add their partials in a fixed order;
  // this tile's place in it. No window: n_block ascending (every tile walks m from the first
  // block, and tiles launch in that order). Windowed: descending, the shortest-processing-time
  // order — each tile walks m up from its diagonal, so the highest key block reaches m first —
  // and tiles launch in that order too, so a tile only ever waits for one dispatched before it.
  static __device__ __forceinline__ int turn(const Params& p, const KeyTile& t, int m_block) {
    const int first_query = m_block * Config::kBlockM;
    const int last_query = min(first_query + Config::kBlockM, t.seq.seqlen_q) - 1;
    const BlockRange keys =
        key_blocks<Config::kBlockN, Config::kWindowed>(p, t.seq, first_query, last_query);
    return Config::kWindowed ? keys.end - 1 - t.n_block : t.n_block - keys.begin;
  }

  // Whether the scores of (this tile, query block m) need the mask: keys past seqlen_k or cut
  // by the window for some query of the block. Without a window only the first depends on the
  // tile alone, and the compiler may hoist it out of the query-block loop and split the loop:
  // harmless now that the warpgroup branch is uniform (warpgroup.cuh); before, ptxas then
  // serialized every wgmma of the kernel (C7520: WG.AR in a divergent path).
  static __device__ __forceinline__ bool needs_mask(const Params& p, const KeyTile& t, int m_block) {
    const int first_key = t.n_block * Config::kBlockN;
    const int last_key = first_key + Config::kBlockN - 1;
    if constexpr (!Config::kWindowed) return last_key >= t.seq.seqlen_k;
    return block_needs_mask(p, t.seq, m_block * Config::kBlockM,
                            (m_block + 1) * Config::kBlockM - 1, first_key, last_key);
  }
};

}  // namespace hfa::sm90::bwd
