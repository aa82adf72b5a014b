// The producer: one thread that walks the same tiles as the consumers and keeps the Q buffer
// and the K/V rings full with TMA, V one block behind K (the consumers need K(n) for S before
// they need V(n) for P·V). FP8 reads V from its transposed copy (transpose_v.cuh), or, with
// the transpose in the kernel (VTransposingTileConfig), stages V as stored for the transposing
// warps (v_transposer.cuh), which write the V stages.
#pragma once

#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/shared_storage.cuh"
#include "sm90/fwd/transpose_v.cuh"
#include "sm90/ptx/tma.cuh"

namespace hfa::sm90::fwd {

template <typename Config>
struct Producer {
  using Storage = SharedStorage<Config>;
  using Ring = ptx::RingPosition<Config::kStages>;
  static constexpr int kSlabColumns = Config::kSlabColumns;
  static constexpr int kQSlabElements = Config::kBlockM * kSlabColumns;
  static constexpr int kKVSlabElements = Config::kBlockN * kSlabColumns;
  static constexpr int kVtSlabElements = Config::kHeadDimV * kSlabColumns;

  const Params& p;
  Storage& smem;
  // Where the next V block goes: a V stage, or with the in-kernel transpose a stage of the
  // staging ring (stage_v).
  using VRing = ptx::RingPosition<Config::kTransposesVInKernel ? Storage::kStagingStages
                                                               : Config::kStages>;
  Ring k_ring;
  VRing v_ring;
  ptx::RingPosition<Storage::kQStages> q_ring;

  __device__ __forceinline__ void load_q(const WorkTile& tile) {
    // The last Q·Kᵀ of the tile that used this buffer before is done with it.
    smem.q_empty[q_ring.stage].wait(q_ring.phase ^ 1);
    ptx::Mbarrier& full = smem.q_full[q_ring.stage];
    full.arrive_expect_tx(Storage::QTile::kBytes);
#pragma unroll
    for (int slab = 0; slab < Config::kSlabsQK; ++slab) {
      ptx::load_5d(smem.q[q_ring.stage].data + slab * kQSlabElements, &p.q_map, &full,
                   slab * kSlabColumns, 0, tile.seq.q_offset + first_query<Config>(p, tile),
                   tile.head, tile.seq.map_batch, ptx::CacheHint::evict_first);
    }
    q_ring.advance();
  }

  template <typename Tile>
  __device__ __forceinline__ void load_kv(Tile (&stages)[Config::kStages],
                                          ptx::Mbarrier (&full)[Config::kStages],
                                          ptx::Mbarrier (&empty)[Config::kStages], Ring& ring,
                                          const CUtensorMap* map, int n_block, int kv_head,
                                          const Sequence& seq) {
    empty[ring.stage].wait(ring.phase ^ 1);
    full[ring.stage].arrive_expect_tx(Tile::kBytes);
#pragma unroll
    for (int slab = 0; slab < Tile::kSlabs; ++slab) {
      ptx::load_4d(stages[ring.stage].data + slab * kKVSlabElements, map, &full[ring.stage],
                   slab * kSlabColumns, seq.k_offset + n_block * Config::kBlockN, kv_head,
                   seq.map_batch, ptx::CacheHint::evict_last);
    }
    ring.advance();
  }

  __device__ __forceinline__ void load_k(int n_block, int kv_head, const Sequence& seq) {
    load_kv(smem.k, smem.k_full, smem.k_empty, k_ring, &p.k_map, n_block, kv_head, seq);
  }
  // A slab of transposed V is the head dims × 128 keys; the tile's last slab may run past its
  // keys (TileConfig::kBlockNSlabbed).
  __device__ __forceinline__ void load_vt(int n_block, int kv_head, int64_t vt_first_key) {
    smem.v_empty[v_ring.stage].wait(v_ring.phase ^ 1);
    smem.v_full[v_ring.stage].arrive_expect_tx(Storage::VTile::kBytes);
#pragma unroll
    for (int slab = 0; slab < Storage::VTile::kSlabs; ++slab) {
      ptx::load_4d(smem.v[v_ring.stage].data + slab * kVtSlabElements, &p.v_map,
                   &smem.v_full[v_ring.stage],
                   int(vt_first_key) + n_block * Config::kBlockN + slab * kSlabColumns, 0, kv_head,
                   0, ptx::CacheHint::evict_last);
    }
    v_ring.advance();
  }

