// A merge_partials problem for the tests (CPU in tests/merge, GPU in tests/sm90): N partials with
// random outputs and LSEs, rows a partial does not see (LSE −inf, their outputs NaN: a merge that
// reads them poisons its result), rows no partial sees, LSEs far apart, optionally a NaN LSE;
// the float64 merge of the stored values, and the bound a fp32 merge must meet.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
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

  // Makes every weight exact: of the partials that see a row, the first 2^⌊log2 count⌋ keep
  // seeing it, all with the same LSE (the first one's), and the others no longer do (LSE −inf,
  // their output NaN). Each weight is then exp(0) / 2^j, and the merge in fp32 the same bytes
  // on any backend that adds the partials in the same order (each weight · out exact).
  void make_weights_exact() {
    for (int64_t r = 0; r < shape_.rows(); ++r) {
      const int keep = int(std::bit_floor(unsigned(live_count(r))));
      double first = -kInf;
      int seen = 0;
      for (std::size_t k = 0; k < lses.size(); ++k) {
        const double l = lses[k].get(shape_.lse_index(r));
        if (l == -kInf) continue;
        if (seen++ == 0) first = l;
        if (seen <= keep) {
          lses[k].set(shape_.lse_index(r), first);
          continue;
        }
        lses[k].set(shape_.lse_index(r), -kInf);
        for (int64_t c = 0; c < shape_.hdim; ++c)
          outs[k].set(shape_.out_index(r, c), std::numeric_limits<double>::quiet_NaN());
      }
    }
  }

  // Partials that see row r (LSE not −inf).
  int live_count(int64_t r) const {
    int count = 0;
    for (const HostTensor& l : lses) count += l.get(shape_.lse_index(r)) != -kInf;
    return count;
  }

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

// The ring's in-place step as it passes its tensors: the fp32 accumulator, partial 0 and the
// output at once, is tokens [first, first + window) of a longer out and LSE, taken as
// out[:, first:first + window] and lse[:, :, first:first + window] (varlen: out[first:...] and
// lse[:, first:...]), views that are not contiguous; the other partials are the case's own.
// The longer tensors hold partial 0 in the window and random values around it, which the merge
// must leave as they are.
class RingWindow {
 public:
  HostTensor out, lse;  // the longer tensors

  RingWindow(const MergeCase& c, int64_t seqlen, int64_t first, uint64_t seed)
      : out(DType::f32, longer(c.shape(), seqlen).out_dims()),
        lse(DType::f32, longer(c.shape(), seqlen).lse_dims()),
        first_(first),
        window_(c.shape()),
        long_(longer(c.shape(), seqlen)) {
    out.fill_normal(seed);
    lse.fill_normal(seed + 1, 1.0, 3.0);
    for (int64_t e = 0; e < c.outs[0].numel(); ++e) out.set(out_index(e), c.outs[0].get(e));
    for (int64_t e = 0; e < c.lses[0].numel(); ++e) lse.set(lse_index(e), c.lses[0].get(e));
    out_before_ = out.values();
    lse_before_ = lse.values();
  }

  // The window of `full`, a view of `out` or `lse` (or of a device copy of one).
  Tensor out_window(Tensor full) const { return cut(full, out_dim(), sizeof(float)); }
  Tensor lse_window(Tensor full) const { return cut(full, out_dim() + 1, sizeof(float)); }

  // After the merge: the window as `ref` (the case's merge) says, every other element as before.
  void expect_merged_in_place(const MergeReference& ref, const HostTensor& out_after,
                              const HostTensor& lse_after, int n, const std::string& label) const {
    HostTensor window_out(DType::f32, window_.out_dims()),
        window_lse(DType::f32, window_.lse_dims());
    std::vector<bool> inside_out(out_before_.size()), inside_lse(lse_before_.size());
    for (int64_t e = 0; e < window_out.numel(); ++e) {
      window_out.set(e, out_after.get(out_index(e)));
      inside_out[std::size_t(out_index(e))] = true;
    }
    for (int64_t e = 0; e < window_lse.numel(); ++e) {
      window_lse.set(e, lse_after.get(lse_index(e)));
      inside_lse[std::size_t(lse_index(e))] = true;
    }
    expect_merged(ref, window_out, &window_lse, n, label);
    const auto same = [](double a, double b) { return std::isnan(a) ? std::isnan(b) : a == b; };
    for (std::size_t e = 0; e < out_before_.size(); ++e)
      if (!inside_out[e] && !same(out_after.get(int64_t(e)), out_before_[e])) {
        ADD_FAILURE() << label << ": out[" << e << "] outside the window was written";
        break;
      }
    for (std::size_t e = 0; e < lse_before_.size(); ++e)
      if (!inside_lse[e] && !same(lse_after.get(int64_t(e)), lse_before_[e])) {
        ADD_FAILURE() << label << ": lse[" << e << "] outside the window was written";
        break;
      }
  }

 private:
  static MergeShape longer(MergeShape shape, int64_t seqlen) {
    shape.seqlen = seqlen;
    return shape;
  }
  // The dim of tokens in out (in the LSE it is the next one).
  std::size_t out_dim() const { return window_.varlen ? 0 : 1; }

  // Logical index in the longer tensor of element `index` of the window (dims `dims`, tokens
  // along `dim`).
  int64_t longer_index(const std::vector<int64_t>& dims, const std::vector<int64_t>& long_dims,
                       std::size_t dim, int64_t index) const {
    int64_t result = 0, scale = 1;
    for (std::size_t d = dims.size(); d-- > 0;) {
      int64_t coordinate = index % dims[d];
      index /= dims[d];
      if (d == dim) coordinate += first_;
      result += coordinate * scale;
      scale *= long_dims[d];
    }
    return result;
  }
  int64_t out_index(int64_t e) const {
    return longer_index(window_.out_dims(), long_.out_dims(), out_dim(), e);
  }
  int64_t lse_index(int64_t e) const {
    return longer_index(window_.lse_dims(), long_.lse_dims(), out_dim() + 1, e);
  }

  Tensor cut(Tensor full, std::size_t dim, std::size_t element_bytes) const {
    full.data = static_cast<std::byte*>(full.data) +
                first_ * full.stride[dim] * static_cast<int64_t>(element_bytes);
    full.shape[dim] = window_.seqlen;
    return full;
  }

  int64_t first_;
  MergeShape window_, long_;
  std::vector<double> out_before_, lse_before_;
};

}  // namespace hfa::test
