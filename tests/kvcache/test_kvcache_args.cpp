// Every bad argument of the KV-cache forward is rejected with a message naming it, and nothing
// is written to out, lse or the caches.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "api/fixture.hpp"
#include "api/validate_kvcache.hpp"
#include "kvcache/kv_append.hpp"
#include "kvcache/kv_case.hpp"

namespace hfa::test {
namespace {

// Makes `c` a valid case to bend: paged bf16 by default. Built in place, since the options
// point at the case's own tensors.
void reset(KVCase& c, CacheKind kind = CacheKind::bf16, bool paged = true) {
  c = KVCase{};
  c.kind = kind;
  c.paged = paged;
  c.group = 2;
  c.seqlen_q = 2;
  c.cache_seqlens = {5, 0, 40};
  c.build();
}

// Rejected as described, outputs untouched (they still hold the NaN poison, bit for bit), and
// the caches too (an append writes them).
::testing::AssertionResult KVRejected(KVCase& c, const std::string& argument,
                                      const std::string& fragment = "",
                                      Code code = Code::invalid_argument) {
  const std::vector<unsigned char> out_before = c.out.bytes, lse_before = c.lse.bytes;
  const std::vector<unsigned char> k_before = c.k.bytes, v_before = c.v.bytes;
  const std::vector<unsigned char> k_scale_before = c.k_scale.bytes, v_scale_before = c.v_scale.bytes;
  if (auto result = Rejected(c.run(), code, argument, fragment); !result) return result;
  if (c.out.bytes != out_before || c.lse.bytes != lse_before)
    return ::testing::AssertionFailure() << "an output was written";
  if (c.k.bytes != k_before || c.v.bytes != v_before || c.k_scale.bytes != k_scale_before ||
      c.v_scale.bytes != v_scale_before)
    return ::testing::AssertionFailure() << "a cache was written";
  return ::testing::AssertionSuccess();
}

TEST(KVCacheArgs, ValidCasesRun) {
  for (CacheKind kind : {CacheKind::bf16, CacheKind::fp8_per_head, CacheKind::fp8_per_token,
                         CacheKind::nvfp4, CacheKind::mxfp4}) {
    for (bool paged : {true, false}) {
      KVCase c;
      reset(c, kind, paged);
      const Status status = c.run();
      EXPECT_TRUE(status.is_ok()) << kind_name(kind) << ": " << status.message();
    }
  }
}

TEST(KVCacheArgs, CacheSeqlens) {
  KVCase c;
  reset(c);
  c.options.cache_seqlens = nullptr;
  EXPECT_TRUE(KVRejected(c, "cache_seqlens", "required"));
  reset(c);
  c.seqlens.tensor.dtype = HFA_F32;
  c.options.cache_seqlens = &c.seqlens.tensor;
  EXPECT_TRUE(KVRejected(c, "cache_seqlens", "expected dtype i32"));
  reset(c);
  c.seqlens.tensor.shape[0] = 2;
  c.options.cache_seqlens = &c.seqlens.tensor;
  EXPECT_TRUE(KVRejected(c, "cache_seqlens", "expected shape (3)"));
  reset(c);
  *c.seqlens.at<int32_t>({1}) = -1;
  EXPECT_TRUE(KVRejected(c, "cache_seqlens", "element 1 is negative"));
  reset(c);  // capacity: max_pages · page_size = (3 + 1) · 16
  *c.seqlens.at<int32_t>({2}) = 65;
  EXPECT_TRUE(KVRejected(c, "cache_seqlens", "element 2 (65) exceeds the cache's capacity 64"));
  reset(c, CacheKind::bf16, false);  // contiguous: max_seqlen_cache = 43
  *c.seqlens.at<int32_t>({0}) = 44;
  EXPECT_TRUE(KVRejected(c, "cache_seqlens", "max_seqlen_cache"));
}

TEST(KVCacheArgs, BlockTable) {
  KVCase c;
  reset(c);
  *c.table.at<int32_t>({2, 1}) = 99;
  EXPECT_TRUE(KVRejected(c, "block_table", "entry (2, 1) = 99 is outside [0, 6)"));
  reset(c);
  *c.table.at<int32_t>({0, 0}) = -1;
  EXPECT_TRUE(KVRejected(c, "block_table", "entry (0, 0) = -1"));
  reset(c);  // entries past a sequence's last page are not read: -1 there is fine
  *c.table.at<int32_t>({1, 0}) = -7;
  EXPECT_TRUE(c.run().is_ok());
  reset(c);
  c.table.tensor.dtype = HFA_I32 == HFA_F32 ? HFA_F16 : HFA_F32;
  EXPECT_TRUE(KVRejected(c, "block_table", "expected dtype i32"));
  reset(c);
  c.table.tensor.shape[0] = 2;
  EXPECT_TRUE(KVRejected(c, "block_table", "expected 3 rows"));
  reset(c);
  c.table.tensor.rank = 3;
  EXPECT_TRUE(KVRejected(c, "block_table", "expected rank 2"));
}

TEST(KVCacheArgs, Shapes) {
  KVCase c;
  reset(c);
  c.k.tensor.shape[3] = 32;
  EXPECT_TRUE(KVRejected(c, "k_cache", "expected headdim 64 (as q), got 32"));
  reset(c);
  c.v.tensor.shape[1] = 8;
  EXPECT_TRUE(KVRejected(c, "v_cache", "expected page_size 16 (as k_cache), got 8"));
  reset(c);
  c.v.tensor.shape[0] = 3;
  EXPECT_TRUE(KVRejected(c, "v_cache", "num_pages"));
  reset(c, CacheKind::bf16, false);
  c.k.tensor.shape[0] = 2;
  EXPECT_TRUE(KVRejected(c, "k_cache", "expected batch 3 (as q)"));
  reset(c);
  c.k.tensor.shape[2] = 3;
  c.v.tensor.shape[2] = 3;
  EXPECT_TRUE(KVRejected(c, "k_cache", "must divide q's heads 4"));
  reset(c);
  c.out.tensor.shape[1] = 1;
  EXPECT_TRUE(KVRejected(c, "out", "expected seqlen 2 (as q), got 1"));
  reset(c);
  c.lse.tensor.shape[2] = 1;
  EXPECT_TRUE(KVRejected(c, "lse", "expected shape (3, 4, 2)"));
  reset(c);
  c.lse.tensor.stride[0] = 100;
  EXPECT_TRUE(KVRejected(c, "lse", "must be contiguous"));
  reset(c);
  c.k.tensor.shape[1] = 0;
  c.v.tensor.shape[1] = 0;
  EXPECT_TRUE(KVRejected(c, "k_cache", "page_size must be at least 1"));
  reset(c);
  c.k.tensor.stride[3] = 2;
  EXPECT_TRUE(KVRejected(c, "k_cache", "unit stride"));
  reset(c);
  c.q.tensor.rank = 3;
  EXPECT_TRUE(KVRejected(c, "q", "expected rank 4"));
}

TEST(KVCacheArgs, Dtypes) {
  KVCase c;
  reset(c);
  c.k.tensor.dtype = HFA_E5M2;
  c.v.tensor.dtype = HFA_E5M2;
  EXPECT_TRUE(KVRejected(c, "k_cache", "dtype e5m2 is not supported"));
  reset(c);
  c.v.tensor.dtype = HFA_F16;
  EXPECT_TRUE(KVRejected(c, "v_cache", "expected dtype bf16 (as k_cache)"));
  reset(c);
  c.out.tensor.dtype = HFA_F16;  // f32 is taken: the result before its rounding
  EXPECT_TRUE(KVRejected(c, "out", "expected dtype bf16 (as q) or f32, got f16"));
  reset(c);
  c.q.tensor.dtype = HFA_E4M3;
  EXPECT_TRUE(KVRejected(c, "q", "not supported"));
}

TEST(KVCacheArgs, Scales) {
  KVCase c;
  reset(c);
  Storage stray;
  stray.make(DType::f32, {2});
  c.options.k_scale = &stray.tensor;
  EXPECT_TRUE(KVRejected(c, "k_scale", "must be null"));

  reset(c, CacheKind::fp8_per_token);
  c.options.k_scale = nullptr;
  EXPECT_TRUE(KVRejected(c, "k_scale", "is null"));
  reset(c, CacheKind::fp8_per_token);
  c.k_scale.tensor.shape[1] = 3;
  EXPECT_TRUE(KVRejected(c, "k_scale", "expected extent 16 in dim 1"));
  reset(c, CacheKind::fp8_per_head);
  c.k_scale.tensor.shape[0] = 3;
  EXPECT_TRUE(KVRejected(c, "k_scale", "heads_kv"));
  reset(c, CacheKind::fp8_per_head);
  c.options.v_scale = &c.k_scale.tensor;  // fine: same shape
  EXPECT_TRUE(c.run().is_ok());
  reset(c, CacheKind::fp8_per_head);
  c.v_scale.tensor.dtype = HFA_F16;
  EXPECT_TRUE(KVRejected(c, "v_scale", "expected dtype f32"));

  reset(c, CacheKind::nvfp4);
  c.options.k_global_scale = nullptr;
  EXPECT_TRUE(KVRejected(c, "k_global_scale", "is null"));
  reset(c, CacheKind::nvfp4);
  c.k_scale.tensor.shape[3] = 2;
  EXPECT_TRUE(KVRejected(c, "k_scale", "expected 4 scales per row"));
  reset(c, CacheKind::nvfp4);
  c.k.tensor.shape[3] = 64;
  c.v.tensor.shape[3] = 64;
  EXPECT_TRUE(KVRejected(c, "k_cache", "headdim / 2"));
  reset(c, CacheKind::mxfp4);
  Storage global;
  global.make(DType::f32, {1});
  c.options.k_global_scale = &global.tensor;
  EXPECT_TRUE(KVRejected(c, "k_global_scale", "only used by NVFP4"));
  reset(c, CacheKind::mxfp4);
  c.options.k_scale = nullptr;
  EXPECT_TRUE(KVRejected(c, "k_scale", "e4m3 (NVFP4) or ue8m0 (MXFP4)"));
  reset(c, CacheKind::mxfp4);
  c.k_scale.tensor.dtype = HFA_F32;
  EXPECT_TRUE(KVRejected(c, "k_scale", "does not name an FP4 format"));
  reset(c, CacheKind::mxfp4);
  c.v_scale.tensor.dtype = HFA_E4M3;
  EXPECT_TRUE(KVRejected(c, "v_scale", "expected dtype ue8m0"));
}

TEST(KVCacheArgs, Scalars) {
  KVCase c;
  reset(c);
  c.options.num_splits = -1;
  EXPECT_TRUE(KVRejected(c, "num_splits", "got -1"));
  c.options.num_splits = 257;
  EXPECT_TRUE(KVRejected(c, "num_splits", "[0, 256]"));
  reset(c);
  c.options.split_size = -1;
  EXPECT_TRUE(KVRejected(c, "split_size", "got -1"));
  c.options.split_size = 64;
  c.options.num_splits = 2;
  EXPECT_TRUE(KVRejected(c, "split_size", "excludes num_splits"));
  c = KVCase{};
  c.cache_seqlens = {300};  // 20 pages of 16: capacity 320, so at least 2 keys a split
  c.build();
  c.options.split_size = 1;
  EXPECT_TRUE(KVRejected(c, "split_size", "must be at least 2"));
  reset(c);
  c.options.softcap = -1.0f;
  EXPECT_TRUE(KVRejected(c, "softcap"));
  reset(c);
  c.options.window_left = -2;
  EXPECT_TRUE(KVRejected(c, "window_left"));
  reset(c);
  c.options.softmax_scale = -0.5f;
  EXPECT_TRUE(KVRejected(c, "softmax_scale"));
  reset(c);
  c.options.sm_margin = -1;
  EXPECT_TRUE(KVRejected(c, "sm_margin", "must be >= 0"));
  std::size_t bytes = 0;
  EXPECT_TRUE(Invalid(forward_kvcache_workspace_size(c.q.tensor, c.k.tensor, c.v.tensor, c.options, &bytes),
                      "sm_margin"));
}

// A rejected size query leaves *bytes as it was, like every rejected call its outputs.
TEST(KVCacheArgs, RejectedWorkspaceQueryWritesNoBytes) {
  KVCase c;
  reset(c);
  *c.seqlens.at<int32_t>({1}) = -1;
  std::size_t bytes = 12345;
  EXPECT_TRUE(Invalid(forward_kvcache_workspace_size(c.q.tensor, c.k.tensor, c.v.tensor, c.options, &bytes),
                      "cache_seqlens", "negative"));
  EXPECT_EQ(bytes, 12345u);
  reset(c);  // extents whose products overflow: q's to name (the query's stand-in out saturates)
  c.q.tensor.shape[1] = std::numeric_limits<int64_t>::max();
  c.v.tensor.shape[3] = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(Invalid(forward_kvcache_workspace_size(c.q.tensor, c.k.tensor, c.v.tensor, c.options, &bytes),
                      "q"));
  EXPECT_EQ(bytes, 12345u);
  reset(c);
  EXPECT_TRUE(forward_kvcache_workspace_size(c.q.tensor, c.k.tensor, c.v.tensor, c.options, &bytes).is_ok());
  EXPECT_EQ(bytes, 0u);  // the CPU needs no workspace
}

// The CPU has no SMs to leave free: a margin is accepted and changes nothing.
TEST(KVCacheArgs, SmMarginIgnoredOnTheCpu) {
  KVCase plain;
  reset(plain);
  ASSERT_TRUE(plain.run().is_ok());
  KVCase margin;
  reset(margin);
  margin.options.sm_margin = 1000;
  ASSERT_TRUE(margin.run().is_ok());
  EXPECT_EQ(margin.out.bytes, plain.out.bytes);
  EXPECT_EQ(margin.lse.bytes, plain.lse.bytes);
}

// Varlen queries: q / out (total_q, heads_q, d), lse (heads_q, total_q), cu_seqlens_q (batch + 1).
void reset_varlen(KVCase& c) {
  c = KVCase{};
  c.group = 2;
  c.query_lengths = {2, 0, 3};
  c.cache_seqlens = {5, 0, 40};
  c.build();
}

TEST(KVCacheArgs, VarlenQueries) {
  KVCase c;
  reset_varlen(c);
  EXPECT_TRUE(c.run().is_ok());
  reset_varlen(c);
  c.cu_q.tensor.dtype = HFA_F32;
  EXPECT_TRUE(KVRejected(c, "cu_seqlens_q", "expected dtype i32"));
  reset_varlen(c);
  c.cu_q.tensor.rank = 2;
  EXPECT_TRUE(KVRejected(c, "cu_seqlens_q", "expected rank 1"));
  reset_varlen(c);
  c.cu_q.tensor.shape[0] = 3;  // batch 2, but three lengths
  EXPECT_TRUE(KVRejected(c, "cache_seqlens", "expected shape (2) (batch, as cu_seqlens_q)"));
  reset_varlen(c);
  c.cu_q.tensor.device = HFA_CUDA;
  EXPECT_TRUE(KVRejected(c, "cu_seqlens_q", "expected cpu (as q)"));
  reset_varlen(c);
  *c.cu_q.at<int32_t>({0}) = 1;
  EXPECT_TRUE(KVRejected(c, "cu_seqlens_q", "must start at 0, got 1"));
  reset_varlen(c);
  *c.cu_q.at<int32_t>({2}) = 1;  // 0 2 1 5
  EXPECT_TRUE(KVRejected(c, "cu_seqlens_q", "must not decrease, but element 2 (1) < element 1 (2)"));
  reset_varlen(c);
  *c.cu_q.at<int32_t>({3}) = 4;
  EXPECT_TRUE(KVRejected(c, "cu_seqlens_q", "last element 4 must equal q's total_tokens 5"));
  reset_varlen(c);  // paged; the offsets' fault, though length 4 also exceeds max_seqlen_q 3
  *c.cu_q.at<int32_t>({1}) = 4;  // 0 4 2 5
  EXPECT_TRUE(KVRejected(c, "cu_seqlens_q", "must not decrease, but element 2 (2) < element 1 (4)"));
  reset_varlen(c);
  c.options.max_seqlen_q = 0;
  EXPECT_TRUE(KVRejected(c, "max_seqlen_q", "must be at least 1 with cu_seqlens_q, got 0"));
  reset_varlen(c);
  c.options.max_seqlen_q = 2;
  EXPECT_TRUE(KVRejected(c, "max_seqlen_q", "2 is smaller than sequence 2 (length 3)"));
  reset(c);
  c.options.max_seqlen_q = 4;
  EXPECT_TRUE(KVRejected(c, "max_seqlen_q", "only used with cu_seqlens_q"));
  reset(c);  // a fixed-length (rank 4) q with cu_seqlens_q
  c.options.cu_seqlens_q = &c.seqlens.tensor;
  c.options.max_seqlen_q = 2;
  EXPECT_TRUE(KVRejected(c, "q", "expected rank 3 (total_q, heads_q, headdim)"));
  reset_varlen(c);
  c.out.tensor.shape[0] = 4;
  EXPECT_TRUE(KVRejected(c, "out", "expected total_q 5 (as q), got 4"));
  reset_varlen(c);
  c.out.tensor.shape[1] = 2;
  EXPECT_TRUE(KVRejected(c, "out", "expected heads 4 (as q), got 2"));
  reset_varlen(c);
  c.lse.tensor.shape[1] = 4;
  EXPECT_TRUE(KVRejected(c, "lse", "expected shape (4, 5) (heads_q, total_q)"));
  reset_varlen(c);
  c.lse.tensor.rank = 3;
  EXPECT_TRUE(KVRejected(c, "lse", "expected rank 2"));
  reset_varlen(c);
  c.table.tensor.shape[0] = 2;
  EXPECT_TRUE(KVRejected(c, "block_table", "expected 3 rows (batch, as cu_seqlens_q)"));
}

// Varlen new tokens (cu_seqlens_k_new): a valid case to bend, packed rows of counts {2, 0, 3, 1}
// appended to a paged FP8 per-token cache (its scales are written too), with fixed-length or
// varlen queries.
struct VarlenAppend {
  AppendCase a;
  KVCase c;
  Rows rows;

