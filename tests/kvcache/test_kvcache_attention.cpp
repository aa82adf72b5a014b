// The KV-cache forward against the float64 oracle on the same dequantized cache, for every
// cache format × page size × GQA ratio × seqlen_q, paged and contiguous, with ragged lengths
// (0 and 1 included); and split-KV against one split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <limits>
#include <vector>

#include "api/validate_kvcache.hpp"
#include "cpu/reference.hpp"
#include "kvcache/kv_case.hpp"
#include "kvcache/kv_oracle.hpp"

namespace hfa::test {
namespace {

// Output error allowed: the rounding of out to its dtype plus fp32 accumulation.
double out_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f32: return 2e-5;
    case DType::f16: return 2e-3;
    default: return 1e-2;
  }
}

// Runs the case and compares every out element and LSE with the oracle.
void expect_matches_oracle(KVCase& c) {
  SCOPED_TRACE(c.describe());
  c.build();
  const Oracle o = oracle_of(c);
  const Status status = c.run();
  ASSERT_TRUE(status.is_ok()) << status.message();
  constexpr double kLseTolerance = 1e-4;
  EXPECT_EQ(compare(c, o, {out_tolerance(c.q_dtype()), kLseTolerance}, true).failures, 0);
}

// One format, the whole sweep: page sizes {1, 16, 64, 256} paged and one contiguous layout,
// GQA ratios {1, 4}, seqlen_q {1, 4, 33}; causal on every other case.
void sweep(CacheKind kind) {
  int n = 0;
  for (int64_t page_size : {int64_t{0}, int64_t{1}, int64_t{16}, int64_t{64}, int64_t{256}}) {
    for (int64_t group : {1, 4}) {
      for (int64_t seqlen_q : {1, 4, 33}) {
        KVCase c;
        c.kind = kind;
        c.paged = page_size > 0;
        c.page_size = page_size;
        c.group = group;
        c.seqlen_q = seqlen_q;
        // Ragged: empty, one token, shorter than seqlen_q (rows that see nothing when causal),
        // a few pages.
        c.cache_seqlens = {0, 1, 20, 141};
        c.options.causal = (n % 2) == 1;
        c.seed = static_cast<uint32_t>(100 + n++);
        expect_matches_oracle(c);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(KVCacheOracle, F32Cache) { sweep(CacheKind::f32); }
TEST(KVCacheOracle, F16Cache) { sweep(CacheKind::f16); }
TEST(KVCacheOracle, Bf16Cache) { sweep(CacheKind::bf16); }
TEST(KVCacheOracle, Fp8PerKvHeadCache) { sweep(CacheKind::fp8_per_head); }
TEST(KVCacheOracle, Fp8PerTokenCache) { sweep(CacheKind::fp8_per_token); }
TEST(KVCacheOracle, Nvfp4Cache) { sweep(CacheKind::nvfp4); }
TEST(KVCacheOracle, Mxfp4Cache) { sweep(CacheKind::mxfp4); }

// Varlen queries (cu_seqlens_q): decode, speculative and chunked-prefill rows mixed in one call,
// with sequences of no rows and one row, empty caches, and rows that see no key (causal with
// more rows than keys); every format, paged and contiguous, split and not, with a window.
TEST(KVCacheOracle, VarlenQueries) {
  int n = 0;
  for (CacheKind kind : {CacheKind::f32, CacheKind::f16, CacheKind::bf16, CacheKind::fp8_per_head,
                         CacheKind::fp8_per_token, CacheKind::nvfp4, CacheKind::mxfp4})
    for (int64_t page_size : {int64_t{0}, int64_t{1}, int64_t{16}})
      for (bool causal : {false, true}) {
        KVCase c;
        c.kind = kind;
        c.paged = page_size > 0;
        c.page_size = page_size;
        c.group = (n % 2) ? 4 : 1;
        c.query_lengths = {1, 0, 5, 1, 17, 3};
        c.cache_seqlens = {40, 9, 0, 1, 130, 2};
        c.options.causal = causal;
        if (n % 3 == 2) c.options.window_left = 7;
        c.options.num_splits = (n % 4 == 3) ? 3 : 0;
        c.seed = static_cast<uint32_t>(300 + n++);
        expect_matches_oracle(c);
        if (::testing::Test::HasFailure()) return;
      }
}

// A sequence's rows give the same results whether it is called alone with fixed length or
// packed among others with varlen, and a loose max_seqlen_q changes nothing.
TEST(KVCacheOracle, VarlenRowsEqualFixedLengthCalls) {
  KVCase packed;
  packed.kind = CacheKind::f32;
  packed.group = 2;
  packed.query_lengths = {3, 0, 3};
  packed.cache_seqlens = {50, 7, 20};
  packed.options.causal = true;
  packed.options.max_seqlen_q = 40;
  packed.build();
  ASSERT_TRUE(packed.run().is_ok());
  KVCase fixed = packed;
  fixed.query_lengths.clear();
  fixed.seqlen_q = 3;
  fixed.options.max_seqlen_q = 0;
  fixed.build();
  // The packed call's cache (same shapes) and q rows (sequence 1 has none to give).
  for (auto [from, to] : {std::pair{&packed.k, &fixed.k}, {&packed.v, &fixed.v}, {&packed.table, &fixed.table}}) {
    ASSERT_EQ(from->bytes.size(), to->bytes.size());
    std::copy(from->bytes.begin(), from->bytes.end(), to->bytes.begin());
  }
  for (int64_t b : {0, 2})
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t h = 0; h < fixed.heads_q(); ++h)
        std::memcpy(fixed.q_at(b, i, h, 0), packed.q_at(b, i, h, 0),
                    static_cast<std::size_t>(fixed.hdim) * sizeof(float));
  ASSERT_TRUE(fixed.run().is_ok());
  for (int64_t b : {0, 2})
    for (int64_t h = 0; h < fixed.heads_q(); ++h)
      for (int64_t i = 0; i < 3; ++i) {
        EXPECT_EQ(fixed.lse_at(b, h, i), packed.lse_at(b, h, i)) << b << " " << h << " " << i;
        for (int64_t d = 0; d < fixed.hdim; ++d)
          ASSERT_EQ(fixed.out_at(b, i, h, d), packed.out_at(b, i, h, d)) << b << " " << i << " " << h;
      }
}

TEST(KVCacheOracle, WindowSoftcapScaleAndHeaddim128) {
  KVCase c;
  c.kind = CacheKind::bf16;
  c.hdim = 128;
  c.group = 4;
  c.seqlen_q = 5;
  c.cache_seqlens = {3, 90, 200};
  c.options.window_left = 17;
  c.options.window_right = 2;
  c.options.softcap = 5.0f;
  c.options.softmax_scale = 0.2f;
  c.options.num_splits = 3;
  expect_matches_oracle(c);
}

// ALiBi per head and per (sequence, head), with causal, a window, softcap, GQA, split-KV and
// varlen queries (rows that see no key included): the oracle (whose ALiBi the attention tests
// check against a dense computation) and the kernel agree, and the slopes change the result.
TEST(KVCacheOracle, Alibi) {
  for (bool per_sequence : {false, true}) {
    KVCase c;
    c.kind = CacheKind::f16;
    c.group = 4;
    c.query_lengths = {5, 0, 2, 9};
    c.cache_seqlens = {3, 90, 0, 200};
    c.options.causal = per_sequence;
    c.options.window_left = per_sequence ? -1 : 40;
    c.options.softcap = 5.0f;
    c.options.num_splits = 3;
    std::vector<float> slopes;
    for (int64_t n = 0; n < (per_sequence ? 4 : 1) * c.heads_q(); ++n)
      slopes.push_back(0.05f + 0.1f * static_cast<float>(n));
    const Tensor alibi = per_sequence ? make_tensor(slopes.data(), DType::f32, {4, c.heads_q()})
                                      : make_tensor(slopes.data(), DType::f32, {c.heads_q()});
    c.options.alibi_slopes = &alibi;
    expect_matches_oracle(c);
    // And the bias is there: without it the result differs.
    std::vector<unsigned char> with_alibi = c.out.bytes;
    c.options.alibi_slopes = nullptr;
    ASSERT_TRUE(c.run().is_ok());
    EXPECT_NE(c.out.bytes, with_alibi);
  }
}

// c's out and lse equal one's up to fp32 rounding (−inf LSE exactly): split-KV merges must give
// the one-split result.
void expect_same_results(KVCase& one, KVCase& c) {
  for (int64_t b = 0; b < c.batch(); ++b)
    for (int64_t h = 0; h < c.heads_q(); ++h)
      for (int64_t i = 0; i < c.rows_of(b); ++i) {
        const float a = one.lse_at(b, h, i);
        const float z = c.lse_at(b, h, i);
        if (std::isinf(a)) {
          EXPECT_EQ(a, z);
        } else {
          EXPECT_NEAR(z, a, 1e-5f * std::max(1.0f, std::abs(a)));
        }
        for (int64_t d = 0; d < c.hdim; ++d)
          EXPECT_NEAR(c.out_at(b, i, h, d), one.out_at(b, i, h, d), 1e-5f) << b << " " << i << " " << h << " " << d;
      }
}

// Split-KV merges to the one-split result up to fp32 rounding, for every split count, with
// splits that hold no key at all (8 splits over 1 key) and auto.
TEST(KVCacheSplits, SameResultAsOneSplit) {
  for (bool causal : {false, true}) {
    KVCase one;
    one.kind = CacheKind::f32;
    one.group = 4;
    one.seqlen_q = 4;
    one.cache_seqlens = {0, 1, 5, 300, 777};
    one.options.causal = causal;
    one.options.num_splits = 1;
    one.build();
    ASSERT_TRUE(one.run().is_ok());
    for (int32_t splits : {0, 3, 8, 256}) {
      SCOPED_TRACE(testing::Message() << "splits " << splits << (causal ? " causal" : ""));
      KVCase c = one;  // same seed: the same tensors
      c.options.num_splits = splits;
      c.build();
      ASSERT_TRUE(c.run().is_ok());
      expect_same_results(one, c);
    }
  }
}

// A fixed split size (keys per split at fixed boundaries) merges to the one-split result too,
// with a last split shorter than the others and sequences shorter than one split.
TEST(KVCacheSplits, FixedSplitSizeSameResultAsOneSplit) {
  KVCase one;
  one.kind = CacheKind::f32;
  one.group = 4;
  one.seqlen_q = 3;
  one.cache_seqlens = {0, 1, 5, 300, 777};
  one.options.causal = true;
  one.options.num_splits = 1;
  one.build();
  ASSERT_TRUE(one.run().is_ok());
  for (int32_t split_size : {4, 64, 300, 1000}) {
    SCOPED_TRACE(testing::Message() << "split_size " << split_size);
    KVCase c = one;  // same seed: the same tensors
    c.options.num_splits = 0;
    c.options.split_size = split_size;
    c.build();
    ASSERT_TRUE(c.run().is_ok());
    expect_same_results(one, c);
  }
}

// With split_size, a sequence's out and lse are the same bytes whatever the batch around it: alone
// with fixed length, or packed (varlen) among longer and empty sequences in a larger cache.
TEST(KVCacheSplits, FixedSplitSizeIsBatchInvariant) {
  for (CacheKind kind : {CacheKind::bf16, CacheKind::nvfp4})
    for (int32_t split_size : {100, 192, 1024}) {
      SCOPED_TRACE(testing::Message() << kind_name(kind) << " split_size " << split_size);
      KVCase base;
      base.kind = kind;
      BatchInvariancePair pair;
      pair.build(base, split_size);
      ASSERT_TRUE(pair.alone.run().is_ok());
      ASSERT_TRUE(pair.crowd.run().is_ok());
      EXPECT_TRUE(same_sequence_bytes(pair.alone, 0, pair.crowd, BatchInvariancePair::kCrowdIndex));
    }
}

// A NaN in the cache reaches every row that sees it, whatever the split it falls in.
TEST(KVCacheSplits, NanInTheCachePropagates) {
  KVCase c;
  c.kind = CacheKind::f32;
  c.paged = false;
  c.cache_seqlens = {600};
  c.options.num_splits = 4;
  c.build();
  *c.k.at<float>({0, 599, 0, 3}) = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(c.run().is_ok());
  EXPECT_TRUE(std::isnan(c.out_at(0, 0, 0, 0)));
  EXPECT_TRUE(std::isnan(c.lse_at(0, 0, 0)));
  EXPECT_FALSE(std::isnan(c.out_at(0, 0, 1, 0)));  // the other kv-head does not read it
}

}  // namespace
}  // namespace hfa::test
