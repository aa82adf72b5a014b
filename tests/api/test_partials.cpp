// Attention split over keys, through the public API on the CPU (the oracle every GPU result is
// held to): an f32 out of 16-bit inputs is the result before rounding; `accumulate` merges a
// call into a running (out, lse) so that calls over the parts of the keys give the whole
// result; a given `softmax_d` replaces the backward's D = rowsum(dO∘O) and out is not read; an
// LSE may be a slice (unit last stride); and the bad calls are rejected by name with nothing
// written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "common/host_tensor.hpp"
#include "fixture.hpp"
#include "hfa/hfa.hpp"

namespace hfa::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Rows [first, first + count) of dim `dim` of a tensor's view (a key range, a query half).
Tensor slice(const HostTensor& t, int dim, int64_t first, int64_t count) {
  Tensor view = t.view();
  view.data = static_cast<std::byte*>(view.data) + first * t.stride(dim) * t.element_size();
  view.shape[dim] = count;
  return view;
}

// One fixed-length problem: q (b, sq, hq, d), k and v (b, sk, hkv, d), random normal.
struct Split {
  int64_t batch = 2, seqlen_q = 37, seqlen_k = 53, heads_q = 4, heads_kv = 2, hdim = 64;
  DType dtype = DType::f32;
  HostTensor q, k, v;

  void make(uint64_t seed) {
    q = HostTensor(dtype, {batch, seqlen_q, heads_q, hdim});
    k = HostTensor(dtype, {batch, seqlen_k, heads_kv, hdim});
    v = HostTensor(dtype, {batch, seqlen_k, heads_kv, hdim});
    q.fill_normal(seed + 1);
    k.fill_normal(seed + 2);
    v.fill_normal(seed + 3);
  }
  HostTensor new_out(DType out_dtype = DType::f32) const {
    return HostTensor(out_dtype, {batch, seqlen_q, heads_q, hdim});
  }
  HostTensor new_lse() const { return HostTensor(DType::f32, {batch, heads_q, seqlen_q}); }
};

// The largest |a − b| over two tensors of one shape, NaN if either holds a NaN.
double max_difference(const HostTensor& a, const HostTensor& b) {
  const std::vector<double> x = a.values(), y = b.values();
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(x[i] - y[i]);
    if (std::isnan(d) && !(std::isinf(x[i]) && x[i] == y[i])) return kNaN;
    if (!std::isnan(d)) worst = std::max(worst, d);
  }
  return worst;
}

TEST(PartialOut, F32OutIsTheRoundedOutBeforeRounding) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Split s;
    s.dtype = dtype;
    s.make(10);
    HostTensor out16 = s.new_out(dtype), out32 = s.new_out(), lse16 = s.new_lse(),
               lse32 = s.new_lse();
    Options options;
    options.causal = true;
    const Tensor out16_view = out16.view(), out32_view = out32.view();
    const Tensor lse16_view = lse16.view(), lse32_view = lse32.view();
    ASSERT_TRUE(forward(s.q.view(), s.k.view(), s.v.view(), out16_view, &lse16_view, options).is_ok());
    ASSERT_TRUE(forward(s.q.view(), s.k.view(), s.v.view(), out32_view, &lse32_view, options).is_ok());
    const std::vector<double> wide = out32.values(), narrow = out16.values();
    for (std::size_t i = 0; i < wide.size(); ++i) ASSERT_EQ(round_to(dtype, wide[i]), narrow[i]) << i;
    EXPECT_EQ(max_difference(lse16, lse32), 0.0);
  }
}

// The keys split at `cut` into two calls: the first over [0, cut), the second over [cut, sk)
// accumulating. Bottom-right causal over the whole is, for the first part, a window whose
// right edge sits sk − cut keys further right, and, for the second, plain causal.
void run_in_two_parts(const Split& s, int64_t cut, bool causal, bool first_accumulates,
                      const Tensor* sinks, HostTensor* out, HostTensor* lse) {
  const Tensor out_view = out->view(), lse_view = lse->view();
  Options first;
  first.window_right = causal ? static_cast<int32_t>(s.seqlen_k - cut) : -1;
  first.accumulate = first_accumulates;
  first.sinks = sinks;
  Options second;
  second.causal = causal;
  second.accumulate = true;
  ASSERT_TRUE(forward(s.q.view(), slice(s.k, 1, 0, cut), slice(s.v, 1, 0, cut), out_view,
                      &lse_view, first).is_ok());
  const Status status = forward(s.q.view(), slice(s.k, 1, cut, s.seqlen_k - cut),
                                slice(s.v, 1, cut, s.seqlen_k - cut), out_view, &lse_view, second);
  ASSERT_TRUE(status.is_ok()) << status.message();
}

