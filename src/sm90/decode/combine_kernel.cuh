// Merges the split partials of every query row by LSE (common/combine_splits.hpp, the CPU's
// merge): one warp per row, hdim / 32 consecutive columns per lane, so the partials are read
// coalesced. One kernel per scheduler part (work.cuh): the uniform plan's splits, the same count
// for every row, and the balanced schedule's slots, a count per sequence.
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

// A merged row's columns first … first + kColumns − 1 into out, and its LSE (lane 0).
template <typename Element, int kColumns>
__device__ __forceinline__ void store_merged_row(const Params& p, int64_t row_id, int first,
                                                 const float (&merged)[kColumns], float lse,
                                                 int lane) {
  Element* out = static_cast<Element*>(p.out) + out_offset_of_row(p, row_id) + first;
#pragma unroll
  for (int k = 0; k < kColumns; ++k) out[k] = ptx::to_element<Element>(merged[k]);
  if (lane == 0 && p.lse != nullptr) p.lse[row_id] = lse;
}

// The uniform plan's: every row has num_splits partials.
template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const __grid_constant__ Params p) {
  constexpr int kColumnsPerLane = kHeadDim / kCombineLanes;
  static_assert(kColumnsPerLane * kCombineLanes == kHeadDim, "every lane the same columns");
  const int lane = threadIdx.x % kCombineLanes;
  const int64_t row_id = int64_t(blockIdx.x) * kCombineRowsPerBlock + threadIdx.x / kCombineLanes;
  if (row_id >= p.rows_total) return;
  float merged[kColumnsPerLane];
  const int first = lane * kColumnsPerLane;
  const float lse = detail::combine_splits(p.partial_lse + row_id * p.num_splits,
                                           p.partial_out + row_id * kHeadDim + first,
                                           p.rows_total * kHeadDim, p.num_splits,
                                           kColumnsPerLane, merged);
  store_merged_row<Element>(p, row_id, first, merged, lse, lane);
}

// The balanced schedule's (split_schedule.hpp): grid (row groups, sequence). A sequence one part
// finished has no slot and is final already; a split one's rows merge its pieces' partials, as
// many as it has slots (work.cuh's PartialRows: slot row h · seqlen_q + i).
template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(kCombineThreads)
    scheduled_combine_kernel(const __grid_constant__ Params p) {
  constexpr int kColumnsPerLane = kHeadDim / kCombineLanes;
  static_assert(kColumnsPerLane * kCombineLanes == kHeadDim, "every lane the same columns");
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
  const int lane = threadIdx.x % kCombineLanes;
  const int first = lane * kColumnsPerLane;
  float merged[kColumnsPerLane];
  const int64_t first_row = first_slot * slot_rows;  // of the sequence's first slot
  const float lse = detail::combine_splits(p.partial_lse + first_row + row * slots,
                                           p.partial_out + (first_row + row) * kHeadDim + first,
                                           slot_rows * kHeadDim, slots, kColumnsPerLane, merged);
  store_merged_row<Element>(p, query_row_id(p, b, h, seq.q_begin + i), first, merged, lse, lane);
}

}  // namespace hfa::sm90::decode
