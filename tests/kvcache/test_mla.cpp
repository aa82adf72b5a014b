// MLA decode through hfa_forward_kvcache on the CPU (the oracle's backend): FlashMLA's shapes
// (576 / 512, one latent head, page 64, 16-128 heads, s_q 1-4 with the causal triangle), bf16
// and FP8 (656-byte record) caches, ragged lengths with empty sequences, split-KV, sparse top-k
// indices; each against the float64 reference and against a second computation that shares no
// MLA code (a separate V, an f32 cache of the decoded values, dense attention), and the
// rejections, by name, of what MLA calls get wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "api/fixture.hpp"
#include "api/validate_kvcache.hpp"
#include "common/mla.hpp"
#include "cpu/reference.hpp"
#include "kvcache/mla_case.hpp"

namespace hfa::test {
namespace {

// Every out element within 1e-2 · (1 + |oracle|) (bf16 output) and every LSE within 1e-4
// relative; a row the oracle gives -inf (no key) must be -inf with O = 0 exactly.
void expect_matches(MlaCase& c, const MlaOracle& o) {
  int failures = 0;
  for (int64_t b = 0; b < c.batch(); ++b)
    for (int64_t i = 0; i < c.seqlen_q; ++i)
      for (int64_t h = 0; h < c.heads_q; ++h) {
        const double want_lse =
            o.lse[static_cast<std::size_t>((b * c.heads_q + h) * c.seqlen_q + i)];
        const float got_lse = c.lse_at(b, h, i);
        const bool empty = std::isinf(want_lse) && want_lse < 0;
        if (empty ? !(std::isinf(got_lse) && got_lse < 0)
                  : !(std::abs(got_lse - want_lse) <= 1e-4 * std::max(1.0, std::abs(want_lse)))) {
          if (++failures <= 5)
            ADD_FAILURE() << "lse(" << b << ", " << h << ", " << i << ") = " << got_lse
                          << ", oracle " << want_lse;
        }
        for (int64_t d = 0; d < MlaCase::kDv; ++d) {
          const double want = o.out[static_cast<std::size_t>(
              ((b * c.seqlen_q + i) * c.heads_q + h) * MlaCase::kDv + d)];
          const float got = c.out_at(b, i, h, d);
          const bool ok =
              empty ? got == 0.0f : std::abs(got - want) <= 1e-2 * (1.0 + std::abs(want));
          if (!ok && ++failures <= 5)
            ADD_FAILURE() << "out(" << b << ", " << i << ", " << h << ", " << d << ") = " << got
                          << ", oracle " << want;
        }
      }
  EXPECT_EQ(failures, 0);
}

// A small valid case to vary: 16 heads, 2 query rows, a sequence of 70 tokens and an empty one.
MlaCase valid_case(bool fp8, int32_t topk = 0) {
  MlaCase c;
  c.fp8 = fp8;
  c.topk = topk;
  c.heads_q = 16;
  c.seqlen_q = 2;
  c.cache_seqlens = {70, 0};
  return c;
}

void expect_matches_oracle(MlaCase& c) {
  SCOPED_TRACE(c.describe());
  c.build();
  const MlaOracle o = mla_oracle(c);
  const Status status = c.run();
  ASSERT_TRUE(status.is_ok()) << status.message();
  expect_matches(c, o);
}

// FlashMLA's head counts (16, 32, 64, 128: TP8 to DP) each with a few seqlen_q in 1-4, causal
// (the speculative tokens' triangle) on every other case; ragged lengths with an empty
// sequence, one token, a page and one more, several pages.
void matrix(bool fp8) {
  const int64_t shapes[][2] = {{16, 1}, {16, 4}, {32, 2}, {64, 3}, {128, 1}, {128, 4}};
  int n = 0;
  for (const auto& [heads, seqlen_q] : shapes) {
    MlaCase c;
    c.fp8 = fp8;
    c.heads_q = heads;
    c.seqlen_q = seqlen_q;
    c.cache_seqlens = {0, 1, 65, 300, 3};
    c.options.causal = (n % 2) == 1;
    c.seed = static_cast<uint32_t>(10 + n++);
    expect_matches_oracle(c);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(MlaDecode, Bf16CacheMatchesOracle) { matrix(false); }
TEST(MlaDecode, Fp8CacheMatchesOracle) { matrix(true); }

// Long and ragged: one 40k-token sequence among short and empty ones (a few, to keep CI short).
TEST(MlaDecode, LongRaggedSequences) {
  for (bool fp8 : {false, true}) {
    MlaCase c;
    c.fp8 = fp8;
    c.heads_q = 16;
    c.seqlen_q = 2;
    c.cache_seqlens = fp8 ? std::vector<int32_t>{12345, 0, 7} : std::vector<int32_t>{40000, 0, 129};
    c.options.causal = true;
    expect_matches_oracle(c);
  }
}

// Split-KV (1, 3, 8 and 256 splits, and auto) merges to the one-split result, up to fp32
// rounding: out within one bf16 rounding, LSE within 1e-5.
TEST(MlaDecode, SplitsMatchOneSplit) {
  MlaCase one;
  one.heads_q = 32;
  one.seqlen_q = 3;
  one.cache_seqlens = {0, 1, 200, 1500};
  one.options.causal = true;
  one.options.num_splits = 1;
  one.build();
  ASSERT_TRUE(one.run().is_ok());
  for (int32_t splits : {0, 3, 8, 256}) {
    SCOPED_TRACE(testing::Message() << "splits " << splits);
    MlaCase c = one;
    c.options.num_splits = splits;
    c.build();
    ASSERT_TRUE(c.run().is_ok());
    for (int64_t b = 0; b < c.batch(); ++b)
      for (int64_t h = 0; h < c.heads_q; ++h)
        for (int64_t i = 0; i < c.seqlen_q; ++i) {
          const float a = one.lse_at(b, h, i), z = c.lse_at(b, h, i);
          if (std::isinf(a)) {
            EXPECT_EQ(a, z);
          } else {
            EXPECT_NEAR(z, a, 1e-5f * std::max(1.0f, std::abs(a)));
          }
          for (int64_t d = 0; d < MlaCase::kDv; d += 7)
            EXPECT_NEAR(c.out_at(b, i, h, d), one.out_at(b, i, h, d),
                        8e-3f * (1.0f + std::abs(one.out_at(b, i, h, d))));
        }
  }
}

// Empty sequences: O = 0 and LSE = -inf for every row, split or not, bf16 or FP8.
TEST(MlaDecode, EmptySequencesGiveZeroAndMinusInf) {
  for (bool fp8 : {false, true})
    for (int32_t splits : {1, 4}) {
      MlaCase c = valid_case(fp8);
      c.cache_seqlens = {0, 70, 0};
      c.options.num_splits = splits;
      c.build();
      ASSERT_TRUE(c.run().is_ok());
      for (int64_t b : {0, 2})
        for (int64_t h = 0; h < c.heads_q; ++h)
          for (int64_t i = 0; i < c.seqlen_q; ++i) {
            EXPECT_EQ(c.lse_at(b, h, i), -std::numeric_limits<float>::infinity());
            for (int64_t d = 0; d < MlaCase::kDv; ++d) ASSERT_EQ(c.out_at(b, i, h, d), 0.0f);
          }
      EXPECT_TRUE(std::isfinite(c.lse_at(1, 0, 0)));
    }
}

// The same attention computed by the generic path with no MLA in it: V as its own tensor (a
// copy of the 512 latent columns) for a bf16 cache, and an f32 cache of the values an FP8 record
// decodes to (decoded by mla_case.hpp) for an FP8 one. The CPU computes either in the same
// order, so the bytes must agree.
TEST(MlaDecode, SameBytesAsTheGenericPath) {
  for (bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "fp8_mla" : "bf16");
    MlaCase c = valid_case(fp8);
    c.cache_seqlens = {100, 0, 64};
    c.options.causal = true;
    c.build();
    ASSERT_TRUE(c.run().is_ok());

    // Contiguous (batch, longest, 1, d) caches of the held values, in f32 for FP8 (q widened
    // too: both compute in fp32) or bf16.
    const DType dtype = fp8 ? DType::f32 : DType::bf16;
    const int64_t longest = 100;
    Storage q, k, v, out, lse;
    q.make(dtype, {c.batch(), c.seqlen_q, c.heads_q, MlaCase::kD});
    k.make(dtype, {c.batch(), longest, 1, MlaCase::kD});
    v.make(dtype, {c.batch(), longest, 1, MlaCase::kDv});
    out.make(dtype, {c.batch(), c.seqlen_q, c.heads_q, MlaCase::kDv});
    lse.make(DType::f32, {c.batch(), c.heads_q, c.seqlen_q});
    for (int64_t b = 0; b < c.batch(); ++b) {
      for (int64_t i = 0; i < c.seqlen_q; ++i)
        for (int64_t h = 0; h < c.heads_q; ++h)
          for (int64_t d = 0; d < MlaCase::kD; ++d)
            store_float(dtype, load_float(DType::bf16, c.q.at<uint8_t>({b, i, h, d})),
                        q.at<uint8_t>({b, i, h, d}));
      for (int64_t j = 0; j < c.cache_seqlens[b]; ++j)
        for (int64_t d = 0; d < MlaCase::kD; ++d) {
          store_float(dtype, c.values[b][j][d], k.at<uint8_t>({b, j, 0, d}));
          if (d < MlaCase::kDv) store_float(dtype, c.values[b][j][d], v.at<uint8_t>({b, j, 0, d}));
        }
    }
    KVCacheOptions o;
    o.cache_seqlens = &c.seqlens.tensor;
    o.causal = true;
    ASSERT_TRUE(forward_kvcache(q.tensor, k.tensor, v.tensor, out.tensor, &lse.tensor, o).is_ok());
    for (int64_t b = 0; b < c.batch(); ++b)
      for (int64_t h = 0; h < c.heads_q; ++h)
        for (int64_t i = 0; i < c.seqlen_q; ++i) {
          const float want = *lse.at<float>({b, h, i});
          EXPECT_EQ(std::memcmp(&want, c.lse.at<float>({b, h, i}), 4), 0)
              << b << " " << h << " " << i;
          for (int64_t d = 0; d < MlaCase::kDv; ++d) {
            // bf16 out of an f32 result: the generic f32 out rounded as the MLA call rounds it.
            const float generic = load_float(dtype, out.at<uint8_t>({b, i, h, d}));
            const float rounded = detail::bf16_to_float(detail::float_to_bf16(generic));
            ASSERT_EQ(c.out_at(b, i, h, d), rounded) << b << " " << i << " " << h << " " << d;
          }
        }
  }
}

// Sparse (top-k) decode: FlashMLA's head counts, seqlen_q 1-4, indices with -1 padding (rows of
// only padding included: O = 0, LSE = -inf), repeated tokens, bf16 and FP8 caches.
TEST(MlaSparse, MatchesOracle) {
  const int64_t shapes[][3] = {{64, 1, 64}, {128, 2, 128}, {16, 4, 64}, {32, 3, 192}};
  int n = 0;
  for (bool fp8 : {true, false})
    for (const auto& [heads, seqlen_q, topk] : shapes) {
      MlaCase c;
      c.fp8 = fp8;
      c.heads_q = heads;
      c.seqlen_q = seqlen_q;
      c.topk = static_cast<int32_t>(topk);
      c.cache_seqlens = {300, 0, 2000, 5};
      c.options.num_splits = (n % 2) ? 3 : 0;
      c.seed = static_cast<uint32_t>(40 + n++);
      expect_matches_oracle(c);
      if (::testing::Test::HasFailure()) return;
    }
}

// Indices that list a sequence's tokens in order are dense attention over them: the same bytes.
TEST(MlaSparse, ListingTheSequenceIsDenseAttention) {
  for (bool fp8 : {false, true}) {
    MlaCase dense;
    dense.fp8 = fp8;
    dense.heads_q = 64;
    dense.seqlen_q = 2;
    dense.cache_seqlens = {130, 64, 1};
    dense.options.num_splits = 1;
    dense.build();
    ASSERT_TRUE(dense.run().is_ok());
    MlaCase sparse = dense;  // same seed: the same cache and q
    sparse.topk = 192;
    sparse.build();
    for (int64_t b = 0; b < sparse.batch(); ++b)
      for (int64_t i = 0; i < sparse.seqlen_q; ++i)
        for (int64_t k = 0; k < sparse.topk; ++k)
          *sparse.indices.at<int32_t>({b, i, k}) =
              k < sparse.cache_seqlens[b] ? sparse.flat_token(b, k) : -1;
    ASSERT_TRUE(sparse.run().is_ok());
    EXPECT_EQ(sparse.out.bytes, dense.out.bytes) << (fp8 ? "fp8" : "bf16");
    EXPECT_EQ(sparse.lse.bytes, dense.lse.bytes) << (fp8 ? "fp8" : "bf16");
  }
}

// Varlen queries with indices (chunked and speculative rows of different counts): q packed
// (total_q, heads, 576) with cu_seqlens_q and indices (total_q, topk), a list per packed row.
// Sequence b keeps the first rows[b] rows of a fixed-length sparse case.
struct VarlenSparse {
  MlaCase fixed;
  std::vector<int32_t> rows = {2, 0, 3, 1};
  Storage q, indices, cu, out, lse;
  int64_t total = 0;
  KVCacheOptions options;

  void build(bool fp8) {
    fixed.fp8 = fp8;
    fixed.heads_q = 16;
    fixed.seqlen_q = 3;
    fixed.topk = 64;
    fixed.cache_seqlens = {300, 0, 2000, 5};
    fixed.build();
    total = 0;
    for (int32_t n : rows) total += n;
    q.make(DType::bf16, {total, fixed.heads_q, MlaCase::kD}, 8);
    indices.make(DType::i32, {total, fixed.topk});
    out.make(DType::bf16, {total, fixed.heads_q, MlaCase::kDv});
    lse.make(DType::f32, {fixed.heads_q, total});
    cu.make(DType::i32, {fixed.batch() + 1});
    int64_t t = 0;
    *cu.at<int32_t>({0}) = 0;
    for (int64_t b = 0; b < fixed.batch(); ++b) {
      for (int64_t i = 0; i < rows[b]; ++i, ++t) {
        for (int64_t h = 0; h < fixed.heads_q; ++h)  // rows padded: one head at a time
          std::memcpy(q.at<uint8_t>({t, h, 0}), fixed.q.at<uint8_t>({b, i, h, 0}),
                      MlaCase::kD * 2);
        std::copy_n(fixed.indices.at<int32_t>({b, i, 0}), fixed.topk, indices.at<int32_t>({t, 0}));
      }
      *cu.at<int32_t>({b + 1}) = static_cast<int32_t>(t);
    }
    options = fixed.options;
    options.cu_seqlens_q = &cu.tensor;
    options.max_seqlen_q = 3;
    options.indices = &indices.tensor;
  }
  Status run() {
    return forward_kvcache(q.tensor, fixed.cache.tensor, fixed.v, out.tensor, &lse.tensor, options);
  }
};

TEST(MlaSparse, VarlenQueries) {
  for (bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "fp8_mla" : "bf16");
    VarlenSparse c;
    c.build(fp8);
    ASSERT_TRUE(c.fixed.run().is_ok());
    const Status status = c.run();
    ASSERT_TRUE(status.is_ok()) << status.message();
    detail::KVCacheProblem problem;
    ASSERT_TRUE(detail::build_kvcache_problem({&c.q.tensor, &c.fixed.cache.tensor, &c.fixed.v,
                                               &c.out.tensor, &c.lse.tensor, &c.options},
                                              detail::Purpose::run, &problem)
                    .is_ok());
    std::vector<double> out(static_cast<std::size_t>(c.total * c.fixed.heads_q * MlaCase::kDv));
    std::vector<double> lse(static_cast<std::size_t>(c.fixed.heads_q * c.total));
    cpu::reference_forward_kvcache(problem, out.data(), lse.data());
    int64_t t = 0;
    int failures = 0;
    for (int64_t b = 0; b < c.fixed.batch(); ++b)
      for (int64_t i = 0; i < c.rows[b]; ++i, ++t)
        for (int64_t h = 0; h < c.fixed.heads_q; ++h) {
          // Row (b, i) of the fixed-length call: the same list, so the same bytes.
          const float got_lse = *c.lse.at<float>({h, t});
          const float fixed_lse = c.fixed.lse_at(b, h, i);
          EXPECT_EQ(std::memcmp(&got_lse, &fixed_lse, 4), 0) << b << " " << i << " " << h;
          ASSERT_EQ(std::memcmp(c.out.at<uint8_t>({t, h, 0}), c.fixed.out.at<uint8_t>({b, i, h, 0}),
                                MlaCase::kDv * 2),
                    0)
              << b << " " << i << " " << h;
          const double want_lse = lse[static_cast<std::size_t>(h * c.total + t)];
          const bool empty = std::isinf(want_lse);
          if (empty ? got_lse != want_lse
                    : !(std::abs(got_lse - want_lse) <= 1e-4 * std::max(1.0, std::abs(want_lse))))
            if (++failures <= 5) ADD_FAILURE() << "lse " << t << " " << h;
          for (int64_t d = 0; d < MlaCase::kDv; ++d) {
            const double want =
                out[static_cast<std::size_t>((t * c.fixed.heads_q + h) * MlaCase::kDv + d)];
            const float got = load_float(DType::bf16, c.out.at<uint8_t>({t, h, d}));
            if (!(std::abs(got - want) <= 1e-2 * (1.0 + std::abs(want))))
              if (++failures <= 5) ADD_FAILURE() << "out " << t << " " << h << " " << d;
          }
        }
    EXPECT_EQ(failures, 0);
    // Each sequence's rows have lists of their own: not the fixed case's broadcast.
    EXPECT_NE(std::memcmp(c.out.at<uint8_t>({0, 0, 0}), c.out.at<uint8_t>({1, 0, 0}), 1024), 0);
  }
}

TEST(MlaArgs, VarlenIndices) {
  auto rejected = [](VarlenSparse& c, const std::string& argument, const std::string& fragment) {
    const std::vector<unsigned char> out = c.out.bytes, lse = c.lse.bytes;
    if (auto result = Invalid(c.run(), argument, fragment); !result) return result;
    if (c.out.bytes != out || c.lse.bytes != lse)
      return ::testing::AssertionFailure() << "an output was written";
    return ::testing::AssertionSuccess();
  };
  VarlenSparse c;
  c.build(true);
  Tensor fixed_shape = c.fixed.indices.tensor;  // (batch, seqlen_q, topk): not varlen's
  c.options.indices = &fixed_shape;
  EXPECT_TRUE(rejected(c, "indices", "expected rank 2"));
  c.options.indices = &c.indices.tensor;
  c.indices.tensor.shape[0] = c.total - 1;
  EXPECT_TRUE(rejected(c, "indices", "expected shape (6, topk) (total_q as q)"));
  c.indices.tensor.shape[0] = c.total;
  *c.indices.at<int32_t>({4, 9}) = -5;
  EXPECT_TRUE(rejected(c, "indices", "element (4, 9) = -5"));
  *c.indices.at<int32_t>({4, 9}) = -1;
  *c.cu.at<int32_t>({2}) = 1;  // decreasing
  EXPECT_TRUE(rejected(c, "cu_seqlens_q", ""));
}

// An f32 out of bf16 queries: the result before its rounding (FlashMLA's attn_sink scales it
// first), which rounds to the bf16 call's bytes; an out of another 16-bit dtype is refused.
TEST(MlaDecode, Float32Out) {
  for (int32_t topk : {0, 64}) {
    MlaCase c = valid_case(true, topk);
    c.build();
    ASSERT_TRUE(c.run().is_ok());
    Storage wide;
    wide.make(DType::f32, {c.batch(), c.seqlen_q, c.heads_q, MlaCase::kDv});
    Storage lse;
    lse.make(DType::f32, {c.batch(), c.heads_q, c.seqlen_q});
    ASSERT_TRUE(forward_kvcache(c.q.tensor, c.cache.tensor, c.v, wide.tensor, &lse.tensor,
                                c.options)
                    .is_ok());
    EXPECT_EQ(lse.bytes, c.lse.bytes);
    bool some_inexact = false;  // an f32 out that only copied the bf16 one would pass the rest
    for (int64_t b = 0; b < c.batch(); ++b)
      for (int64_t i = 0; i < c.seqlen_q; ++i)
        for (int64_t h = 0; h < c.heads_q; ++h)
          for (int64_t d = 0; d < MlaCase::kDv; ++d) {
            const float full = *wide.at<float>({b, i, h, d});
            ASSERT_EQ(detail::bf16_to_float(detail::float_to_bf16(full)), c.out_at(b, i, h, d));
            some_inexact = some_inexact || full != c.out_at(b, i, h, d);
          }
    EXPECT_TRUE(some_inexact);
    Storage half;
    half.make(DType::f16, {c.batch(), c.seqlen_q, c.heads_q, MlaCase::kDv});
    const std::vector<unsigned char> before = half.bytes;
    EXPECT_TRUE(Invalid(forward_kvcache(c.q.tensor, c.cache.tensor, c.v, half.tensor, &lse.tensor,
                                        c.options),
                        "out", "expected dtype bf16 (as q) or f32, got f16"));
    EXPECT_EQ(half.bytes, before);
  }
}

// ---- rejections: named, nothing written --------------------------------------------------------

::testing::AssertionResult MlaRejected(MlaCase& c, const std::string& argument,
                                       const std::string& fragment = "",
                                       Code code = Code::invalid_argument) {
  const std::vector<unsigned char> out_before = c.out.bytes, lse_before = c.lse.bytes;
  if (auto result = Rejected(c.run(), code, argument, fragment); !result) return result;
  if (c.out.bytes != out_before || c.lse.bytes != lse_before)
    return ::testing::AssertionFailure() << "an output was written";
  return ::testing::AssertionSuccess();
}


TEST(MlaArgs, ValidCasesRun) {
  for (bool fp8 : {false, true})
    for (int32_t topk : {0, 64}) {
      MlaCase c = valid_case(fp8, topk);
      c.build();
      const Status status = c.run();
      EXPECT_TRUE(status.is_ok()) << c.describe() << ": " << status.message();
    }
}

TEST(MlaArgs, HeadDims) {
  MlaCase c = valid_case(false);
  c.build();
  c.v.shape[3] = 256;  // not MLA's 512 with q's 576
  c.out.tensor.shape[3] = 256;
  EXPECT_TRUE(MlaRejected(c, "v_cache", "headdim must be 512 with q's 576"));
  c.build();
  // 512-wide V needs the 576-wide key: q and k of 512 are no MLA (and no generic head dim).
  c.q.tensor.shape[3] = 512;
  c.cache.tensor.shape[3] = 512;
  EXPECT_TRUE(MlaRejected(c, "q", "headdim 512 is not supported"));
  c.build();
  c.out.tensor.shape[3] = 576;
  EXPECT_TRUE(MlaRejected(c, "out", "expected headdim 512"));
}

TEST(MlaArgs, Fp8RecordLayout) {
  MlaCase c = valid_case(true);
  c.build();
  c.cache.tensor.shape[3] = 640;  // not a 656-byte record
  EXPECT_TRUE(MlaRejected(c, "k_cache", "656"));
  c.build();
  c.q.tensor.shape[3] = 128;  // an FP8 record holds 576 values only
  c.cache.tensor.shape[3] = 128;
  c.v.shape[3] = 128;
  c.out.tensor.shape[3] = 128;
  EXPECT_TRUE(MlaRejected(c, "k_cache", "576-wide keys"));
  c.build();
  Storage k_scale;  // per kv-head, as an FP8 cache of another format would take
  k_scale.make(DType::f32, {1});
  c.options.k_scale = &k_scale.tensor;
  EXPECT_TRUE(MlaRejected(c, "k_scale", "scales are in its records"));
}

TEST(MlaArgs, Fp8NeedsVAsThePrefixOfK) {
  MlaCase c = valid_case(true);
  c.build();
  c.v.shape[3] = MlaCase::kRecord;  // the whole record
  EXPECT_TRUE(MlaRejected(c, "v_cache", "first 512 bytes"));
  c.build();
  Storage other;  // the same shape elsewhere
  other.make(DType::fp8_mla, {c.cache.tensor.shape[0], 64, 1, MlaCase::kDv});
  c.v = other.tensor;
  EXPECT_TRUE(MlaRejected(c, "v_cache", "first 512 bytes"));
  c.build();
  c.v.data = static_cast<unsigned char*>(c.v.data) + 16;  // shifted into the codes
  EXPECT_TRUE(MlaRejected(c, "v_cache", "first 512 bytes"));
  c.build();
  c.v.dtype = HFA_E4M3;  // V's bytes are the records' too
  EXPECT_TRUE(MlaRejected(c, "v_cache", "expected dtype fp8_mla"));
}

TEST(MlaArgs, Indices) {
  MlaCase c = valid_case(true, 64);
  c.build();
  c.indices.tensor.dtype = HFA_F32;
  EXPECT_TRUE(MlaRejected(c, "indices", "expected dtype i32"));
  c.build();
  c.indices.tensor.shape[1] = 1;  // seqlen_q is 2
  EXPECT_TRUE(MlaRejected(c, "indices", "expected shape (2, 2, topk)"));
  c.build();
  c.indices.tensor.rank = 2;
  EXPECT_TRUE(MlaRejected(c, "indices", "rank"));
  c.build();
  c.indices.tensor.stride[1] = 128;  // not contiguous
  EXPECT_TRUE(MlaRejected(c, "indices", "contiguous"));
  c.build();
  *c.indices.at<int32_t>({1, 1, 5}) = -2;
  EXPECT_TRUE(MlaRejected(c, "indices", "element (1, 1, 5) = -2"));
  c.build();
  const int32_t tokens = static_cast<int32_t>(c.cache.tensor.shape[0] * 64);
  *c.indices.at<int32_t>({0, 0, 0}) = tokens;
  EXPECT_TRUE(MlaRejected(c, "indices", "is neither -1 nor a token of the cache"));
  c.build();
  Storage lengths;
  lengths.make(DType::i32, {2});
  c.options.cache_seqlens = &lengths.tensor;
  EXPECT_TRUE(MlaRejected(c, "cache_seqlens", "must be null with indices"));
  c.build();
  c.options.causal = true;
  EXPECT_TRUE(MlaRejected(c, "causal", "must be off with indices"));
  c.options.causal = false;
  c.build();
  c.options.window_left = 8;
  EXPECT_TRUE(MlaRejected(c, "window_left", "must be -1 with indices"));
}

TEST(MlaArgs, DenseStillNeedsCacheSeqlens) {
  MlaCase c = valid_case(false);
  c.build();
  c.options.cache_seqlens = nullptr;
  EXPECT_TRUE(MlaRejected(c, "cache_seqlens", "required without indices"));
}

// What a GPU build answers for each MLA form: not_supported naming the argument for the forms
// no GPU kernel takes (sparse indices, FP8 records with q other than bf16), decided on the host
// from the problem (common/mla.hpp, which the sm90 backend calls before any plan), so a build
// without a GPU checks it. Dense MLA on a bf16 or fp16 cache and on FP8 records with bf16 q
// passes (the sm90 MLA decode kernels take them), as does a problem with no MLA form.
TEST(MlaGpuSupport, EveryFormRefusedByName) {
  struct Form {
    bool fp8;
    DType dtype;  // q's
    int32_t topk;
    const char* argument;  // null: passes
  };
  for (const Form& form :
       {Form{false, DType::bf16, 0, nullptr}, Form{false, DType::f16, 0, nullptr},
        Form{true, DType::bf16, 0, nullptr}, Form{true, DType::f16, 0, "q"},
        Form{true, DType::bf16, 64, "indices"}, Form{false, DType::bf16, 64, "indices"}}) {
    MlaCase c = valid_case(form.fp8, form.topk);
    c.dtype = form.dtype;
    c.build();
    detail::KVCacheProblem p;
    ASSERT_TRUE(detail::build_kvcache_problem(
                    {&c.q.tensor, &c.cache.tensor, &c.v, &c.out.tensor, &c.lse.tensor, &c.options},
                    detail::Purpose::run, &p)
                    .is_ok());
    EXPECT_TRUE(detail::uses_mla_forms(p));
    if (form.argument == nullptr) {
      EXPECT_TRUE(detail::refuse_mla_on_gpu(p, "sm90 KV-cache forward").is_ok()) << c.describe();
      continue;
    }
    EXPECT_TRUE(Rejected(detail::refuse_mla_on_gpu(p, "sm90 KV-cache forward"), Code::not_supported,
                         form.argument, "not supported by the sm90 KV-cache forward"))
        << c.describe();
  }
  KVCase generic;
  generic.build();
  detail::KVCacheProblem p;
  ASSERT_TRUE(
      detail::build_kvcache_problem({&generic.q.tensor, &generic.k.tensor, &generic.v.tensor,
                                     &generic.out.tensor, &generic.lse.tensor, &generic.options},
                                    detail::Purpose::run, &p)
          .is_ok());
  EXPECT_FALSE(detail::uses_mla_forms(p));
  EXPECT_TRUE(detail::refuse_mla_on_gpu(p, "sm90 KV-cache forward").is_ok());
}

}  // namespace
}  // namespace hfa::test