TEST(Accumulate, TwoPartsGiveTheWhole) {
  Split s;
  s.make(20);
  std::vector<float> sink_logits = {0.5f, -1.0f, 2.0f, 0.0f};
  const Tensor sinks = make_tensor(sink_logits.data(), DType::f32, {4});
  for (bool causal : {false, true}) {
    for (bool with_sinks : {false, true}) {
      // A cut of 0 leaves the first call no key; 50 of 53 leaves causal rows none in the second.
      for (int64_t cut : {int64_t{0}, int64_t{1}, int64_t{20}, int64_t{50}, s.seqlen_k}) {
        SCOPED_TRACE(std::string(causal ? "causal" : "full") + (with_sinks ? " sinks" : "") +
                     " cut " + std::to_string(cut));
        HostTensor whole = s.new_out(), whole_lse = s.new_lse();
        Options options;
        options.causal = causal;
        options.sinks = with_sinks ? &sinks : nullptr;
        const Tensor whole_view = whole.view(), whole_lse_view = whole_lse.view();
        ASSERT_TRUE(forward(s.q.view(), s.k.view(), s.v.view(), whole_view, &whole_lse_view,
                            options).is_ok());
        HostTensor out = s.new_out(), lse = s.new_lse();  // NaN: the first call overwrites
        ASSERT_NO_FATAL_FAILURE(run_in_two_parts(s, cut, causal, false,
                                                 with_sinks ? &sinks : nullptr, &out, &lse));
        EXPECT_LT(max_difference(out, whole), 1e-5);
        EXPECT_LT(max_difference(lse, whole_lse), 1e-5);
      }
    }
  }
}

// A series may start from lse = −inf with anything in out: such a row's out is never read.
TEST(Accumulate, RowsWithoutAResultAreNotRead) {
  Split s;
  s.make(30);
  HostTensor plain = s.new_out(), plain_lse = s.new_lse();
  ASSERT_NO_FATAL_FAILURE(run_in_two_parts(s, 24, true, false, nullptr, &plain, &plain_lse));
  HostTensor out = s.new_out(), lse = s.new_lse();  // out NaN
  for (int64_t i = 0; i < lse.numel(); ++i) lse.set(i, -INFINITY);
  ASSERT_NO_FATAL_FAILURE(run_in_two_parts(s, 24, true, true, nullptr, &out, &lse));
  EXPECT_EQ(max_difference(out, plain), 0.0);
  EXPECT_EQ(max_difference(lse, plain_lse), 0.0);
}

// A row the call's keys do not reach keeps its running values bit for bit; rows beyond
// seqused_q are not touched at all.
TEST(Accumulate, UnreachedAndUnusedRowsKeepTheirValues) {
  Split s;
  s.make(40);
  HostTensor out = s.new_out(), lse = s.new_lse();
  out.fill_normal(41);
  for (int64_t i = 0; i < lse.numel(); ++i) lse.set(i, 0.25 * static_cast<double>(i % 7));
  const HostTensor out_before = out, lse_before = lse;
  std::vector<int32_t> used = {0, 33};
  const Tensor seqused_q = make_tensor(used.data(), DType::i32, {2});
  Options options;
  options.accumulate = true;
  // Query i of sequence b sees key i + 10 − seqused_q[b] only (bottom-right over the used
  // rows): rows below seqused_q[b] − 10 see no key of this call.
  options.window_left = 0;
  options.window_right = 0;
  options.seqused_q = &seqused_q;
  const Tensor out_view = out.view(), lse_view = lse.view();
  const int64_t keys = 10;
  ASSERT_TRUE(forward(s.q.view(), slice(s.k, 1, 0, keys), slice(s.v, 1, 0, keys), out_view,
                      &lse_view, options).is_ok());
  const std::vector<double> after = out.values(), before = out_before.values();
  const std::vector<double> lse_after = lse.values(), lse_prior = lse_before.values();
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t i = 0; i < s.seqlen_q; ++i) {
      for (int64_t h = 0; h < s.heads_q; ++h) {
        const bool unchanged = i >= used[b] || i < used[b] - keys;
        const int64_t l = (b * s.heads_q + h) * s.seqlen_q + i;
        if (unchanged) {
          ASSERT_EQ(lse_after[l], lse_prior[l]) << b << " " << i << " " << h;
        } else {
          ASSERT_NE(lse_after[l], lse_prior[l]) << b << " " << i << " " << h;
        }
        for (int64_t d = 0; d < s.hdim; ++d) {
          const int64_t o = ((b * s.seqlen_q + i) * s.heads_q + h) * s.hdim + d;
          if (unchanged) {
            ASSERT_EQ(after[o], before[o]) << b << " " << i << " " << h << " " << d;
          }
        }
      }
    }
  }
}