  explicit VarlenAppend(bool varlen_q = false, Rotary rotary = Rotary::none) {
    a.kind = CacheKind::fp8_per_token;
    a.new_tokens = {2, 0, 3, 1};
    if (varlen_q) a.query_lengths = {1, 2, 0, 3};
    a.rotary = rotary;
    a.causal = true;
    make_cache(c, a);
    rows = make_rows(c, a);
    attach(c, a, rows);
  }
};

TEST(KVCacheArgs, VarlenNewTokens) {
  for (bool varlen_q : {false, true}) {
    VarlenAppend ok(varlen_q, Rotary::halves);
    const Status status = ok.c.run();
    EXPECT_TRUE(status.is_ok()) << status.message();
  }
  {
    VarlenAppend t;
    t.rows.cu_new.tensor.dtype = HFA_F32;
    EXPECT_TRUE(KVRejected(t.c, "cu_seqlens_k_new", "expected dtype i32"));
  }
  {
    VarlenAppend t;
    t.rows.cu_new.tensor.rank = 2;
    EXPECT_TRUE(KVRejected(t.c, "cu_seqlens_k_new", "expected rank 1"));
  }
  {
    VarlenAppend t;
    t.rows.cu_new.tensor.shape[0] = 4;  // batch, not batch + 1
    EXPECT_TRUE(KVRejected(t.c, "cu_seqlens_k_new", "expected shape (5) (batch + 1, as q)"));
  }
  {
    VarlenAppend t(true);
    t.rows.cu_new.tensor.shape[0] = 6;
    EXPECT_TRUE(KVRejected(t.c, "cu_seqlens_k_new", "(batch + 1, as cu_seqlens_q)"));
  }
  {
    VarlenAppend t;
    t.rows.cu_new.tensor.shape[0] = 2;  // every other element of the first four: not contiguous
    t.rows.cu_new.tensor.stride[0] = 2;
    EXPECT_TRUE(KVRejected(t.c, "cu_seqlens_k_new", "unit stride"));
  }
  {
    VarlenAppend t;
    t.rows.cu_new.tensor.device = HFA_CUDA;
    EXPECT_TRUE(KVRejected(t.c, "cu_seqlens_k_new", "expected cpu (as q)"));
  }
  {
    VarlenAppend t;
    t.c.options.k_new = t.c.options.v_new = nullptr;
    EXPECT_TRUE(KVRejected(t.c, "cu_seqlens_k_new", "needs k_new"));
  }
  {
    VarlenAppend t;  // rows of the fixed layout with the offsets
    Storage fixed;
    fixed.make(DType::bf16, {4, 3, t.c.heads_kv, t.c.hdim});
    t.c.options.k_new = t.c.options.v_new = &fixed.tensor;
    EXPECT_TRUE(KVRejected(t.c, "k_new", "expected rank 3 (total_k_new, heads_kv, headdim) with cu_seqlens_k_new"));
  }
  {
    VarlenAppend t;  // packed rows without the offsets
    t.c.options.cu_seqlens_k_new = nullptr;
    EXPECT_TRUE(KVRejected(t.c, "k_new", "expected rank 4 (batch, seqlen_new, heads_kv, headdim)"));
  }
  {
    VarlenAppend t;
    t.rows.v_new.tensor.shape[0] = 5;
    EXPECT_TRUE(KVRejected(t.c, "v_new", "expected total_k_new 6 (as k_new), got 5"));
  }
  {
    VarlenAppend t;
    *t.rows.cu_new.at<int32_t>({0}) = 1;
    EXPECT_TRUE(KVRejected(t.c, "cu_seqlens_k_new", "must start at 0, got 1"));
  }
  {
    VarlenAppend t;
    *t.rows.cu_new.at<int32_t>({2}) = 1;  // 0 2 1 5 6
    EXPECT_TRUE(KVRejected(t.c, "cu_seqlens_k_new", "must not decrease, but element 2 (1) < element 1 (2)"));
  }
  {
    VarlenAppend t;
    *t.rows.cu_new.at<int32_t>({4}) = 5;
    EXPECT_TRUE(KVRejected(t.c, "cu_seqlens_k_new", "last element 5 must equal k_new's total_tokens 6"));
  }
  {
    VarlenAppend t;  // capacity (3 + 1) · 16 = 64: 64 cached + 1 new
    *t.c.seqlens.at<int32_t>({3}) = 64;
    EXPECT_TRUE(KVRejected(t.c, "cache_seqlens", "element 3 (64 + new tokens 1) exceeds the cache's capacity 64"));
  }
  {
    VarlenAppend t(true, Rotary::interleaved);  // the keys fit the tables; query row 2 of sequence 3 not
    const int64_t last_key = t.a.lengths[3] + t.a.new_of(3) - 1;
    t.rows.cos.tensor.shape[0] = t.rows.sin.tensor.shape[0] = last_key + 1;
    EXPECT_TRUE(KVRejected(t.c, "rotary_cos", "(query row 2 of sequence 3)"));
  }
}

// The mode in which the API checks the values of CUDA tensors too: the option, or
// HFA_VALIDATE_KVCACHE=1. (CPU tensors are checked either way: see CacheSeqlens and BlockTable.)
TEST(KVCacheArgs, ValidationModeFromOptionOrEnvironment) {
  KVCase c;
  reset(c);
  auto mode = [&c] {
    detail::KVCacheProblem p;
    const Status status = detail::build_kvcache_problem(
        {&c.q.tensor, &c.k.tensor, &c.v.tensor, &c.out.tensor, &c.lse.tensor, &c.options},
        detail::Purpose::run, &p);
    EXPECT_TRUE(status.is_ok()) << status.message();
    return p.validate;
  };
  unsetenv("HFA_VALIDATE_KVCACHE");
  EXPECT_FALSE(mode());
  c.options.validate = true;
  EXPECT_TRUE(mode());
  c.options.validate = false;
  setenv("HFA_VALIDATE_KVCACHE", "1", 1);
  EXPECT_TRUE(mode());
  setenv("HFA_VALIDATE_KVCACHE", "0", 1);
  EXPECT_FALSE(mode());
  setenv("HFA_VALIDATE_KVCACHE", "yes", 1);  // read on every call, so a bad value fails this one
  EXPECT_TRUE(KVRejected(c, "HFA_VALIDATE_KVCACHE",
                         "environment variable set to \"yes\"; accepted: 0 (off), 1 (on)"));
  unsetenv("HFA_VALIDATE_KVCACHE");
  EXPECT_TRUE(c.run().is_ok());
}

// Validation mode on a GPU reads the values back through the backend's read_to_host and checks
// the copies (check_kvcache_values_on_device). On the CPU backend, whose read is a copy, it must
// answer as the check in place does: ok, or the same first bad value, named by `argument` (the
// block table's rows are padded, so the read's pitch counts).
::testing::AssertionResult ReadBackAgrees(KVCase& c, const std::function<void()>& bend,
                                          const std::string& argument = "") {
  detail::KVCacheProblem p;
  // Built before the value is bent: a CPU call checks values in place while building.
  const Status built = detail::build_kvcache_problem(
      {&c.q.tensor, &c.k.tensor, &c.v.tensor, &c.out.tensor, &c.lse.tensor, &c.options},
      detail::Purpose::run, &p);
  if (!built) return ::testing::AssertionFailure() << "not built: " << built.message();
  bend();
  const Status in_place = detail::check_kvcache_values(p);
  const Status read_back = detail::check_kvcache_values_on_device(p);
  if (in_place.code() != read_back.code() || in_place.message() != read_back.message())
    return ::testing::AssertionFailure() << "in place: \"" << in_place.message()
                                         << "\", read back: \"" << read_back.message() << "\"";
  if (argument.empty()) {
    if (!in_place) return ::testing::AssertionFailure() << "rejected: " << in_place.message();
    return ::testing::AssertionSuccess();
  }
  return Rejected(read_back, Code::invalid_argument, argument);
}

TEST(KVCacheArgs, ValuesReadBackAsCheckedInPlace) {
  KVCase c;
  reset(c);
  EXPECT_TRUE(ReadBackAgrees(c, [] {}));
  reset(c);
  EXPECT_TRUE(ReadBackAgrees(c, [&] { *c.table.at<int32_t>({2, 1}) = 99; }, "block_table"));
  reset(c);  // past the sequence's last page: not read, not checked
  EXPECT_TRUE(ReadBackAgrees(c, [&] { *c.table.at<int32_t>({1, 0}) = -7; }));
  reset(c);
  EXPECT_TRUE(ReadBackAgrees(c, [&] { *c.seqlens.at<int32_t>({2}) = 65; }, "cache_seqlens"));
  reset_varlen(c);
  EXPECT_TRUE(ReadBackAgrees(c, [&] { *c.cu_q.at<int32_t>({2}) = 1; }, "cu_seqlens_q"));
  VarlenAppend t(true);
  EXPECT_TRUE(ReadBackAgrees(t.c, [] {}));
  EXPECT_TRUE(
      ReadBackAgrees(t.c, [&] { *t.rows.cu_new.at<int32_t>({2}) = 1; }, "cu_seqlens_k_new"));
}

// CUDA tensors (here over host memory) are checked without a dereference: without a GPU the
// device is refused; on a GPU the sm90 path refuses this case's headdim 64 before any launch.
TEST(KVCacheArgs, CudaTensorsAreRefusedBeforeAnyRead) {
  KVCase c;
  reset(c);
  for (Storage* s : {&c.q, &c.k, &c.v, &c.out, &c.lse, &c.seqlens, &c.table})
    s->tensor.device = HFA_CUDA;
  if (cuda_device_count() == 0)
    EXPECT_TRUE(KVRejected(c, "q", "cuda:0", Code::not_supported));
  else
    EXPECT_EQ(c.run().code(), Code::not_supported);
  reset(c);
  c.k.tensor.device = HFA_CUDA;
  EXPECT_TRUE(KVRejected(c, "k_cache", "expected cpu (as q)"));
}

TEST(KVCacheArgs, CAbi) {
  KVCase c;
  reset(c);
  hfa_kvcache_options options = to_c(c.options);
  EXPECT_EQ(hfa_forward_kvcache(&c.q.tensor, nullptr, &c.v.tensor, &c.out.tensor, nullptr, &options),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "k_cache: is null");
  EXPECT_EQ(hfa_forward_kvcache(&c.q.tensor, &c.k.tensor, &c.v.tensor, &c.out.tensor, nullptr, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "options: is null");
  const hfa_kvcache_options defaults = hfa_default_kvcache_options();
  EXPECT_EQ(defaults.window_left, -1);
  EXPECT_EQ(defaults.num_splits, 0);
  EXPECT_EQ(defaults.split_size, 0);
  EXPECT_EQ(defaults.cache_seqlens, nullptr);
  EXPECT_EQ(defaults.cu_seqlens_k_new, nullptr);
  // Fields added later go after the earlier ones, which keep their offsets.
  static_assert(offsetof(hfa_kvcache_options, cu_seqlens_k_new) > offsetof(hfa_kvcache_options, max_seqlen_q));
  const Tensor offsets{};
  KVCacheOptions with_offsets;
  with_offsets.cu_seqlens_k_new = &offsets;
  EXPECT_EQ(to_c(with_offsets).cu_seqlens_k_new, &offsets);
  EXPECT_EQ(hfa_forward_kvcache(&c.q.tensor, &c.k.tensor, &c.v.tensor, &c.out.tensor, &c.lse.tensor,
                                &options),
            HFA_SUCCESS)
      << hfa_last_error();
  EXPECT_FALSE(std::isnan(c.out_at(0, 0, 0, 0)));
  EXPECT_EQ(c.lse_at(1, 0, 0), -INFINITY);  // cache_seqlens[1] = 0
  EXPECT_EQ(c.out_at(1, 0, 0, 0), 0.0f);
}

}  // namespace
}  // namespace hfa::test
