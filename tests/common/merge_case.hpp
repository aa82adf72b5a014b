// A merge_partials problem for the tests (CPU in tests/merge, GPU in tests/sm90): N partials with
// random outputs and LSEs, rows a partial does not see (LSE −inf, their outputs NaN: a merge that
// reads them poisons its result), rows no partial sees, LSEs far apart, optionally a NaN LSE;
// the float64 merge of the stored values, and the bound a fp32 merge must meet.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/host_tensor.hpp"
#include "hfa/hfa.hpp"

namespace hfa::test {

// (batch, seqlen, heads, hdim); varlen: one run of `seqlen` = total_q rows, batch 1.
struct MergeShape {
  bool varlen = false;
  int64_t batch = 2, seqlen = 5, heads = 3, hdim = 37;

  int64_t rows() const { return batch * seqlen * heads; }
  std::vector<int64_t> out_dims() const {
    if (varlen) return {seqlen, heads, hdim};
    return {batch, seqlen, heads, hdim};
  }
  std::vector<int64_t> lse_dims() const {
    if (varlen) return {heads, seqlen};
    return {batch, heads, seqlen};
  }
  // Logical (row-major) indices of row r = (b, i, h) in (b, i, h) order.
  int64_t out_index(int64_t r, int64_t c) const { return r * hdim + c; }
  int64_t lse_index(int64_t r) const {
    const int64_t h = r % heads, token = r / heads;
    const int64_t b = token / seqlen, i = token % seqlen;
    return (b * heads + h) * seqlen + i;
  }
};

struct MergeReference {
  std::vector<double> out, lse;  // out's and lse's logical order
  // Per output value, what a fp32 merge may be off beyond the output's own rounding: a few fp32
  // ulps of each term weight_k · out_k per partial, and more for a far LSE (a GPU's fast exp is
  // off by ~|lse_k − lse| ulps of its argument).
  std::vector<double> accumulation;
};

class MergeCase {
  MergeShape shape_;  // first: the tensors' shapes come from it

 public:
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  // Partial k's output has dtypes[k % size]; padding makes every tensor strided (HostTensor).
  MergeCase(MergeShape shape, int n, DType out_dtype, std::vector<DType> dtypes, uint64_t seed,
            int64_t padding = 0, bool nan_lse = false)
      : shape_(shape),
        out(out_dtype, shape.out_dims(), padding),
        lse(DType::f32, shape.lse_dims(), padding) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    const int64_t rows = shape.rows();
    for (int k = 0; k < n; ++k) {
      outs.emplace_back(dtypes[k % dtypes.size()], shape.out_dims(), padding);
      outs.back().fill_normal(seed * 131 + k, 1.0 + k);
      lses.emplace_back(DType::f32, shape.lse_dims(), padding);
      lses.back().fill_normal(seed * 137 + k, 3.0, 0.5 * k);
      for (int64_t r = 0; r < rows; ++r) {
        double l = lses.back().get(shape.lse_index(r));
        if (r == 0) l = -kInf;                        // row 0: seen by no partial
        if (r == 1) l = k == 0 ? 1000.0 : 990.0 - k;  // far apart, large: no overflow
        if (r == 2)
          l = k == n - 1 ? -kInf : -1000.0 - 100.0 * k;  // weights underflow but the max's
        if (r > 2 && uniform(rng) < 0.25) l = -kInf;     // masked in this partial
        if (nan_lse && r == 3 && k == n / 2) l = std::numeric_limits<double>::quiet_NaN();
        lses.back().set(shape.lse_index(r), l);
        if (l == -kInf)
          for (int64_t c = 0; c < shape.hdim; ++c)
            outs.back().set(shape.out_index(r, c), std::numeric_limits<double>::quiet_NaN());
      }
    }
    for (int k = 0; k < n; ++k) {
      out_views.push_back(outs[k].view());
      lse_views.push_back(lses[k].view());
    }
  }

  const MergeShape& shape() const { return shape_; }

  // The views merge_partials takes (rebuilt after a test moves the data elsewhere).
  std::vector<const Tensor*> out_pointers() const { return pointers(out_views); }
  std::vector<const Tensor*> lse_pointers() const { return pointers(lse_views); }