// Varlen: each sequence's keys split at its own point (the two calls' cu_seqlens_k differ).
TEST(Accumulate, VarlenPartsGiveTheWhole) {
  const std::vector<int32_t> q_lengths = {5, 0, 17}, k_lengths = {9, 4, 30}, cuts = {3, 4, 11};
  std::vector<int32_t> cu_q = {0}, cu_k = {0}, cu_first = {0}, cu_second = {0};
  for (std::size_t b = 0; b < q_lengths.size(); ++b) {
    cu_q.push_back(cu_q.back() + q_lengths[b]);
    cu_k.push_back(cu_k.back() + k_lengths[b]);
    cu_first.push_back(cu_first.back() + cuts[b]);
    cu_second.push_back(cu_second.back() + k_lengths[b] - cuts[b]);
  }
  const int64_t total_q = cu_q.back(), total_k = cu_k.back(), heads = 2, d = 64;
  HostTensor q(DType::f32, {total_q, heads, d}), k(DType::f32, {total_k, heads, d}),
      v(DType::f32, {total_k, heads, d});
  q.fill_normal(51), k.fill_normal(52), v.fill_normal(53);
  // The parts' keys, packed: sequence b's first cuts[b] keys, then the rest.
  HostTensor k1(DType::f32, {cu_first.back(), heads, d}), v1 = k1,
      k2(DType::f32, {cu_second.back(), heads, d}), v2 = k2;
  const int64_t row = heads * d;
  for (std::size_t b = 0; b < q_lengths.size(); ++b) {
    for (int64_t j = 0; j < k_lengths[b]; ++j) {
      const bool first = j < cuts[b];
      HostTensor& kp = first ? k1 : k2;
      HostTensor& vp = first ? v1 : v2;
      const int64_t at = first ? cu_first[b] + j : cu_second[b] + j - cuts[b];
      for (int64_t e = 0; e < row; ++e) {
        kp.set(at * row + e, k.get((cu_k[b] + j) * row + e));
        vp.set(at * row + e, v.get((cu_k[b] + j) * row + e));
      }
    }
  }
  auto cu = [](std::vector<int32_t>& offsets) {
    return make_tensor(offsets.data(), DType::i32, {static_cast<int64_t>(offsets.size())});
  };
  const Tensor cu_q_t = cu(cu_q), cu_k_t = cu(cu_k), cu_first_t = cu(cu_first),
               cu_second_t = cu(cu_second);
  HostTensor whole(DType::f32, {total_q, heads, d}), whole_lse(DType::f32, {heads, total_q});
  HostTensor out = whole, lse = whole_lse;
  const Tensor whole_view = whole.view(), whole_lse_view = whole_lse.view();
  const Tensor out_view = out.view(), lse_view = lse.view();
  Options options;
  options.cu_seqlens_q = &cu_q_t;
  options.max_seqlen_q = 17;
  options.cu_seqlens_k = &cu_k_t;
  options.max_seqlen_k = 30;
  ASSERT_TRUE(forward(q.view(), k.view(), v.view(), whole_view, &whole_lse_view, options).is_ok());
  options.cu_seqlens_k = &cu_first_t;
  options.max_seqlen_k = 11;
  ASSERT_TRUE(forward(q.view(), k1.view(), v1.view(), out_view, &lse_view, options).is_ok());
  options.cu_seqlens_k = &cu_second_t;
  options.max_seqlen_k = 19;
  options.accumulate = true;
  ASSERT_TRUE(forward(q.view(), k2.view(), v2.view(), out_view, &lse_view, options).is_ok());
  EXPECT_LT(max_difference(out, whole), 1e-5);
  EXPECT_LT(max_difference(lse, whole_lse), 1e-5);
}

