// Merges the split partials of every query row by LSE (common/combine_splits.hpp, the CPU's
// merge): one warp per row, 4 columns per lane, so the partials are read coalesced.
#pragma once

#include <cstdint>

#include "common/combine_splits.hpp"
#include "sm90/decode/params.hpp"
#include "sm90/decode/sequence.cuh"
#include "sm90/decode/warp_mma.cuh"

namespace hfa::sm90::decode {

inline constexpr int kCombineRowsPerBlock = 4;
inline constexpr int kCombineColumnsPerLane = 4;

template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(kCombineRowsPerBlock * 32)
    combine_kernel(const __grid_constant__ Params p) {
  static_assert(kHeadDim == 32 * kCombineColumnsPerLane);
  const int lane = threadIdx.x % 32;
  const int64_t row_id = int64_t(blockIdx.x) * kCombineRowsPerBlock + threadIdx.x / 32;
  if (row_id >= p.rows_total) return;
  float merged[kCombineColumnsPerLane];
  const int first = lane * kCombineColumnsPerLane;
  const float lse = detail::combine_splits(p.partial_lse + row_id * p.num_splits,
                                           p.partial_out + row_id * kHeadDim + first,
                                           p.rows_total * kHeadDim, p.num_splits,
                                           kCombineColumnsPerLane, merged);
  Element* out = static_cast<Element*>(p.out) + out_offset_of_row(p, row_id) + first;
#pragma unroll
  for (int k = 0; k < kCombineColumnsPerLane; ++k) out[k] = float_to_element<Element>(merged[k]);
  if (lane == 0 && p.lse != nullptr) p.lse[row_id] = lse;
}

}  // namespace hfa::sm90::decode
