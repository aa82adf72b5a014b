// hfa_merge_partials as a backend sees it (src/api/merge_partials.cpp builds it), and what both
// backends compute the same way for a row: each partial's weight in it and the merged LSE
// (LseMerge, common/combine_splits.hpp).
#pragma once

#include <math.h>

#include <cstdint>

#include "common/combine_splits.hpp"
#include "common/host_device.hpp"
#include "common/problem.hpp"

namespace hfa::detail {

inline constexpr int kMaxMergePartials = HFA_MAX_MERGE_PARTIALS;
static_assert(kMaxMergePartials <= 32, "a row's live partials are the bits of one uint32_t");

// Rows (b, i, h) of batch · seqlen · heads, each of hdim values, in that order (h fastest: out's
// own order). Varlen is one sequence of total_q rows (a merge needs no sequence bounds). Every
// tensor's strides are in elements, out-like and LSE tensors alike: element (b, i, h) of an LSE
// sits at b·batch + i·row + h·head.
struct MergePartialsProblem {
  struct Partial {
    DType dtype = DType::f32;  // of out: f32, bf16 or f16
    const void* out = nullptr;
    Strides out_stride;
    const float* lse = nullptr;
    Strides lse_stride;
  };
  int32_t num_partials = 0;
  Partial partials[kMaxMergePartials];
  int64_t batch = 0, seqlen = 0, heads = 0;
  int32_t hdim = 0;

  DType out_dtype = DType::f32;  // f32, bf16 or f16
  void* out = nullptr;           // may be partials[k].out itself (in place)
  Strides out_stride;
  float* lse = nullptr;  // null: not wanted; may be partials[k].lse itself
  Strides lse_stride;
  Device device;
  void* stream = nullptr;

  HFA_HD int64_t rows() const { return batch * seqlen * heads; }
};

HFA_HD inline int64_t offset_of(const Strides& s, int64_t b, int64_t i, int64_t h) {
  return b * s.batch + i * s.row + h * s.head;
}

struct RowAt {
  int64_t b, i, h;
};

// Row r in (b, i, h) order. (nvcc divides 64-bit integers in 32 bits when both fit.)
HFA_HD inline RowAt row_at(const MergePartialsProblem& p, int64_t r) {
  const int64_t token = r / p.heads;
  return {token / p.seqlen, token % p.seqlen, r - token * p.heads};
}

// A row's merge: weight[k] of partial k where bit k of `live` is set; the other partials
// contribute nothing and their outputs are never read. lse: the merged one.
struct MergeRow {
  float weight[kMaxMergePartials] = {};
  uint32_t live = 0;
  float lse = -INFINITY;
};

// Reads the row's LSE of every partial once (unrolled: on a GPU the arrays stay in registers),
// all of them before the first is used: a GPU thread then waits for one load, not one per
// partial.
HFA_HD inline MergeRow merge_row(const MergePartialsProblem& p, const RowAt& at) {
  MergeRow row;
  LseMerge merge;
  HFA_UNROLL
  for (int k = 0; k < kMaxMergePartials; ++k) {
    if (k >= p.num_partials) continue;
    const MergePartialsProblem::Partial& part = p.partials[k];
    row.weight[k] = part.lse[offset_of(part.lse_stride, at.b, at.i, at.h)];  // its LSE, for now
  }
  HFA_UNROLL
  for (int k = 0; k < kMaxMergePartials; ++k)
    if (k < p.num_partials) merge.see(row.weight[k]);
  HFA_UNROLL
  for (int k = 0; k < kMaxMergePartials; ++k)
    if (k < p.num_partials) merge.add(row.weight[k]);
  HFA_UNROLL
  for (int k = 0; k < kMaxMergePartials; ++k) {
    if (k >= p.num_partials || !LseMerge::contributes(row.weight[k])) continue;
    row.live |= 1u << k;
    row.weight[k] = merge.weight(row.weight[k]);
  }
  row.lse = merge.lse();
  return row;
}

}  // namespace hfa::detail
