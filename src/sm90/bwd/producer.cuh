// The producer warpgroup's two working threads, which walk the same (query head, query block)
// steps as the consumers:
//   the loader (warp 0) brings the CTA's K and V block once, then keeps the Q ring (each stage
//     with its block's LSE) and the dO ring (with D) full with TMA;
//   the dQ writer (warp 1) adds each step's fp32 dQ tile into the workspace accumulator with one
//     bulk reduce-add, in turn order when deterministic.
#pragma once

#include "sm90/bwd/params.hpp"
#include "sm90/bwd/scheduler.cuh"
#include "sm90/bwd/shared_storage.cuh"
#include "sm90/bwd/workspace.hpp"
#include "sm90/ptx/flag.cuh"
#include "sm90/ptx/tma.cuh"

namespace hfa::sm90::bwd {

// The steps of a CTA in walk order: each of its query heads (KeyTile::first_head on), each over
// the query blocks that see the tile's keys, ascending, in both modes. (Rotating the default mode's
// walk by the key block, so that the CTAs of a head start on different dQ chunks, was 1-4 %
// slower at every hdim-64 and -128 cell without a window and no faster at hdim 256:
// docs/decisions/024.)
// One flat loop: a nest of two kept more values alive across the walk than the consumers'
// registers hold (ptxas spilled them).
template <typename Config, typename Visit>
__device__ __forceinline__ void for_each_step(const Params& p, const KeyTile& tile,
                                              const BlockRange& blocks, Visit&& visit) {
  const int steps = p.heads_per_tile * blocks.count();
  int head = tile.first_head, i = 0;
  for (int step = 0; step < steps; ++step) {
    visit(head, blocks.begin + i);
    if (++i == blocks.count()) i = 0, ++head;
  }
}

// The steps of a block-sparse tile (TileConfig::kBlockSparse) in walk order: each of its query
// heads, each over the query tiles its mask lists for the tile's key block (those of full
// blocks, then of partial ones, each ascending; sparse_preprocess.cuh). visit(head, m_block,
// blocks, position): blocks the head's walk and position the step's place in it (for a partial
// block's bits). One flat loop, as for_each_step's, that ends with the heads rather than with
// a step count: one value fewer alive through the producer's walks, whose registers are few
// (BlockSparseTileConfig::kProducerRegisters). A head with no step is passed over.
template <typename Config, typename Visit>
__device__ __forceinline__ void for_each_sparse_step(const Params& p, const KeyTile& tile,
                                                     const SparseTileWalk&, Visit&& visit) {
  int head = tile.first_head, position = 0;
  SparseQueryBlocks blocks = sparse_query_blocks(p.query_lists, tile.batch, head, tile.n_block);
  for (;;) {
    while (position == blocks.count()) {
      if (++head == tile.first_head + p.heads_per_tile) return;
      blocks = sparse_query_blocks(p.query_lists, tile.batch, head, tile.n_block);
      position = 0;
    }
    visit(head, blocks.query_tile(position), blocks, position);
    ++position;
  }
}

// The producer's form of the walk: (head, m_block) per step.
template <typename Config, typename Visit>
__device__ __forceinline__ void for_each_step(const Params& p, const KeyTile& tile,
                                              const SparseTileWalk& walk, Visit&& visit) {
  for_each_sparse_step<Config>(p, tile, walk,
                               [&](int head, int m, const SparseQueryBlocks&, int) {
                                 visit(head, m);
                               });
}

template <typename Config, typename Element>
struct Loader {
  using Storage = SharedStorage<Config, Element>;
  static constexpr int kKVSlabElements = Config::kBlockN * kSlabColumns;
  static constexpr int kQSlabElements = Config::kBlockM * kSlabColumns;
  static constexpr uint32_t kStatBytes = Config::kBlockM * sizeof(float);

  const Params& p;
  Storage& smem;

  template <typename Tile>
  __device__ __forceinline__ void load_rows(Tile& tile, const CUtensorMap* map, ptx::Mbarrier* full,
                                            int first_row, int head, int map_batch,
                                            ptx::CacheHint hint) {
#pragma unroll
    for (int slab = 0; slab < Tile::kSlabs; ++slab) {
      ptx::load_4d(tile.data + slab * Tile::kRowCount * kSlabColumns, map, full,
                   slab * kSlabColumns, first_row, head, map_batch, hint);
    }
  }