// A ring's zigzag half-steps write the second half of the rows: out and lse as slices.
TEST(Accumulate, IntoSlicesOfOutAndLse) {
  Split s;
  s.make(60);
  const int64_t half = 18;
  HostTensor whole = s.new_out(), whole_lse = s.new_lse();
  const Tensor whole_view = whole.view(), whole_lse_view = whole_lse.view();
  ASSERT_TRUE(forward(s.q.view(), s.k.view(), s.v.view(), whole_view, &whole_lse_view, {}).is_ok());
  HostTensor out = s.new_out(), lse = s.new_lse();
  const Tensor out_view = out.view(), lse_view = lse.view();
  Options plain;
  ASSERT_TRUE(forward(s.q.view(), slice(s.k, 1, 0, 30), slice(s.v, 1, 0, 30), out_view, &lse_view,
                      plain).is_ok());
  Options accumulate;
  accumulate.accumulate = true;
  const Tensor rows_out = slice(out, 1, half, s.seqlen_q - half);
  const Tensor rows_lse = slice(lse, 2, half, s.seqlen_q - half);
  ASSERT_TRUE(forward(slice(s.q, 1, half, s.seqlen_q - half), slice(s.k, 1, 30, s.seqlen_k - 30),
                      slice(s.v, 1, 30, s.seqlen_k - 30), rows_out, &rows_lse, accumulate).is_ok());
  const Tensor first_rows_lse = slice(lse, 2, 0, half);
  ASSERT_TRUE(forward(slice(s.q, 1, 0, half), slice(s.k, 1, 30, s.seqlen_k - 30),
                      slice(s.v, 1, 30, s.seqlen_k - 30), slice(out, 1, 0, half),
                      &first_rows_lse, accumulate).is_ok());
  EXPECT_LT(max_difference(out, whole), 1e-5);
  EXPECT_LT(max_difference(lse, whole_lse), 1e-5);
}

// Appended to hfa_options after the fields that keep their offsets.
static_assert(offsetof(hfa_options, accumulate) > offsetof(hfa_options, sm_margin));
static_assert(offsetof(hfa_options, softmax_d) > offsetof(hfa_options, accumulate));

TEST(Accumulate, BadCallsAreRejectedByName) {
  Attention a;  // f32 in, f32 out
  a.options.accumulate = true;
  EXPECT_TRUE(Rejected(hfa::forward(a.q.tensor, a.k.tensor, a.v.tensor, a.out.tensor, nullptr,
                                    a.options),
                       Code::invalid_argument, "lse", "accumulate"));
  EXPECT_TRUE(a.forward_outputs_untouched());

  Attention b;
  b.dtype = DType::bf16;
  b.allocate();
  b.options.accumulate = true;
  EXPECT_TRUE(Rejected(b.forward(), Code::invalid_argument, "out", "needs an f32 out"));
  EXPECT_TRUE(b.forward_outputs_untouched());
}

TEST(PartialOut, BackwardTakesNoF32OutOf16BitInputs) {
  Attention a;
  a.dtype = DType::bf16;
  a.allocate();
  a.out.make(DType::f32, {a.batch, a.seqlen_q, a.heads_q, a.hdim_v});
  a.poison_outputs();
  EXPECT_TRUE(Rejected(a.backward(), Code::invalid_argument, "out", "expected dtype bf16 (as q)"));
  EXPECT_TRUE(a.backward_outputs_untouched());
}

// D = rowsum(dO∘O) of the fixture's out and dout, laid out as lse (b, hq, sq).
std::vector<float> row_sums(const Attention& a) {
  std::vector<float> d(static_cast<std::size_t>(a.batch * a.heads_q * a.seqlen_q));
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads_q; ++h)
      for (int64_t i = 0; i < a.seqlen_q; ++i) {
        double sum = 0.0;
        for (int64_t c = 0; c < a.hdim_v; ++c) {
          const std::size_t at = static_cast<std::size_t>(((b * a.seqlen_q + i) * a.heads_q + h) * a.hdim_v + c);
          sum += double{a.out.data[at]} * a.dout.data[at];
        }
        d[static_cast<std::size_t>((b * a.heads_q + h) * a.seqlen_q + i)] = static_cast<float>(sum);
      }
  return d;
}

