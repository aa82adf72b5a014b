// Split-KV ("flash-decoding") merge: the keys of a query row are split into chunks, each chunk
// gives a normalized partial output o_s and its log-sum-exp lse_s, and this merges them:
//   lse = log Σ_s exp(lse_s),   out = Σ_s exp(lse_s − lse) · o_s.
// Shared by the CPU backend and (host/device) the GPU's combine kernel, so both merge alike.
#pragma once

#include <math.h>

#include <cstdint>

#include "common/host_device.hpp"

namespace hfa::detail {

// partial_lse[s] (natural log; −inf for a split whose keys the row does not see) and its d
// outputs at partial_out + s·split_stride. Writes out[0, d) and returns the merged LSE. A row
// whose every split is empty gets out = 0 and −inf, never NaN: an empty split's partial output
// is never read, so it may hold anything.
HFA_HD inline float combine_splits(const float* partial_lse, const float* partial_out,
                                   int64_t split_stride, int num_splits, int d, float* out) {
  float max_lse = -INFINITY;
  for (int s = 0; s < num_splits; ++s) {
    const float l = partial_lse[s];
    if (l != l) {  // a NaN split (NaN in the cache) poisons the row rather than vanish
      max_lse = l;
      break;
    }
    if (l > max_lse) max_lse = l;
  }
  for (int c = 0; c < d; ++c) out[c] = 0.0f;
  if (max_lse == -INFINITY) return -INFINITY;

  // Weights relative to the largest LSE: every exp is in (0, 1], so nothing overflows, and no
  // weight goes through the rounded merged LSE (at LSE 1000 its fp32 rounding alone would be a
  // relative error of 6e-5 in every weight).
  float sum = 0.0f;
  for (int s = 0; s < num_splits; ++s)
    if (partial_lse[s] != -INFINITY) sum += expf(partial_lse[s] - max_lse);
  const float inv_sum = 1.0f / sum;
  for (int s = 0; s < num_splits; ++s) {
    if (partial_lse[s] == -INFINITY) continue;
    const float weight = expf(partial_lse[s] - max_lse) * inv_sum;
    const float* o = partial_out + s * split_stride;
    for (int c = 0; c < d; ++c) out[c] += weight * o[c];
  }
  const float lse = max_lse + logf(sum);
  return lse;
}

}  // namespace hfa::detail
