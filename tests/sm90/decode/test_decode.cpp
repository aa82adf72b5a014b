// The KV-cache forward on a Hopper GPU against the float64 oracle on the same dequantized cache:
// every cache format × page size {contiguous, 1, 16, 64, 256} × GQA ratio × seqlen_q {1, 4, 33},
// ragged lengths (0 and 1 included), causal on every other case, auto and fixed split counts;
// outputs NaN-poisoned first. Plus the workspace, validation-mode and not-supported answers, a
// CUDA-graph capture, and the accuracy table of the benchmark notes. Skipped without a Hopper GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "api/validate_kvcache.hpp"
#include "cpu/reference.hpp"
#include "kvcache/kv_case.hpp"
#include "kvcache/kv_oracle.hpp"
#include "sm90/gpu_test_support.hpp"

namespace hfa::test {
namespace {

constexpr int64_t kGpuHeadDim = 128;
constexpr int64_t kAlignedScalePad = 4;  // FP4 scale rows at 4-byte multiples (cp.async)

// A KVCase's tensors copied to the GPU: the same shapes and strides over device memory.
class DeviceCase {
 public:
  explicit DeviceCase(KVCase& c) : c_(c) {
    options_ = c.options;
    q_ = copy(c.q);
    k_ = copy(c.k);
    v_ = copy(c.v);
    out_ = copy(c.out);
    lse_ = copy(c.lse);
    seqlens_ = copy(c.seqlens);
    options_.cache_seqlens = &seqlens_;
    if (c.options.block_table) {
      table_ = copy(c.table);
      options_.block_table = &table_;
    }
    if (c.options.k_scale) {
      k_scale_ = copy(c.k_scale);
      v_scale_ = copy(c.v_scale);
      options_.k_scale = &k_scale_;
      options_.v_scale = &v_scale_;
    }
    if (c.options.k_global_scale) {
      k_global_ = copy(c.k_global);
      v_global_ = copy(c.v_global);
      options_.k_global_scale = &k_global_;
      options_.v_global_scale = &v_global_;
    }
  }

  KVCacheOptions& options() { return options_; }
  Tensor& table() { return table_; }
  Tensor& seqlens() { return seqlens_; }

  std::size_t workspace_size(Status* status) {
    std::size_t bytes = 0;
    *status = forward_kvcache_workspace_size(q_, k_, v_, options_, &bytes);
    return bytes;
  }

  // Sizes and passes a workspace, runs, copies out and lse back into the host case.
  Status run() {
    Status status;
    const std::size_t bytes = workspace_size(&status);
    if (!status) return status;
    workspace_ = std::make_unique<DeviceBuffer>(bytes);
    options_.workspace = bytes ? workspace_->get() : nullptr;
    options_.workspace_bytes = bytes;
    status = run_as_is();
    if (status) download();
    return status;
  }

  Status run_as_is() { return forward_kvcache(q_, k_, v_, out_, &lse_, options_); }