double max_difference(const std::vector<float>& x, const std::vector<float>& y) {
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(double{x[i]} - y[i]);
    if (std::isnan(d)) return kNaN;
    worst = std::max(worst, d);
  }
  return worst;
}

TEST(SoftmaxD, GivenDReplacesOutAndDout) {
  Attention a;
  a.seqlen_q = 9, a.seqlen_k = 21;
  a.allocate();
  a.options.causal = true;
  ASSERT_TRUE(a.forward().is_ok());
  ASSERT_TRUE(a.backward().is_ok());
  const std::vector<float> dq = a.dq.data, dk = a.dk.data, dv = a.dv.data;

  std::vector<float> d = row_sums(a);
  const Tensor softmax_d = make_tensor(d.data(), DType::f32, {a.batch, a.heads_q, a.seqlen_q});
  a.options.softmax_d = &softmax_d;
  std::fill(a.out.data.begin(), a.out.data.end(), kNaN);  // not read when D is given
  for (Buffer* g : {&a.dq, &a.dk, &a.dv}) g->poison();
  ASSERT_TRUE(a.backward().is_ok());
  EXPECT_LT(max_difference(a.dq.data, dq), 1e-5);
  EXPECT_LT(max_difference(a.dk.data, dk), 1e-5);
  EXPECT_LT(max_difference(a.dv.data, dv), 1e-5);
}

TEST(SoftmaxD, BadDIsRejectedByName) {
  Attention a;
  ASSERT_TRUE(a.forward().is_ok());
  std::vector<float> d(256, 0.0f);
  const Tensor wrong_shape = make_tensor(d.data(), DType::f32, {a.batch, a.heads_q, a.seqlen_q + 1});
  const Tensor wrong_dtype = make_tensor(d.data(), DType::f16, {a.batch, a.heads_q, a.seqlen_q});
  const Tensor strided = make_tensor(d.data(), DType::f32, {a.batch, a.heads_q, a.seqlen_q},
                                     {a.heads_q * a.seqlen_q * 2, a.seqlen_q * 2, 2});
  const struct {
    const Tensor* d;
    const char* fragment;
  } cases[] = {{&wrong_shape, "expected shape"}, {&wrong_dtype, "expected dtype f32"},
               {&strided, "unit stride"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fragment);
    a.options.softmax_d = c.d;
    for (Buffer* g : {&a.dq, &a.dk, &a.dv}) g->poison();
    EXPECT_TRUE(Rejected(a.backward(), Code::invalid_argument, "softmax_d", c.fragment));
    EXPECT_TRUE(a.backward_outputs_untouched());
  }
}

// The backward reads an lse slice as it is (a ring's half-steps pass the final LSE's rows).
TEST(SlicedLse, BackwardReadsItsStrides) {
  Attention a;
  ASSERT_TRUE(a.forward().is_ok());
  ASSERT_TRUE(a.backward().is_ok());
  const std::vector<float> dq = a.dq.data;
  // The same LSE inside a wider buffer: (b, hq, sq) with row stride 1, head stride sq + 3.
  const int64_t pitch = a.seqlen_q + 3;
  std::vector<float> wide(static_cast<std::size_t>(a.batch * a.heads_q * pitch), kNaN);
  for (int64_t bh = 0; bh < a.batch * a.heads_q; ++bh)
    for (int64_t i = 0; i < a.seqlen_q; ++i)
      wide[static_cast<std::size_t>(bh * pitch + i)] = a.lse.data[static_cast<std::size_t>(bh * a.seqlen_q + i)];
  const Tensor lse = make_tensor(wide.data(), DType::f32, {a.batch, a.heads_q, a.seqlen_q},
                                 {a.heads_q * pitch, pitch, 1});
  a.dq.poison();
  ASSERT_TRUE(hfa::backward(a.dout.tensor, a.q.tensor, a.k.tensor, a.v.tensor, a.out.tensor, lse,
                            a.dq.tensor, a.dk.tensor, a.dv.tensor, a.options).is_ok());
  EXPECT_EQ(max_difference(a.dq.data, dq), 0.0);
}

}  // namespace
}  // namespace hfa::test
