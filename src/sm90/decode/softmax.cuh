// The online softmax of a decode consumer's lane: the running max (log2 domain) and sum of the
// two query rows its accumulator fragments hold ("halves"). The lanes that hold the same rows
// exchange their maxima and sums by XOR shuffles over masks kFirstMask, 2·kFirstMask, … below
// kEndMask: lanes 4g … 4g+3 (masks 1, 2) when rows are the mma's M (the tile consumer), lanes
// c, c+4, … c+28 (masks 4, 8, 16) when they are its N (the stream consumer).
#pragma once

#include <math.h>

#include "sm90/common/math.hpp"
#include "sm90/decode/work.cuh"  // kFullWarp

namespace hfa::sm90::decode {

// A warp's partial LSE (natural log) from its running max (log2 domain) and sum: -inf for a row
// that saw no key, NaN kept when the sum is NaN (a NaN in the cache poisons the row).
__device__ __forceinline__ float warp_partial_lse(float row_max_log2, float row_sum) {
  const bool empty = row_max_log2 == -INFINITY || !(row_sum > 0.0f);
  if (empty) return row_sum != row_sum ? row_sum : -INFINITY;
  return (row_max_log2 + log2f(row_sum)) * kLn2;
}

template <int kFirstMask, int kEndMask>
struct RowSoftmax {
  // The sums before the maxima: the order the kernels declared them in, which their loops' phi
  // order and so the SASS follow.
  float row_sum[2] = {0.0f, 0.0f};
  float row_max[2] = {-INFINITY, -INFINITY};

  // Takes a stage's maxima of the lane's scores to the rows' maxima over the lanes; whether
  // some row's running max grows with them.
  __device__ __forceinline__ bool reduce_tile_max(float (&tile_max)[2]) const {
    bool grew = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int mask = kFirstMask; mask < kEndMask; mask *= 2)
        tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(kFullWarp, tile_max[h], mask));
      grew |= tile_max[h] > row_max[h];
    }
    return grew;
  }

  // Raises row h's max to cover tile_max; returns the factor its output (and, done here, its
  // sum) is rescaled by.
  __device__ __forceinline__ float raise_max(int h, float tile_max) {
    const float new_max = fmaxf(row_max[h], tile_max);
    const float rescale = row_max[h] == -INFINITY ? 0.0f : exp2f(row_max[h] - new_max);
    row_max[h] = new_max;
    row_sum[h] *= rescale;
    return rescale;
  }

  // The weight of score x (log2 domain) of row h, added to the row's sum.
  __device__ __forceinline__ float probability(int h, float x) {
    const float base = row_max[h] == -INFINITY ? 0.0f : row_max[h];
    const float weight = exp2f(x - base);
    row_sum[h] += weight;
    return weight;
  }

  // After the last stage: row h's sum over its lanes, then what its output is multiplied by
  // (1 / sum, or unit / sum with kUnit; 0 for a row that saw no key) and its LSE. The literal
  // 1 / sum is one reciprocal under fast math: a unit of 1 passed in becomes a division.
  __device__ __forceinline__ void sum_lanes(int h) {
#pragma unroll
    for (int mask = kFirstMask; mask < kEndMask; mask *= 2)
      row_sum[h] += __shfl_xor_sync(kFullWarp, row_sum[h], mask);
  }
  template <bool kUnit = false>
  __device__ __forceinline__ float normalizer(int h, float unit = 1.0f) const {
    if constexpr (kUnit)
      return row_max[h] == -INFINITY || !(row_sum[h] > 0.0f) ? 0.0f : unit / row_sum[h];
    else
      return row_max[h] == -INFINITY || !(row_sum[h] > 0.0f) ? 0.0f : 1.0f / row_sum[h];
  }
  __device__ __forceinline__ float lse(int h) const {
    return warp_partial_lse(row_max[h], row_sum[h]);
  }
};

}  // namespace hfa::sm90::decode