  void download() {
    const std::size_t out_bytes = c_.out.bytes.size(), lse_bytes = c_.lse.bytes.size();
    ASSERT_EQ(cudaMemcpy(c_.out.bytes.data(), out_.data, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(c_.lse.bytes.data(), lse_.data, lse_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }

 private:
  Tensor copy(Storage& s) {
    buffers_.push_back(std::make_unique<DeviceBuffer>(s.bytes.size()));
    EXPECT_EQ(buffers_.back()->upload(s.bytes), cudaSuccess);
    Tensor t = s.tensor;
    t.data = buffers_.back()->get();
    t.device = HFA_CUDA;
    t.device_index = 0;
    return t;
  }

  KVCase& c_;
  KVCacheOptions options_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  std::unique_ptr<DeviceBuffer> workspace_;
  Tensor q_{}, k_{}, v_{}, out_{}, lse_{}, seqlens_{}, table_{}, k_scale_{}, v_scale_{}, k_global_{},
      v_global_{};
};

struct Tolerance {
  double out;  // relative to 1 + |oracle|: P and the output rounded to q's dtype
  double lse;  // relative to max(1, |oracle|)
};

Tolerance default_tolerance(DType dtype) { return {dtype == DType::f16 ? 4e-3 : 1.5e-2, 1e-4}; }

struct Errors {
  double max_abs = 0.0, max_lse = 0.0;
  int failures = 0;
};

Errors compare(KVCase& c, const Oracle& o, const Tolerance& tol, bool report) {
  Errors e;
  for (int64_t b = 0; b < c.batch(); ++b)
    for (int64_t h = 0; h < c.heads_q(); ++h)
      for (int64_t i = 0; i < c.seqlen_q; ++i) {
        const double want_lse = o.lse[(b * c.heads_q() + h) * c.seqlen_q + i];
        const float got_lse = *c.lse.at<float>({b, h, i});
        if (std::isinf(want_lse)) {
          if (!(std::isinf(got_lse) && got_lse < 0) && ++e.failures <= 5 && report)
            ADD_FAILURE() << "b " << b << " h " << h << " i " << i << ": lse " << got_lse << ", oracle -inf";
        } else {
          const double err = std::abs(got_lse - want_lse);
          e.max_lse = std::max(e.max_lse, err);
          if (!(err <= tol.lse * std::max(1.0, std::abs(want_lse))) && ++e.failures <= 5 && report)
            ADD_FAILURE() << "b " << b << " h " << h << " i " << i << ": lse " << got_lse << ", oracle " << want_lse;
        }
        for (int64_t d = 0; d < c.hdim; ++d) {
          const double want = o.out[((b * c.seqlen_q + i) * c.heads_q() + h) * c.hdim + d];
          const double got = c.out_at(b, i, h, d);
          const double err = std::abs(got - want);
          if (err == err) e.max_abs = std::max(e.max_abs, err);
          if (!(err <= tol.out * (1.0 + std::abs(want))) && ++e.failures <= 5 && report)
            ADD_FAILURE() << "out(" << b << ", " << i << ", " << h << ", " << d << ") = " << got
                          << ", oracle " << want;
        }
      }
  return e;
}

void expect_matches_oracle(KVCase& c, Tolerance tol) {
  SCOPED_TRACE(c.describe());
  c.build();
  const Oracle o = oracle_of(c);
  DeviceCase d(c);
  const Status status = d.run();
  ASSERT_TRUE(status.is_ok()) << status.message();
  EXPECT_EQ(compare(c, o, tol, true).failures, 0);
}

KVCase gpu_case(CacheKind kind) {
  KVCase c;
  c.kind = kind;
  c.hdim = kGpuHeadDim;
  c.scale_pad = kAlignedScalePad;
  return c;
}

void sweep(CacheKind kind) {
  HFA_REQUIRE_HOPPER();
  int n = 0;
  for (int64_t page_size : {int64_t{0}, int64_t{1}, int64_t{16}, int64_t{64}, int64_t{256}})
    for (int64_t group : {1, 4})
      for (int64_t seqlen_q : {1, 4, 33}) {
        KVCase c = gpu_case(kind);
        c.paged = page_size > 0;
        c.page_size = page_size;
        c.group = group;
        c.seqlen_q = seqlen_q;
        // Empty, one token, shorter than seqlen_q, several 64-key stages, not a multiple of 64.
        c.cache_seqlens = {0, 1, 20, 141, 700};
        c.options.causal = (n % 2) == 1;
        c.options.num_splits = std::array<int32_t, 3>{0, 1, 3}[n % 3];
        c.seed = static_cast<uint32_t>(500 + n++);
        expect_matches_oracle(c, default_tolerance(c.q_dtype()));
        if (::testing::Test::HasFailure()) return;
      }
}

TEST(DecodeOracle, Bf16Cache) { sweep(CacheKind::bf16); }
TEST(DecodeOracle, F16Cache) { sweep(CacheKind::f16); }
TEST(DecodeOracle, Fp8PerKvHeadCache) { sweep(CacheKind::fp8_per_head); }
TEST(DecodeOracle, Fp8PerTokenCache) { sweep(CacheKind::fp8_per_token); }
TEST(DecodeOracle, Nvfp4Cache) { sweep(CacheKind::nvfp4); }
TEST(DecodeOracle, Mxfp4Cache) { sweep(CacheKind::mxfp4); }

// Wider GQA groups (8 and 32 query heads per kv-head: several 16-row tiles per kv-head).
TEST(DecodeOracle, WideGroups) {
  HFA_REQUIRE_HOPPER();
  for (int64_t group : {8, 32}) {
    KVCase c = gpu_case(CacheKind::bf16);
    c.group = group;
    c.heads_kv = 1;
    c.seqlen_q = 2;
    c.options.causal = true;
    c.cache_seqlens = {5, 333};
    expect_matches_oracle(c, default_tolerance(c.q_dtype()));
  }
}

TEST(DecodeOracle, WindowSoftcapScale) {
  HFA_REQUIRE_HOPPER();
  for (CacheKind kind : {CacheKind::bf16, CacheKind::nvfp4, CacheKind::fp8_per_token}) {
    KVCase c = gpu_case(kind);
    c.group = 4;
    c.seqlen_q = 5;
    c.cache_seqlens = {3, 90, 200, 1000};
    c.options.window_left = 77;
    c.options.window_right = 2;
    c.options.softcap = 5.0f;
    c.options.softmax_scale = 0.2f;
    c.options.num_splits = 3;
    // tanh runs at the hardware's approximate precision.
    expect_matches_oracle(c, {1.5e-2, 3e-3});
  }
}

// Many splits, splits with no keys, and a long sequence with auto splits.
TEST(DecodeOracle, SplitCounts) {
  HFA_REQUIRE_HOPPER();
  for (int32_t splits : {2, 7, 64, 256}) {
    KVCase c = gpu_case(CacheKind::bf16);
    c.group = 4;
    c.seqlen_q = 1;
    c.cache_seqlens = {1, 64, 65, 3000};
    c.options.num_splits = splits;
    expect_matches_oracle(c, default_tolerance(c.q_dtype()));
  }
  KVCase c = gpu_case(CacheKind::fp8_per_head);
  c.paged = false;
  c.group = 4;
  c.cache_seqlens = {20000};
  expect_matches_oracle(c, default_tolerance(c.q_dtype()));
}

// The call is safe inside a CUDA graph: no allocation, no host synchronization.
TEST(DecodeGraph, CapturesAndReplays) {
  HFA_REQUIRE_HOPPER();
  KVCase c = gpu_case(CacheKind::nvfp4);
  c.group = 4;
  c.cache_seqlens = {100, 2000};
  c.options.num_splits = 4;
  c.build();
  const Oracle o = oracle_of(c);
  DeviceCase d(c);
  Status status;
  const std::size_t bytes = d.workspace_size(&status);
  ASSERT_TRUE(status.is_ok()) << status.message();
  ASSERT_GT(bytes, 0u);
  DeviceBuffer workspace(bytes);
  cudaStream_t stream;
  HFA_CUDA_OK(cudaStreamCreate(&stream));
  d.options().stream = stream;
  d.options().workspace = workspace.get();
  d.options().workspace_bytes = bytes;
  cudaGraph_t graph;
  HFA_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  status = d.run_as_is();
  HFA_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(status.is_ok()) << status.message();
  cudaGraphExec_t exec;
  HFA_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  HFA_CUDA_OK(cudaGraphLaunch(exec, stream));
  HFA_CUDA_OK(cudaStreamSynchronize(stream));
  d.download();
  EXPECT_EQ(compare(c, o, default_tolerance(c.q_dtype()), true).failures, 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(DecodeErrors, WorkspaceTooSmallOrMissing) {
  HFA_REQUIRE_HOPPER();
  KVCase c = gpu_case(CacheKind::bf16);
  c.options.num_splits = 4;
  c.build();
  DeviceCase d(c);
  Status status;
  const std::size_t bytes = d.workspace_size(&status);
  ASSERT_TRUE(status.is_ok());
  ASSERT_GT(bytes, 0u);
  status = d.run_as_is();  // no workspace
  EXPECT_EQ(status.code(), Code::invalid_argument);
  EXPECT_NE(status.message().find("workspace"), std::string::npos) << status.message();
  DeviceBuffer small(bytes - 4);
  d.options().workspace = small.get();
  d.options().workspace_bytes = bytes - 4;
  status = d.run_as_is();
  EXPECT_EQ(status.code(), Code::invalid_argument);
  EXPECT_NE(status.message().find("workspace"), std::string::npos) << status.message();
}

TEST(DecodeErrors, ValidationModeReportsTheFirstBadEntry) {
  HFA_REQUIRE_HOPPER();
  KVCase c = gpu_case(CacheKind::bf16);
  c.options.num_splits = 1;
  c.options.validate = true;
  c.build();
  *c.table.at<int32_t>({2, 1}) = 100000;  // a page the cache does not have
  {
    DeviceCase d(c);
    const Status status = d.run();
    EXPECT_EQ(status.code(), Code::invalid_argument);
    EXPECT_NE(status.message().find("block_table"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("(2, 1)"), std::string::npos) << status.message();
  }
  c.build();
  *c.seqlens.at<int32_t>({3}) = 1 << 20;
  DeviceCase d(c);
  const Status status = d.run();
  EXPECT_EQ(status.code(), Code::invalid_argument);
  EXPECT_NE(status.message().find("cache_seqlens"), std::string::npos) << status.message();
}

TEST(DecodeErrors, UnsupportedCallsSaySo) {
  HFA_REQUIRE_HOPPER();
  KVCase small_head = gpu_case(CacheKind::bf16);
  small_head.hdim = 64;
  small_head.build();
  DeviceCase d1(small_head);
  Status status = d1.run();
  EXPECT_EQ(status.code(), Code::not_supported);
  EXPECT_NE(status.message().find("headdim"), std::string::npos) << status.message();

  KVCase unaligned = gpu_case(CacheKind::mxfp4);
  unaligned.scale_pad = 2;  // 6-byte scale rows
  unaligned.build();
  DeviceCase d2(unaligned);
  status = d2.run();
  EXPECT_EQ(status.code(), Code::not_supported);
  EXPECT_NE(status.message().find("k_scale"), std::string::npos) << status.message();
}

// The accuracy table of bench/results: the largest error against the float64 oracle on the
// dequantized cache, per cache format, on normal(0, 1) data and on data where 1% of the values
// are 50x larger. Printed, and held to the usual tolerance.
TEST(DecodeAccuracy, Table) {
  HFA_REQUIRE_HOPPER();
  std::printf("| cache | data | max abs error of out | max abs error of lse |\n|---|---|---|---|\n");
  for (CacheKind kind : {CacheKind::bf16, CacheKind::f16, CacheKind::fp8_per_head,
                         CacheKind::fp8_per_token, CacheKind::nvfp4, CacheKind::mxfp4})
    for (float outliers : {0.0f, 0.01f}) {
      KVCase c = gpu_case(kind);
      c.group = 4;
      c.heads_kv = 4;
      c.paged = true;
      c.page_size = 64;
      c.outliers = outliers;
      c.cache_seqlens = {1000, 4000, 257, 8192};
      c.build();
      const Oracle o = oracle_of(c);
      DeviceCase d(c);
      const Status status = d.run();
      ASSERT_TRUE(status.is_ok()) << status.message();
      const Errors e = compare(c, o, default_tolerance(c.q_dtype()), true);
      std::printf("| %s | %s | %.3g | %.3g |\n", kind_name(kind), outliers > 0 ? "1% outliers x50" : "normal(0,1)",
                  e.max_abs, e.max_lse);
    }
}

}  // namespace
}  // namespace hfa::test
