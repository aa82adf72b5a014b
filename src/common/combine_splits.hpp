// Merging partial attention results by LSE: the keys of a query row are split into parts, each
// part gives a normalized partial output o_s and its log-sum-exp lse_s, and this merges them:
//   lse = log Σ_s exp(lse_s),   out = Σ_s exp(lse_s − lse) · o_s.
// Shared by the CPU backend and (host/device) the GPU's kernels: split-KV's combine
// (combine_splits) and hfa_merge_partials (common/merge_partials.hpp) merge alike.
#pragma once

#include <math.h>

#include <cstdint>

#include "common/host_device.hpp"

namespace hfa::detail {

// The merge's scalars for one row, fed the row's partial LSEs twice: see() each (their max),
// then add() each (Σ exp(lse_s − max)). A partial of LSE −inf (its keys hide from the row) does
// not contribute: it is skipped, so its output is never read and may hold anything. A NaN LSE
// (NaN in the inputs) poisons the row rather than vanish.
class LseMerge {
 public:
  HFA_HD static bool contributes(float lse) { return lse != -INFINITY; }

  HFA_HD void see(float lse) {
    if (max_lse_ != max_lse_) return;  // NaN already: it sticks
    if (lse != lse || lse > max_lse_) max_lse_ = lse;
  }
  // No partial contributes: out = 0 and lse() = −inf.
  HFA_HD bool empty() const { return max_lse_ == -INFINITY; }

  HFA_HD void add(float lse) {
    if (contributes(lse)) sum_ += expf(lse - max_lse_);
  }

  // After every add(), the weight of a contributing partial's output. Relative to the largest
  // LSE: every exp is in (0, 1], so nothing overflows, and no weight goes through the rounded
  // merged LSE (at LSE 1000 its fp32 rounding alone would be a relative error of 6e-5 in every
  // weight).
  HFA_HD float weight(float lse) const { return expf(lse - max_lse_) * (1.0f / sum_); }
  // The merged LSE: −inf for an empty row (log 0), NaN for a poisoned one.
  HFA_HD float lse() const { return max_lse_ + logf(sum_); }

 private:
  float max_lse_ = -INFINITY;
  float sum_ = 0.0f;
};

// A running result (out_before, lse_before) merged with one more partial (out_call, lse_call):
// hfa_options.accumulate, LseMerge's rule with the running result first. A backend applies
//   out = (reads_before ? before · out_before : 0) + call · out_call
// to each value of the row: out_before is read only where it contributes (lse_before −inf means
// no result yet, and its out may hold anything).
struct RunningMerge {
  float before = 0.0f, call = 0.0f;  // the weights
  bool reads_before = false;
  float lse = -INFINITY;
};

HFA_HD inline RunningMerge merge_with_running(float lse_before, float lse_call) {
  LseMerge merge;
  merge.see(lse_before);
  merge.see(lse_call);
  merge.add(lse_before);
  merge.add(lse_call);
  RunningMerge m;
  m.reads_before = LseMerge::contributes(lse_before);
  if (m.reads_before) m.before = merge.weight(lse_before);
  if (LseMerge::contributes(lse_call)) m.call = merge.weight(lse_call);
  m.lse = merge.lse();
  return m;
}

// The merge of num_splits partials by LSE (natural log; −inf for a split whose keys the row does
// not see): add_partial(s, weight) for each split that contributes, in order, and the merged LSE
// returned; a row whose every split is empty gets −inf and no call. The caller owns the columns:
// combine_splits below walks them one by one, the GPU's combine kernels as their lanes read them.
template <typename AddPartial>
HFA_HD float merge_splits(const float* partial_lse, int num_splits, AddPartial&& add_partial) {
  LseMerge merge;
  for (int s = 0; s < num_splits; ++s) merge.see(partial_lse[s]);
  if (merge.empty()) return -INFINITY;
  for (int s = 0; s < num_splits; ++s) merge.add(partial_lse[s]);
  for (int s = 0; s < num_splits; ++s)
    if (LseMerge::contributes(partial_lse[s])) add_partial(s, merge.weight(partial_lse[s]));
  return merge.lse();
}

// Split-KV ("flash-decoding"): partial_lse[s] and its d outputs at partial_out + s·split_stride.
// Writes out[0, d) and returns the merged LSE. A row whose every split is empty gets out = 0 and
// −inf, never NaN.
HFA_HD inline float combine_splits(const float* partial_lse, const float* partial_out,
                                   int64_t split_stride, int num_splits, int d, float* out) {
  for (int c = 0; c < d; ++c) out[c] = 0.0f;
  return merge_splits(partial_lse, num_splits, [&](int s, float weight) {
    const float* o = partial_out + s * split_stride;
    for (int c = 0; c < d; ++c) out[c] += weight * o[c];
  });
}

}  // namespace hfa::detail
