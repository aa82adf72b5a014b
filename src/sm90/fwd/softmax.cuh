// Online softmax over the two rows a thread holds of each S tile (exp2 domain, scale folded in).
#pragma once

#include <cmath>

#include "sm90/common/math.hpp"
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

  // Replaces the scores of s by their exponentials against the row maxima and returns, per
  // row, the factor by which everything accumulated so far (O and the sums) shrinks. A row's
  // max is its true max (lazy rescaling cost accuracy: docs/decisions/001), and every
  // exponential is MUFU's (a polynomial on the FMA pipes was slower: docs/decisions/002).
  //   kMaxOffset (log2 units): exponentials are taken against max − offset, so they reach
  //     2^offset (FP8's P, see tile_config.hpp); finalize takes the offset out again.
  //   kSumRows: false where the caller sums the rows itself (FP8's P·1, tile_config.hpp) and
  //     hands finalize the sums.
  //   kMaximaFirst (the step of docs/decisions/043, TileConfig::kBranchFreeStep): both rows'
  //     maxima first, two independent FMNMX chains, then the exponentials row by row, and
  //     between(witness) after the first row's and before the second row's. witness is their
  //     sum (taken for it alone without kSumRows: half an FADD a score), so it depends on every
  //     one of them: the main loop orders the wait for its running P·V after them through it
  //     (mainloop.cuh). With FP8's 224-key tiles a sum of every fourth let ptxas compute those
  //     first and reach the wait after 16 of 114 exponentials. Otherwise each row's maximum,
  //     then its exponentials, and between is not called.
  template <int kMaxOffset, bool kSumRows, bool kMaximaFirst, int kAcc, typename Between>
  __device__ __forceinline__ void update(float (&s)[kAcc], float scale_log2, float (&rescale)[2],
                                         Between&& between) {
    float max_scaled[2];
    if constexpr (kMaximaFirst) {
      max_scaled[0] = settle_max<kMaxOffset>(s, 0, scale_log2, rescale);
      max_scaled[1] = settle_max<kMaxOffset>(s, 1, scale_log2, rescale);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if constexpr (!kMaximaFirst) {
        max_scaled[half] = settle_max<kMaxOffset>(s, half, scale_log2, rescale);
      }
      // With kMaximaFirst the first row's sum is taken without kSumRows too, as the witness.
      const bool summed = kSumRows || (kMaximaFirst && half == 0);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kAcc; ++i) {
        if (ptx::fragment_row_half(i) == half) {
          s[i] = exp2f(fmaf(s[i], scale_log2, -max_scaled[half]));
          if (summed) sum += s[i];
        }
      }
      if constexpr (kSumRows) row_sum[half] = fmaf(row_sum[half], rescale[half], sum);
      if constexpr (kMaximaFirst) {
        if (half == 0) between(sum);
      }
    }
  }

  // One row's new maximum over the scores of s (row_max), the factor its past shrinks by
  // (rescale) and what the row's exponentials subtract, returned (scaled, log2 units).
  template <int kMaxOffset, int kAcc>
  __device__ __forceinline__ float settle_max(const float (&s)[kAcc], int half, float scale_log2,
                                              float (&rescale)[2]) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < kAcc; ++i) {
      if (ptx::fragment_row_half(i) == half) tile_max = fmaxf(tile_max, s[i]);
    }
    const float new_max = fmaxf(row_max[half], quad_max(tile_max));
    // A row that has seen only masked keys keeps max −inf; subtracting 0 instead keeps
    // exp2(−inf − max) = 0 rather than NaN.
    const float max_scaled = new_max == -INFINITY ? 0.0f : new_max * scale_log2 - kMaxOffset;
    // Exactly 1 where the max stayed, so that the caller can skip O's rescale (any_rescale).
    rescale[half] = new_max == row_max[half]
                        ? 1.0f
                        : exp2f(row_max[half] * scale_log2 - kMaxOffset - max_scaled);
    row_max[half] = new_max;
    return max_scaled;
  }

  // The row sums of a block from P·1 (Config::kRowSumsByMma; m64n8 fragment: columns 0-1 of row
  // r, 2-3 of row r + 8, each the whole row's sum): added, then scaled by the next block's
  // factors, as O is. Per block and not in the wgmma accumulator across blocks: e4m3 wgmma adds
  // into its accumulator with fewer bits than fp32, and there the sums of 1500 keys fell 1.7 %
  // short (the LSE failed its test bound; out erred 10x more at 16k keys).
  __device__ __forceinline__ void add_block_sums(const float (&sums)[4], const float (&factor)[2]) {
    row_sum[0] = (row_sum[0] + sums[0]) * factor[0];
    row_sum[1] = (row_sum[1] + sums[2]) * factor[1];
  }

  // Per row: the factor that normalizes O and the natural-log LSE. sink_log2: each row's sink
  // logit in log2 units (−inf: none), one more term of the denominator with no value row. A
  // row that saw no key gets factor 0 and LSE −inf, or its sink's logit. kMaxOffset: update's.
  // kWholeSums: row_sum holds whole rows' sums (P·1), not the thread's share of them.
  template <int kMaxOffset, bool kWholeSums>
  __device__ __forceinline__ void finalize(float scale_log2, const float (&sink_log2)[2],
                                           float (&normalizer)[2], float (&lse)[2]) const {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = kWholeSums ? row_sum[half] : quad_sum(row_sum[half]);
      // The point the sums were taken against: exp2(x − row_top) summed.
      const float row_top =
          row_max[half] == -INFINITY ? -INFINITY : row_max[half] * scale_log2 - kMaxOffset;
      const float top = fmaxf(row_top, sink_log2[half]);
      if (top == -INFINITY) {
        normalizer[half] = 0.0f;
        lse[half] = -INFINITY;
        continue;
      }
      const float shrink = exp2f(row_top - top);  // 1 without a sink; 0 for a row with no key
      const float total = fmaf(sum, shrink, exp2f(sink_log2[half] - top));
      normalizer[half] = shrink / total;
      lse[half] = (top + log2f(total)) * kLn2;
    }
  }
};

template <int kAcc>
__device__ __forceinline__ void scale_rows(float (&acc)[kAcc], const float (&factor)[2]) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] *= factor[ptx::fragment_row_half(i)];
}

}  // namespace hfa::sm90::fwd

// Whether any thread of the warp has a factor other than 1 (warp-uniform, so skipping the
// rescale never diverges).
__device__ __forceinline__ bool any_rescale(const float (&factor)[2]) {
  return __any_sync(0xffffffffu, factor[0] != 1.0f || factor[1] != 1.0f);
}