  __device__ void run(const KeyTile& tile, const TileSteps<Config>& blocks) {
    // K and V are read by this CTA alone, unless its GQA group is split over CTAs; Q and dO by
    // every CTA of the head (keep them in L2).
    const int first_key = tile.seq.k_offset + tile.n_block * Config::kBlockN;
    const ptx::CacheHint kv_hint = p.heads_per_tile < p.heads_per_kv ? ptx::CacheHint::evict_last
                                                                     : ptx::CacheHint::evict_first;
    smem.kv_full.arrive_expect_tx(Storage::KTile::kBytes + Storage::VTile::kBytes);
    load_rows(smem.k, &p.k_map, &smem.kv_full, first_key, tile.kv_head, tile.seq.map_batch, kv_hint);
    load_rows(smem.v, &p.v_map, &smem.kv_full, first_key, tile.kv_head, tile.seq.map_batch, kv_hint);

    ptx::RingPosition<Config::kStagesQ> q_ring;
    ptx::RingPosition<Config::kStagesDO> do_ring;
    for_each_step<Config>(p, tile, blocks, [&](int head, int m) {
      const int first_query = tile.seq.q_offset + m * Config::kBlockM;
      const int64_t stats = workspace_row<Config::kBlockM>(p, tile.batch, head) + m * Config::kBlockM;
      smem.q_empty[q_ring.stage].wait(q_ring.phase ^ 1);
      ptx::Mbarrier* q_full = &smem.q_full[q_ring.stage];
      q_full->arrive_expect_tx(Storage::QTile::kBytes + kStatBytes);
      load_rows(smem.q[q_ring.stage], &p.q_map, q_full, first_query, head, tile.seq.map_batch,
                ptx::CacheHint::evict_last);
      ptx::load_1d(smem.lse_log2[q_ring.stage], p.ws.lse_log2 + stats, kStatBytes, q_full,
                   ptx::CacheHint::evict_last);
      q_ring.advance();

      smem.do_empty[do_ring.stage].wait(do_ring.phase ^ 1);
      ptx::Mbarrier* do_full = &smem.do_full[do_ring.stage];
      do_full->arrive_expect_tx(Storage::DOTile::kBytes + kStatBytes);
      load_rows(smem.dout[do_ring.stage], &p.do_map, do_full, first_query, head,
                tile.seq.map_batch, ptx::CacheHint::evict_last);
      ptx::load_1d(smem.dpsum[do_ring.stage], p.ws.dpsum + stats, kStatBytes, do_full,
                   ptx::CacheHint::evict_last);
      do_ring.advance();
    });
  }
};

template <typename Config, typename Element>
struct DqWriter {
  using Storage = SharedStorage<Config, Element>;
  using Dq = typename Storage::Dq;

  const Params& p;
  Storage& smem;

  __device__ void run(const KeyTile& tile, const TileSteps<Config>& blocks) {
    ptx::RingPosition<Config::kStagesDq> ring;
    for_each_step<Config>(p, tile, blocks, [&](int head, int m) {
      const int64_t chunk = dq_chunk_index<Config::kBlockM>(p, tile.batch, head, m);
      float* accumulator = p.ws.dq_accum + chunk * Dq::kFloats;
      const float* tile_dq = smem.dq[ring.stage];
      smem.dq_full[ring.stage].wait(ring.phase);
      // Block-sparse is never deterministic (the backend refuses it): its turns compiled out.
      if (!Config::kBlockSparse && p.ws.dq_turns != nullptr) {
        // Deterministic: the key blocks of query block m add in turn (Scheduler::turn). Wait
        // for ours, add, wait until the adds have landed (not only read shared memory), pass
        // the turn on.
        int32_t* turns = p.ws.dq_turns + chunk;
        ptx::wait_flag(turns, Scheduler<Config>::turn(p, tile, m));
        ptx::fence_proxy_async_global();
        ptx::reduce_add_1d(accumulator, tile_dq, Dq::kBytes);
        ptx::store_commit_group();
        ptx::store_wait_all();
        ptx::fence_proxy_async_global();
        ptx::pass_flag(turns);
      } else {
        ptx::reduce_add_1d(accumulator, tile_dq, Dq::kBytes);
        ptx::store_commit_group();
        // The tile is free once the add has read it; waiting until it has landed as well held
        // the consumers' next dQ tile back (docs/decisions/026).
        ptx::store_wait_read();
      }
      smem.dq_empty[ring.stage].arrive();
      ring.advance();
    });
  }
};

}  // namespace hfa::sm90::bwd