  // In-kernel transpose: V as stored into the staging ring, with the keys of the block that its
  // sequence uses (written before the barrier's arrival, which releases it to the waiters).
  __device__ __forceinline__ void stage_v(int n_block, int kv_head, const Sequence& seq) {
    using Staging = typename Storage::Staging;
    Staging& staging = smem.staging;
    ptx::Mbarrier& full = staging.full[v_ring.stage];
    staging.empty[v_ring.stage].wait(v_ring.phase ^ 1);
    staging.used_keys[v_ring.stage] = seq.seqlen_k - n_block * Config::kBlockN;
    full.arrive_expect_tx(Staging::Tile::kBytes);
#pragma unroll
    for (int slab = 0; slab < Staging::Tile::kSlabs; ++slab) {
      ptx::load_4d(staging.tiles[v_ring.stage].data + slab * kKVSlabElements, &p.v_map,
                   &full, slab * kSlabColumns, seq.k_offset + n_block * Config::kBlockN, kv_head,
                   seq.map_batch, ptx::CacheHint::evict_last);
    }
    v_ring.advance();
  }

  // Tells the transposing warps that no V block comes after those staged.
  __device__ __forceinline__ void end_staging() {
    smem.staging.empty[v_ring.stage].wait(v_ring.phase ^ 1);
    smem.staging.used_keys[v_ring.stage] = kNoMoreVBlocks;
    smem.staging.full[v_ring.stage].arrive();
  }

  __device__ __forceinline__ void load_v(int n_block, int kv_head, const WorkTile& tile) {
    if constexpr (Config::kTransposesVInKernel) {
      stage_v(n_block, kv_head, tile.seq);
    } else if constexpr (Config::kFp8) {
      const int64_t first_key =
          p.cu_seqlens_k != nullptr ? tile.seq.k_offset : int64_t(tile.batch) * p.seqlen_k;
      load_vt(n_block, kv_head, vt_key_offset(first_key, tile.batch));
    } else {
      load_kv(smem.v, smem.v_full, smem.v_empty, v_ring, &p.v_map, n_block, kv_head, tile.seq);
    }
  }

  // The first tile from `index` on that has rows (see scheduler.cuh), or num_tiles or more.
  __device__ __forceinline__ int skip_empty(int index) {
    if (p.cu_seqlens_q == nullptr && p.seqused_q == nullptr) return index;  // none is empty
    while (index < p.num_tiles && !tile_has_rows<Config>(p, decode_tile<Config>(p, index))) {
      index = next_tile<Config>(p, index);
    }
    return index;
  }

  // Publishes the next tile's index to the consumers (num_tiles or more: no more work).
  __device__ __forceinline__ void announce(int index, ptx::RingPosition<Storage::kTileSlots>& slot) {
    smem.tile_empty[slot.stage].wait(slot.phase ^ 1);
    smem.tile_slot[slot.stage] = index;
    smem.tile_full[slot.stage].arrive();
    slot.advance();
  }

  __device__ void run() {
    ptx::RingPosition<Storage::kTileSlots> slot;
    for (int index = skip_empty(blockIdx.x);; index = skip_empty(next_tile<Config>(p, index))) {
      announce(index, slot);
      if (index >= p.num_tiles) break;
      const WorkTile tile = decode_tile<Config>(p, index);
      // Walk positions, as the consumers take them (block-sparse: the mask's listed blocks).
      const TileBlocks<Config> blocks = block_range<Config>(p, tile);
      const int kv_head = (tile.head << p.pack_shift) / p.heads_per_kv;
      // The first K of the tile goes before Q: Q may wait for an earlier tile's last Q·Kᵀ
      // (single-buffered: the previous tile's), and this K load need not wait with it.
      if (blocks.count() > 0) load_k(blocks.key_block(blocks.end - 1), kv_head, tile.seq);
      load_q(tile);
      if (blocks.count() == 0) continue;
      for (int n = blocks.end - 2; n >= blocks.begin; --n) {
        load_k(blocks.key_block(n), kv_head, tile.seq);
        load_v(blocks.key_block(n + 1), kv_head, tile);
      }
      load_v(blocks.key_block(blocks.begin), kv_head, tile);
    }
    if constexpr (Config::kTransposesVInKernel) end_staging();
  }
};

}  // namespace hfa::sm90::fwd
