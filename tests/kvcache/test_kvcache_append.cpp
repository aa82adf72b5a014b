// Appending k_new / v_new before the attention (CPU): the cache bytes hfa writes equal the ones
// the codecs write for the rotated new rows, and the output equals the float64 oracle over that
// cache with the rotated queries. Rotary tables hold values with few significant bits
// (0, ±1/4, ±1/2, ±3/4, ±1), so the fp32 rotation is exact however it is computed and the bytes
// can be compared exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "api/validate_kvcache.hpp"
#include "cpu/reference.hpp"
#include "kvcache/kv_append.hpp"
#include "kvcache/kv_case.hpp"
#include "kvcache/kv_oracle.hpp"

namespace hfa::test {
namespace {

void rotate(const AppendCase& a, const Rows& r, int64_t position, std::vector<float>& x) {
  const int64_t half = a.rotary_dim / 2;
  for (int64_t j = 0; j < half; ++j) {
    const float c = *const_cast<Storage&>(r.cos).at<float>({position, j});
    const float s = *const_cast<Storage&>(r.sin).at<float>({position, j});
    float& x0 = x[a.rotary == Rotary::interleaved ? 2 * j : j];
    float& x1 = x[a.rotary == Rotary::interleaved ? 2 * j + 1 : j + half];
    const float u = x0, w = x1;
    x0 = u * c - w * s;
    x1 = u * s + w * c;
  }
}

// Writes one row into the expected cache with the codecs (what hfa must write).
void encode(KVCase& c, Storage& cache, Storage& scale, const Storage& global, int64_t page, int64_t slot,
            int64_t h, const std::vector<float>& x) {
  const int d = static_cast<int>(c.hdim);
  switch (c.kind) {
    case CacheKind::f32:
    case CacheKind::f16:
    case CacheKind::bf16:
      for (int64_t k = 0; k < c.hdim; ++k) store_float(c.q_dtype(), x[k], cache.at<unsigned char>({page, slot, h, k}));
      return;
    case CacheKind::fp8_per_head:
      quant::fp8_kv_quantize_row(x.data(), d, *scale.at<float>({h}), cache.at<uint8_t>({page, slot, h, 0}));
      return;
    case CacheKind::fp8_per_token:
      *scale.at<float>({page, slot, h}) =
          quant::fp8_kv_quantize_row_per_token(x.data(), d, cache.at<uint8_t>({page, slot, h, 0}));
      return;
    case CacheKind::nvfp4:
      quant::nvfp4_quantize_row(x.data(), d, *const_cast<Storage&>(global).at<float>({0}),
                                cache.at<uint8_t>({page, slot, h, 0}), scale.at<uint8_t>({page, slot, h, 0}));
      return;
    case CacheKind::mxfp4:
      quant::mxfp4_quantize_row(x.data(), d, cache.at<uint8_t>({page, slot, h, 0}),
                                scale.at<uint8_t>({page, slot, h, 0}));
      return;
  }
}

void expect_append_matches(const AppendCase& a) {
  SCOPED_TRACE(describe(a));
  KVCase got, want;
  make_cache(got, a);
  make_cache(want, a);  // the same seed: the same tensors
  Rows rows = make_rows(got, a);
  attach(got, a, rows);

  // The expected state: new rows rotated and encoded, queries rotated, lengths after the append.
  const bool masked = a.causal;
  std::vector<float> x(static_cast<std::size_t>(got.hdim));
  for (int64_t b = 0; b < got.batch(); ++b) {
    for (int64_t i = 0; i < a.seqlen_new; ++i) {
      const int64_t position = a.lengths[b] + i;
      const int64_t page = got.paged ? *want.table.at<int32_t>({b, position / got.page_size}) : b;
      const int64_t slot = got.paged ? position % got.page_size : position;
      for (int64_t h = 0; h < got.heads_kv; ++h) {
        for (int64_t d = 0; d < got.hdim; ++d) x[d] = load_float(got.q_dtype(), rows.k_new.at<unsigned char>({b, i, h, d}));
        if (a.rotary != Rotary::none) rotate(a, rows, position, x);
        encode(want, want.k, want.k_scale, want.k_global, page, slot, h, x);
        for (int64_t d = 0; d < got.hdim; ++d) x[d] = load_float(got.q_dtype(), rows.v_new.at<unsigned char>({b, i, h, d}));
        encode(want, want.v, want.v_scale, want.v_global, page, slot, h, x);
      }
      if (a.rotary != Rotary::none)
        for (int64_t h = 0; h < got.heads_q(); ++h) {
          for (int64_t d = 0; d < got.hdim; ++d) x[d] = load_float(got.q_dtype(), want.q.at<unsigned char>({b, i, h, d}));
          rotate(a, rows, a.lengths[b] + (masked ? i : 0), x);
          for (int64_t d = 0; d < got.hdim; ++d) store_float(got.q_dtype(), x[d], want.q.at<unsigned char>({b, i, h, d}));
        }
    }
    *want.seqlens.at<int32_t>({b}) = a.lengths[b] + static_cast<int32_t>(a.seqlen_new);
  }

  const Status status = got.run();
  ASSERT_TRUE(status.is_ok()) << status.message();
  EXPECT_TRUE(got.k.bytes == want.k.bytes) << "k_cache differs from the codecs' encoding";
  EXPECT_TRUE(got.v.bytes == want.v.bytes) << "v_cache differs from the codecs' encoding";
  EXPECT_TRUE(got.k_scale.bytes == want.k_scale.bytes) << "k_scale differs";
  EXPECT_TRUE(got.v_scale.bytes == want.v_scale.bytes) << "v_scale differs";

  detail::KVCacheProblem problem;
  ASSERT_TRUE(detail::build_kvcache_problem({&want.q.tensor, &want.k.tensor, &want.v.tensor,
                                             &want.out.tensor, &want.lse.tensor, &want.options},
                                            &problem).is_ok());
  std::vector<double> out(static_cast<std::size_t>(got.total_q() * got.heads_q() * got.hdim));
  std::vector<double> lse(static_cast<std::size_t>(got.heads_q() * got.total_q()));
  cpu::reference_forward_kvcache(problem, out.data(), lse.data());
  const Oracle oracle{out, lse};
  // q rotated by hfa stays fp32; the oracle's q was rounded to q's dtype after rotation.
  const double tol = got.q_dtype() == DType::f32 ? 2e-5 : 2e-2;
  int failures = 0;
  for (int64_t b = 0; b < got.batch(); ++b)
    for (int64_t i = 0; i < got.seqlen_q; ++i)
      for (int64_t h = 0; h < got.heads_q(); ++h) {
        const double want_lse = oracle.lse_at(got, b, h, i);
        const double got_lse = got.lse_at(b, h, i);
        if (!(std::abs(got_lse - want_lse) <= tol * std::max(1.0, std::abs(want_lse))) && ++failures <= 5)
          ADD_FAILURE() << "lse(" << b << ", " << h << ", " << i << ") = " << got_lse << ", oracle " << want_lse;
        for (int64_t d = 0; d < got.hdim; ++d) {
          const double w = oracle.out_at(got, b, i, h, d);
          const double g = got.out_at(b, i, h, d);
          if (!(std::abs(g - w) <= tol * (1.0 + std::abs(w))) && ++failures <= 5)
            ADD_FAILURE() << "out(" << b << ", " << i << ", " << h << ", " << d << ") = " << g << ", oracle " << w;
        }
      }
  EXPECT_EQ(failures, 0);
}

TEST(KVCacheAppend, EveryFormatRotaryAndLayout) {
  for (CacheKind kind : {CacheKind::f32, CacheKind::bf16, CacheKind::fp8_per_head,
                         CacheKind::fp8_per_token, CacheKind::nvfp4, CacheKind::mxfp4})
    for (bool paged : {true, false})
      for (Rotary rotary : {Rotary::none, Rotary::interleaved, Rotary::halves})
        for (int64_t seqlen_new : {1, 3}) {
          AppendCase a;
          a.kind = kind;
          a.paged = paged;
          a.rotary = rotary;
          a.seqlen_new = seqlen_new;
          a.causal = seqlen_new > 1;
          expect_append_matches(a);
          if (::testing::Test::HasFailure()) return;
        }
}

TEST(KVCacheAppend, BadArgumentsNameTheirArgument) {
  AppendCase a;
  KVCase c;
  make_cache(c, a);
  Rows rows = make_rows(c, a);
  auto rejected = [&](const char* name) {
    const Status s = c.run();
    return s.code() == Code::invalid_argument && s.message().rfind(std::string(name) + ":", 0) == 0
               ? ::testing::AssertionSuccess()
               : ::testing::AssertionFailure() << s.message();
  };
  c.options.k_new = &rows.k_new.tensor;
  EXPECT_TRUE(rejected("v_new"));
  c.options.v_new = &rows.v_new.tensor;
  c.options.rotary_cos = &rows.cos.tensor;
  EXPECT_TRUE(rejected("rotary_sin"));
  c.options.rotary_sin = &rows.sin.tensor;
  rows.k_new.tensor.dtype = HFA_F32;
  EXPECT_TRUE(rejected("k_new"));
  rows.k_new.tensor.dtype = static_cast<hfa_dtype>(c.q_dtype());
  rows.cos.tensor.shape[0] = 2;  // positions beyond the table
  rows.sin.tensor.shape[0] = 2;
  EXPECT_TRUE(rejected("rotary_cos"));
  rows.cos.tensor.shape[0] = rows.sin.tensor.shape[0] = 100;
  *c.seqlens.at<int32_t>({3}) = 1000;  // no room for the new token
  EXPECT_TRUE(rejected("cache_seqlens"));
  KVCase d;
  make_cache(d, a);
  d.options.rotary_cos = &rows.cos.tensor;
  d.options.rotary_sin = &rows.sin.tensor;
  const Status s = d.run();
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_EQ(s.message().rfind("rotary_cos:", 0), 0u) << s.message();
}

}  // namespace
}  // namespace hfa::test
