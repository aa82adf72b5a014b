// A consumer warpgroup's epilogue: normalize O and store it, and the LSE.
//
// O leaves through a shared-memory buffer of its own and one TMA store of the warpgroup's 64 rows
// where the configuration has room for the buffer (shared_storage.cuh) and the rows allow
// (stores_by_tma): the warpgroup is free for its next tile as soon as stmatrix has written the
// buffer, and the copy engine writes whole 128-byte rows while the next tile's GEMMs run.
// Elsewhere O is stored straight from registers, each quad 16 contiguous bytes of a row.
// Where only one 128-byte slab of O's columns fits, the slabs take turns in it.
// Measured (CUDA-graph replay, docs/decisions/010): 64 × 128 tokens at hdim 128 causal
// 46.9 → 34.5 µs, the other short causal shapes 5-18 % faster, FP8 hdim 128 causal 2k +31 %;
// one slab at a time: hdim 128 non-causal 512 and 1k tokens +8 / +5 %, FP8 hdim 256 +1-11 %.
// (Not Q's buffer: while O sat there the next tile's Q could not load, and every tile boundary
// waited for the store to drain, then for Q. Measured, docs/decisions/010: storing from
// registers instead was +8 % to +39 % at seqlen 512.)
#pragma once

#include "common/combine_splits.hpp"
#include "common/score_policy.hpp"
#include "sm90/common/math.hpp"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/shared_storage.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/fwd/tile_config.hpp"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/matrix_move.cuh"
#include "sm90/ptx/named_barrier.cuh"
#include "sm90/ptx/tma.cuh"

namespace hfa::sm90::fwd {

template <typename Config>
struct Epilogue {
  using Out = typename Config::Out;
  using Storage = SharedStorage<Config>;
  static constexpr int kOAcc = Config::kHeadDimV / 2;

  const Params& p;
  Storage& smem;
  int warpgroup;
  int thread;

  // scale_log2: the one the softmax took (the tile's, with FP8 scales); value_scale: what O's
  // units are (FP8: v's scale, 1 otherwise).
  __device__ void store(const WorkTile& tile, float (&o)[kOAcc], const OnlineSoftmax& softmax,
                        float scale_log2, float value_scale) {
    const ptx::FragmentCoords at = ptx::fragment_coords(thread);
    // The thread's two rows (8 apart) as (query, head); with PackGQA their heads may differ.
    const int row0 = warpgroup_first_row(tile) + at.row0;
    const int head_in_group_mask = (1 << p.pack_shift) - 1;
    int query[2], head[2];
    const policy::SinkLogit sinks{p.sinks};  // the score policy's row term
    float sink_log2[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + 8 * half;
      query[half] = query_of_row(p, row);
      head[half] = (tile.head << p.pack_shift) + (row & head_in_group_mask);
      sink_log2[half] = sinks.log2(head[half]);
    }
    float normalizer[2], lse[2];
    softmax.finalize<Config::kMaxOffset, Config::kRowSumsByMma>(scale_log2, sink_log2,
                                                                 normalizer, lse);
    if constexpr (Config::kFp8) {
      normalizer[0] *= value_scale;
      normalizer[1] *= value_scale;
    }
    scale_rows(o, normalizer);

    if constexpr (Config::kPartialOut) {
      if (p.accumulate) return merge_into_running(tile, o, lse, query, head, at);
    }

    if constexpr (Storage::kStagesOut) {
      if (stores_by_tma(tile)) {
        store_by_tma(tile, o);
      } else {
        store_from_registers(tile, o, query, head, at);
      }
    } else {
      store_from_registers(tile, o, query, head, at);
    }

    if (p.lse != nullptr && at.column_pair == 0) {
      // Varlen LSE is (heads, total_q): batch stride 0, rows from the sequence's offset.
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (query[half] >= tile.seq.seqlen_q) continue;
        p.lse[tile.batch * p.lse_batch_stride + head[half] * p.lse_head_stride +
              tile.seq.q_offset + query[half]] = lse[half];
      }
    }
  }

  // After the last tile: the warpgroup's TMA stores have read the buffer before the CTA exits.
  __device__ __forceinline__ void finish() {
    if constexpr (Storage::kStagesOut) {
      if (thread == 0) ptx::store_wait_all();
    }
  }

 private:
  // The warpgroup's rows go out by TMA (in a configuration that stages O) when out suits TMA
  // and the map's bounds end where the sequence's used rows do, or the rows all lie inside them
  // (a varlen map runs on into the next sequence).
  __device__ __forceinline__ bool stores_by_tma(const WorkTile& tile) const {
    if (!p.out_by_tma) return false;
    if (p.out_map_ends_sequences) return true;
    return query_of_row(p, warpgroup_first_row(tile) + kRowsPerWarpgroup - 1) < tile.seq.seqlen_q;
  }

  __device__ __forceinline__ int warpgroup_first_row(const WorkTile& tile) const {
    return tile.m_block * Config::kBlockM + warpgroup * kRowsPerWarpgroup;
  }

