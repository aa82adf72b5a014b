// Appending k_new / v_new before the attention (CPU): the cache bytes hfa writes equal the ones
// the codecs write for the rotated new rows, and the output equals the float64 oracle over that
// cache with the rotated queries. Rotary tables hold values with few significant bits
// (0, ±1/4, ±1/2, ±3/4, ±1), so the fp32 rotation is exact however it is computed and the bytes
// can be compared exactly. Varlen new tokens (cu_seqlens_k_new) likewise, and their cache bytes
// equal those of one fixed-length append per sequence.
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
    for (int64_t i = 0; i < a.new_of(b); ++i) {
      const int64_t position = a.lengths[b] + i;
      const int64_t page = got.paged ? *want.table.at<int32_t>({b, position / got.page_size}) : b;
      const int64_t slot = got.paged ? position % got.page_size : position;
      for (int64_t h = 0; h < got.heads_kv; ++h) {
        for (int64_t d = 0; d < got.hdim; ++d) x[d] = load_float(got.q_dtype(), new_at(a, rows.k_new, b, i, h, d));
        if (a.rotary != Rotary::none) rotate(a, rows, position, x);
        encode(want, want.k, want.k_scale, want.k_global, page, slot, h, x);
        for (int64_t d = 0; d < got.hdim; ++d) x[d] = load_float(got.q_dtype(), new_at(a, rows.v_new, b, i, h, d));
        encode(want, want.v, want.v_scale, want.v_global, page, slot, h, x);
      }
    }
    // Query row i at length + i when masked, else at length: i counts the sequence's own rows.
    if (a.rotary != Rotary::none)
      for (int64_t i = 0; i < got.rows_of(b); ++i)
        for (int64_t h = 0; h < got.heads_q(); ++h) {
          for (int64_t d = 0; d < got.hdim; ++d) x[d] = load_float(got.q_dtype(), want.q_at(b, i, h, d));
          rotate(a, rows, a.lengths[b] + (masked ? i : 0), x);
          for (int64_t d = 0; d < got.hdim; ++d) store_float(got.q_dtype(), x[d], want.q_at(b, i, h, d));
        }
    *want.seqlens.at<int32_t>({b}) = a.lengths[b] + static_cast<int32_t>(a.new_of(b));
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
                                            detail::Purpose::run, &problem).is_ok());
  std::vector<double> out(static_cast<std::size_t>(got.total_q() * got.heads_q() * got.hdim));
  std::vector<double> lse(static_cast<std::size_t>(got.heads_q() * got.total_q()));
  cpu::reference_forward_kvcache(problem, out.data(), lse.data());
  const Oracle oracle{out, lse};
  // q rotated by hfa stays fp32; the oracle's q was rounded to q's dtype after rotation.
  const double tol = got.q_dtype() == DType::f32 ? 2e-5 : 2e-2;
  int failures = 0;
  for (int64_t b = 0; b < got.batch(); ++b)
    for (int64_t i = 0; i < got.rows_of(b); ++i)
      for (int64_t h = 0; h < got.heads_q(); ++h) {
        const double want_lse = oracle.lse_at(got, b, h, i);
        const double got_lse = got.lse_at(b, h, i);
        const bool same = got_lse == want_lse;  // -inf for a row that sees no key
        if (!same && !(std::abs(got_lse - want_lse) <= tol * std::max(1.0, std::abs(want_lse))) &&
            ++failures <= 5)
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

// Ragged new-token counts (0 included) packed with cu_seqlens_k_new, under fixed-length queries
// (seqlen_new rows each) and varlen ones (rows apart from the new tokens: a sequence with rows
// and nothing to append, one that appends and has no rows).
TEST(KVCacheAppend, VarlenNewTokens) {
  for (CacheKind kind : {CacheKind::f32, CacheKind::bf16, CacheKind::fp8_per_head,
                         CacheKind::fp8_per_token, CacheKind::nvfp4, CacheKind::mxfp4})
    for (int64_t page_size : {int64_t{0}, int64_t{1}, int64_t{16}})  // 0: contiguous
      for (Rotary rotary : {Rotary::none, Rotary::interleaved, Rotary::halves})
        for (bool varlen_q : {false, true}) {
          AppendCase a;
          a.kind = kind;
          a.paged = page_size > 0;
          a.page_size = a.paged ? page_size : a.page_size;
          a.rotary = rotary;
          a.seqlen_new = 2;
          a.new_tokens = {3, 0, 5, 1};
          if (varlen_q) a.query_lengths = {3, 2, 4, 0};
          a.causal = (page_size + varlen_q) % 2 == 0;  // moves the queries' rotary positions
          expect_append_matches(a);
          if (::testing::Test::HasFailure()) return;
        }
}

// Sequence b of an append as a call of its own: batch 1, fixed length, the same cache (its
// pages through row b of the block table, or its slice of a contiguous cache) and its rows of
// the packed k_new / v_new. The queries are one zero row (the attention is not checked).
Status append_one_sequence(KVCase& c, const AppendCase& a, Rows& rows, int64_t b) {
  auto slice = [&](Storage& s) {  // sequence b's (1, ...) slice of a batch-major tensor
    Tensor t = s.tensor;
    t.data = s.at<unsigned char>({b});
    t.shape[0] = 1;
    return t;
  };
  auto packed_rows = [&](Storage& s) {  // (1, new_b, heads_kv, d) over the packed rows
    const Tensor& all = s.tensor;
    Tensor t = all;
    t.data = s.at<unsigned char>({a.new_begin(b), 0, 0});
    t.rank = 4;
    t.shape[0] = 1;
    t.stride[0] = a.new_of(b) * all.stride[0];
    for (int d = 0; d < 3; ++d) {
      t.shape[d + 1] = all.shape[d];
      t.stride[d + 1] = all.stride[d];
    }
    t.shape[1] = a.new_of(b);
    return t;
  };
  Storage q, out;
  q.make(c.q_dtype(), {1, 1, c.heads_q(), c.hdim});
  std::fill(q.bytes.begin(), q.bytes.end(), 0);
  out.make(c.q_dtype(), {1, 1, c.heads_q(), c.hdim});
  const bool per_row_scales = c.options.k_scale != nullptr && c.k_scale.tensor.rank >= 3;
  Tensor k = c.paged ? c.k.tensor : slice(c.k), v = c.paged ? c.v.tensor : slice(c.v);
  Tensor k_scale = per_row_scales && !c.paged ? slice(c.k_scale) : c.k_scale.tensor;
  Tensor v_scale = per_row_scales && !c.paged ? slice(c.v_scale) : c.v_scale.tensor;
  Tensor seqlens = slice(c.seqlens);
  Tensor table = c.paged ? slice(c.table) : Tensor{};
  Tensor k_new = packed_rows(rows.k_new), v_new = packed_rows(rows.v_new);
  KVCacheOptions o = c.options;
  o.cache_seqlens = &seqlens;
  o.block_table = c.paged ? &table : nullptr;
  if (o.k_scale != nullptr) {
    o.k_scale = &k_scale;
    o.v_scale = &v_scale;
  }
  o.k_new = &k_new;
  o.v_new = &v_new;
  o.cu_seqlens_k_new = nullptr;
  o.cu_seqlens_q = nullptr;
  o.max_seqlen_q = 0;
  return forward_kvcache(q.tensor, k, v, out.tensor, nullptr, o);
}

TEST(KVCacheAppend, VarlenEqualsOneAppendPerSequence) {
  for (CacheKind kind : {CacheKind::bf16, CacheKind::fp8_per_head, CacheKind::fp8_per_token,
                         CacheKind::nvfp4, CacheKind::mxfp4})
    for (int64_t page_size : {int64_t{0}, int64_t{1}, int64_t{16}})
      for (Rotary rotary : {Rotary::none, Rotary::halves}) {
        AppendCase a;
        a.kind = kind;
        a.paged = page_size > 0;
        a.page_size = a.paged ? page_size : a.page_size;
        a.rotary = rotary;
        a.new_tokens = {2, 0, 7, 1};
        a.query_lengths = {1, 3, 0, 2};
        a.causal = true;
        SCOPED_TRACE(describe(a));
        KVCase varlen, loop;
        Rows rows = make_twins(varlen, loop, a);
        const Status status = varlen.run();
        ASSERT_TRUE(status.is_ok()) << status.message();
        for (int64_t b = 0; b < loop.batch(); ++b) {
          if (a.new_of(b) == 0) continue;  // nothing to append
          const Status one = append_one_sequence(loop, a, rows, b);
          ASSERT_TRUE(one.is_ok()) << "sequence " << b << ": " << one.message();
        }
        EXPECT_TRUE(varlen.k.bytes == loop.k.bytes) << "k_cache";
        EXPECT_TRUE(varlen.v.bytes == loop.v.bytes) << "v_cache";
        EXPECT_TRUE(varlen.k_scale.bytes == loop.k_scale.bytes) << "k_scale";
        EXPECT_TRUE(varlen.v_scale.bytes == loop.v_scale.bytes) << "v_scale";
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
