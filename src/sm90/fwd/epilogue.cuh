// A consumer warpgroup's epilogue: normalize O and store it, and the LSE, straight from
// registers to global memory.
//
// Why not through shared memory and a TMA store: the only buffer free for staging O is Q's, and
// while O sits there the next tile's Q cannot load, so every tile boundary waited for the store
// to drain and then for Q to arrive. Stored from registers, O needs no shared memory, the Q
// buffer is released right after the tile's last Q·Kᵀ, and the next Q loads during the last
// P·V and this epilogue. (Measured, bench/results/README.md: +8 % to +39 % at seqlen 512 where
// tiles are short, within noise at long sequences.)
#pragma once

#include "common/combine_splits.hpp"
#include "sm90/common/math.hpp"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/fwd/tile_config.hpp"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::fwd {

template <typename Config>
struct Epilogue {
  using Out = typename Config::Out;
  static constexpr int kOAcc = Config::kHeadDimV / 2;

  const Params& p;
  int warpgroup;
  int thread;

  // scale_log2: the one the softmax took (the tile's, with FP8 scales); value_scale: what O's
  // units are (FP8: v's scale, 1 otherwise).
  __device__ void store(const WorkTile& tile, float (&o)[kOAcc], const OnlineSoftmax& softmax,
                        float scale_log2, float value_scale) {
    const ptx::FragmentCoords at = ptx::fragment_coords(thread);
    // The thread's two rows (8 apart) as (query, head); with PackGQA their heads may differ.
    const int row0 = tile.m_block * Config::kBlockM + warpgroup * kRowsPerWarpgroup + at.row0;
    const int head_in_group_mask = (1 << p.pack_shift) - 1;
    int query[2], head[2];
    float sink_log2[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + 8 * half;
      query[half] = query_of_row(p, row);
      head[half] = (tile.head << p.pack_shift) + (row & head_in_group_mask);
      sink_log2[half] = p.sinks != nullptr ? p.sinks[head[half]] * kLog2e : -INFINITY;
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

 private:
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