  // O into the warpgroup's rows of the buffer (stmatrix: per 16 columns, the 8×8 matrices of
  // rows 0-7 and 8-15 of each 8-column group, as the fragment holds them), then one TMA store a
  // slab; in passes of the buffer's columns where it holds fewer than O has. The buffer is free
  // once the warpgroup's previous store has read it.
  __device__ void store_by_tma(const WorkTile& tile, const float (&o)[kOAcc]) {
    using OutTile = typename Storage::OutTile;
    constexpr int kColumns = Storage::kOutColumns;
    constexpr int kSlabElements = OutTile::kSlabBytes / sizeof(Out);
    const uint32_t barrier = ptx::barrier_id(ptx::NamedBarrier::out_staged, warpgroup);
    const int lane = thread % 32, matrix = lane / 8;
    const int row = warpgroup * kRowsPerWarpgroup + thread / 32 * 16 + matrix % 2 * 8 + lane % 8;
    const uint32_t buffer = ptx::smem_address(smem.out.data);
    const int first_query = query_of_row(p, warpgroup_first_row(tile));
#pragma unroll
    for (int pass = 0; pass < Config::kHeadDimV / kColumns; ++pass) {
      if (thread == 0) ptx::store_wait_read();
      ptx::named_barrier_sync(barrier, kThreadsPerWarpgroup);
#pragma unroll
      for (int k = pass * kColumns / 16; k < (pass + 1) * kColumns / 16; ++k) {
        const uint32_t pairs[4] = {ptx::pack_pair<Out>(o[8 * k], o[8 * k + 1]),
                                   ptx::pack_pair<Out>(o[8 * k + 2], o[8 * k + 3]),
                                   ptx::pack_pair<Out>(o[8 * k + 4], o[8 * k + 5]),
                                   ptx::pack_pair<Out>(o[8 * k + 6], o[8 * k + 7])};
        const int column = 16 * k - pass * kColumns + matrix / 2 * 8;
        ptx::stmatrix_x4(buffer + OutTile::offset(row, column), pairs);
      }
      ptx::fence_proxy_async_smem();
      ptx::named_barrier_sync(barrier, kThreadsPerWarpgroup);
      if (thread == 0) {
#pragma unroll
        for (int slab = 0; slab < OutTile::kSlabs; ++slab) {
          ptx::store_5d(&p.out_map,
                        smem.out.data + slab * kSlabElements +
                            warpgroup * kRowsPerWarpgroup * OutTile::kSlabColumns,
                        pass * kColumns + slab * OutTile::kSlabColumns, 0,
                        tile.seq.q_offset + first_query, tile.head, tile.seq.map_batch);
        }
        ptx::store_commit_group();
      }
    }
  }

  __device__ void store_from_registers(const WorkTile& tile, const float (&o)[kOAcc],
                                       const int (&query)[2], const int (&head)[2],
                                       const ptx::FragmentCoords& at) {
    Out* out = static_cast<Out*>(p.out) + tile.batch * p.out_stride.batch;
    // Each quad writes 16 contiguous bytes of a row per 8-column group (32 of f32): whole
    // 32-byte sectors once the neighbouring group lands, merged in L2. Columns past hdim_v
    // exist only in a padded configuration and are not stored.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (query[half] >= tile.seq.seqlen_q) continue;
      Out* out_row = out + int64_t(tile.seq.q_offset + query[half]) * p.out_stride.row +
                     head[half] * p.out_stride.head;
#pragma unroll
      for (int i = 2 * half; i < kOAcc; i += 4) {
        const int column = ptx::fragment_column(i, at.column_pair);
        if (column >= p.hdim_v) continue;
        store_pair(out_row + column, o[i], o[i + 1]);
      }
    }
  }

  static __device__ __forceinline__ void store_pair(Out* at, float lo, float hi) {
    if constexpr (Config::kPartialOut) {
      *reinterpret_cast<float2*>(at) = make_float2(lo, hi);
    } else {
      *reinterpret_cast<uint32_t*>(at) = ptx::pack_pair<Out>(lo, hi);
    }
  }

  // (The store above spells this out: as a call there it changed the 16-bit kernels' code.)
  __device__ int64_t lse_index(const WorkTile& tile, int head, int query) const {
    return tile.batch * p.lse_batch_stride + head * p.lse_head_stride + tile.seq.q_offset + query;
  }

  // accumulate: each row merged into the running result of earlier calls, out (f32) and lse,
  // by hfa_merge_partials' rule (common/combine_splits.hpp). The four threads of a quad share a
  // row: all read its old LSE before the first of them writes the new one.
  __device__ void merge_into_running(const WorkTile& tile, const float (&o)[kOAcc],
                                     const float (&lse)[2], const int (&query)[2],
                                     const int (&head)[2], const ptx::FragmentCoords& at) {
    detail::RunningMerge merge[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const bool in_sequence = query[half] < tile.seq.seqlen_q;
      const float before = in_sequence ? p.lse[lse_index(tile, head[half], query[half])] : -INFINITY;
      merge[half] = detail::merge_with_running(before, lse[half]);
    }
    __syncwarp();
    Out* out = static_cast<Out*>(p.out) + tile.batch * p.out_stride.batch;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (query[half] >= tile.seq.seqlen_q) continue;
      const detail::RunningMerge& m = merge[half];
      Out* out_row = out + int64_t(tile.seq.q_offset + query[half]) * p.out_stride.row +
                     head[half] * p.out_stride.head;
#pragma unroll
      for (int i = 2 * half; i < kOAcc; i += 4) {
        const int column = ptx::fragment_column(i, at.column_pair);
        if (column >= p.hdim_v) continue;
        float2* running = reinterpret_cast<float2*>(out_row + column);
        const float2 old = m.reads_before ? *running : make_float2(0.0f, 0.0f);
        *running = make_float2(fmaf(m.before, old.x, m.call * o[i]),
                               fmaf(m.before, old.y, m.call * o[i + 1]));
      }
      if (at.column_pair == 0) p.lse[lse_index(tile, head[half], query[half])] = m.lse;
    }
  }
};

}  // namespace hfa::sm90::fwd
