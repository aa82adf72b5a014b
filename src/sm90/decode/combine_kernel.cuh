// Merges the split partials of every query row by LSE (common/combine_splits.hpp's rule, the
// CPU's merge): one warp per row, each of its loads one contiguous span of a partial's row. One
// kernel per scheduler part (work.cuh): the uniform plan's splits, the same count for every row,
// and the balanced schedule's slots, a count per sequence.
#pragma once

#include <cstdint>

#include "common/combine_splits.hpp"
#include "sm90/decode/params.hpp"
#include "sm90/decode/sequence.cuh"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/grid_dependency.cuh"

namespace hfa::sm90::decode {

inline constexpr int kCombineRowsPerBlock = 4;
inline constexpr int kCombineLanes = 32;  // a warp per row
inline constexpr int kCombineThreads = kCombineRowsPerBlock * kCombineLanes;

// A lane's columns of a row: runs of kVector consecutive floats, run k at (k · 32 + lane) ·
// kVector, so that each load of the warp reads one contiguous span of the row (512 bytes at
// hdim 512: a 16-byte load a lane), where consecutive columns a lane read 32 lines a load.
template <int kHeadDim>
struct LaneColumns {
  static constexpr int kPerLane = kHeadDim / kCombineLanes;
  static_assert(kPerLane * kCombineLanes == kHeadDim, "every lane the same columns");
  static constexpr int kVector = kPerLane % 4 == 0 ? 4 : kPerLane % 2 == 0 ? 2 : 1;
  static constexpr int kRuns = kPerLane / kVector;
  __device__ static int first(int lane, int run) { return (run * kCombineLanes + lane) * kVector; }
};

template <int kVector>
__device__ __forceinline__ void load_run(const float* src, float* dst) {
  if constexpr (kVector == 4) {
    const float4 v = *reinterpret_cast<const float4*>(src);
    dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
  } else if constexpr (kVector == 2) {
    const float2 v = *reinterpret_cast<const float2*>(src);
    dst[0] = v.x, dst[1] = v.y;
  } else {
    dst[0] = *src;
  }
}

// One query row merged from its splits' partials (the split s's row at partial_out + s ·
// split_stride, its LSE at partial_lse[s]) by the warp, and stored to out (row row_id) and lse.
template <typename Element, int kHeadDim>
__device__ __forceinline__ void merge_row(const Params& p, const float* partial_lse,
                                          const float* partial_out, int64_t split_stride,
                                          int splits, int64_t row_id) {
  using Columns = LaneColumns<kHeadDim>;
  const int lane = int(threadIdx.x) % kCombineLanes;
  float merged[Columns::kPerLane] = {};
  const float lse = detail::merge_splits(partial_lse, splits, [&](int s, float weight) {
#pragma unroll
    for (int run = 0; run < Columns::kRuns; ++run) {
      float values[Columns::kVector];
      load_run<Columns::kVector>(partial_out + s * split_stride + Columns::first(lane, run),
                                 values);
#pragma unroll
      for (int v = 0; v < Columns::kVector; ++v)
        merged[run * Columns::kVector + v] += weight * values[v];
    }
  });
  Element* out = static_cast<Element*>(p.out) + out_offset_of_row(p, row_id);
#pragma unroll
  for (int run = 0; run < Columns::kRuns; ++run)
#pragma unroll
    for (int v = 0; v < Columns::kVector; ++v)
      out[Columns::first(lane, run) + v] =
          ptx::to_element<Element>(merged[run * Columns::kVector + v]);
  if (lane == 0 && p.lse != nullptr) p.lse[row_id] = lse;
}

// The uniform plan's: every row has num_splits partials.
template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const __grid_constant__ Params p) {
  const int64_t row_id = int64_t(blockIdx.x) * kCombineRowsPerBlock + threadIdx.x / kCombineLanes;
  if (row_id >= p.rows_total) return;
  merge_row<Element, kHeadDim>(p, p.partial_lse + row_id * p.num_splits,
                               p.partial_out + row_id * kHeadDim, p.rows_total * kHeadDim,
                               p.num_splits, row_id);
}

// The balanced schedule's (split_schedule.hpp): grid (row groups, sequence). A sequence one part
// finished has no slot and is final already; a split one's rows merge its pieces' partials, as
// many as it has slots (work.cuh's PartialRows: slot row h · seqlen_q + i).
template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(kCombineThreads)
    scheduled_combine_kernel(const __grid_constant__ Params p) {
  ptx::wait_for_prior_grid();  // a dependent launch: the partials are complete past it
  const int b = int(blockIdx.y);
  const int32_t first_slot = p.first_slot[b];
  const int slots = p.first_slot[b + 1] - first_slot;
  if (slots == 0) return;
  const int64_t slot_rows = int64_t(p.heads_q) * p.seqlen_q;
  const int64_t row = int64_t(blockIdx.x) * kCombineRowsPerBlock + threadIdx.x / kCombineLanes;
  if (row >= slot_rows) return;
  const DecodeSequence seq = decode_sequence(p, b);
  const int h = int(row / p.seqlen_q), i = int(row % p.seqlen_q);
  if (i >= seq.seqlen_q) return;
  const int64_t first_row = first_slot * slot_rows;  // of the sequence's first slot
  merge_row<Element, kHeadDim>(p, p.partial_lse + first_row + row * slots,
                               p.partial_out + (first_row + row) * kHeadDim, slot_rows * kHeadDim,
                               slots, query_row_id(p, b, h, seq.q_begin + i));
}

}  // namespace hfa::sm90::decode