  // Σ over the partials that see the row, in float64, of what the tensors hold now.
  MergeReference reference() const {
    MergeReference ref;
    const int64_t rows = shape_.rows(), d = shape_.hdim;
    ref.out.assign(std::size_t(rows * d), 0.0);
    ref.accumulation.assign(ref.out.size(), 0.0);
    const double n = double(lses.size());
    ref.lse.assign(std::size_t(rows), -kInf);
    for (int64_t r = 0; r < rows; ++r) {
      double max = -kInf;
      bool nan = false;
      for (const HostTensor& l : lses) {
        const double v = l.get(shape_.lse_index(r));
        nan = nan || std::isnan(v);
        if (v > max) max = v;
      }
      double& lse_ref = ref.lse[std::size_t(shape_.lse_index(r))];
      if (nan) {
        lse_ref = std::numeric_limits<double>::quiet_NaN();
        for (int64_t c = 0; c < d; ++c) ref.out[std::size_t(shape_.out_index(r, c))] = lse_ref;
        continue;
      }
      if (max == -kInf) continue;  // out 0, lse −inf
      double sum = 0.0;
      for (const HostTensor& l : lses)
        if (l.get(shape_.lse_index(r)) != -kInf) sum += std::exp(l.get(shape_.lse_index(r)) - max);
      lse_ref = max + std::log(sum);
      for (std::size_t k = 0; k < lses.size(); ++k) {
        const double l = lses[k].get(shape_.lse_index(r));
        if (l == -kInf) continue;
        const double w = std::exp(l - lse_ref);
        const double ulps = 8.0 * n + 2.0 * std::abs(l - lse_ref);
        for (int64_t c = 0; c < d; ++c) {
          const std::size_t e = std::size_t(shape_.out_index(r, c));
          const double x = outs[k].get(shape_.out_index(r, c));
          ref.out[e] += w * x;
          ref.accumulation[e] += ulps * 0x1p-24 * w * std::abs(x);
        }
      }
    }
    return ref;
  }

  std::vector<HostTensor> outs, lses;  // the partials
  HostTensor out, lse;                 // the outputs, NaN until written
  std::vector<Tensor> out_views, lse_views;

 private:
  static std::vector<const Tensor*> pointers(const std::vector<Tensor>& views) {
    std::vector<const Tensor*> result;
    for (const Tensor& t : views) result.push_back(&t);
    return result;
  }
};

// Half an ulp of `dtype` relative to a value (its rounding), and the rounding of the values
// nearest 0 (f16's subnormals; a GPU flushes fp32's to zero).
inline double half_ulp(DType dtype) {
  return dtype == DType::bf16 ? 0x1p-8 : dtype == DType::f16 ? 0x1p-11 : 0x1p-24;
}
inline double rounding_floor(DType dtype) { return dtype == DType::f16 ? 0x1p-25 : 0x1p-120; }

// The merged out and lse against the float64 merge: rows no partial sees exactly 0 and −inf,
// NaN rows NaN; the rest within the rounding of the output dtype plus the fp32 merge's own error
// (MergeReference::accumulation).
inline void expect_merged(const MergeReference& ref, const HostTensor& out, const HostTensor* lse,
                          int n, const std::string& label) {
  const int64_t count = out.numel();
  int failures = 0;
  for (int64_t e = 0; e < count && failures < 5; ++e) {
    const double got = out.get(e), want = ref.out[std::size_t(e)];
    const double slack = ref.accumulation[std::size_t(e)];
    const double bound =
        half_ulp(out.dtype()) * std::abs(want) + slack + rounding_floor(out.dtype());
    const bool ok = std::isnan(want)              ? std::isnan(got)
                    : want == 0.0 && slack == 0.0 ? got == 0.0
                                                  : std::abs(got - want) <= bound;
    if (!ok) {
      ++failures;
      ADD_FAILURE() << label << ": out[" << e << "] = " << got << ", want " << want << " (bound "
                    << bound << ")";
    }
  }
  for (int64_t r = 0; lse != nullptr && r < lse->numel() && failures < 5; ++r) {
    const double got = lse->get(r), want = ref.lse[std::size_t(r)];
    const bool ok = std::isnan(want) ? std::isnan(got)
                    : std::isinf(want)
                        ? got == want
                        : std::abs(got - want) <= 0x1p-24 * (std::abs(want) + 4.0 * n);
    if (!ok) {
      ++failures;
      ADD_FAILURE() << label << ": lse[" << r << "] = " << got << ", want " << want;
    }
  }
}

}  // namespace hfa::test
