// Online softmax over the two rows a thread holds of each S tile (exp2 domain, scale folded in).
#pragma once

#include <cmath>

#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::fwd {

// Row reductions over the 4 lanes (a quad) that share a row of the fragment.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

struct OnlineSoftmax {
  float row_max[2];  // of raw scores seen so far (−inf: none yet)
  float row_sum[2];  // this thread's partial Σ exp2(s·scale_log2 − max·scale_log2); quad-reduced at the end

  __device__ __forceinline__ void reset() {
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.0f;
  }

  // Replaces the scores of s by their exponentials against the updated row maxima and returns,
  // per row, the factor by which everything accumulated so far (O and the sums) shrinks.
  template <int kAcc>
  __device__ __forceinline__ void update(float (&s)[kAcc], float scale_log2, float (&rescale)[2]) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int i = 0; i < kAcc; ++i) {
        if (ptx::fragment_row_half(i) == half) tile_max = fmaxf(tile_max, s[i]);
      }
      const float new_max = fmaxf(row_max[half], quad_max(tile_max));
      // A row that has seen only masked keys keeps max −inf; subtracting 0 instead keeps
      // exp2(−inf − max) = 0 rather than NaN.
      const float max_scaled = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
      rescale[half] = exp2f(row_max[half] * scale_log2 - max_scaled);
      row_max[half] = new_max;
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kAcc; ++i) {
        if (ptx::fragment_row_half(i) == half) {
          s[i] = exp2f(fmaf(s[i], scale_log2, -max_scaled));
          sum += s[i];
        }
      }
      row_sum[half] = fmaf(row_sum[half], rescale[half], sum);
    }
  }

  // Per row: 1/Σ (0 for a row that saw no key) and the natural-log LSE (−inf for such a row).
  __device__ __forceinline__ void finalize(float scale_log2, float (&inverse_sum)[2],
                                           float (&lse)[2]) const {
    constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = quad_sum(row_sum[half]);
      const bool empty = !(sum > 0.0f);  // 0 or NaN
      inverse_sum[half] = empty ? 0.0f : 1.0f / sum;
      lse[half] = empty ? -INFINITY : (row_max[half] * scale_log2 + log2f(sum)) * kLn2;
    }
  }
};

template <int kAcc>
__device__ __forceinline__ void scale_rows(float (&acc)[kAcc], const float (&factor)[2]) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] *= factor[ptx::fragment_row_half(i)];
}

}  // namespace hfa::sm90::fwd
