// The KV-cache forward on a Hopper GPU against the float64 oracle on the same dequantized cache:
// every head dim {64, 128, 256} × cache format × page size {contiguous, 1, 16, 64, 256} × GQA
// ratio × seqlen_q {1, 4, 33}, ragged lengths (0 and 1 included), causal on every other case,
// auto and fixed split counts; outputs NaN-poisoned first. Varlen queries (cu_seqlens_q) and fixed split sizes (split_size,
// bit-identical results whatever the batch) likewise. Plus the workspace, validation-mode and not-supported answers, a
// CUDA-graph capture, and the accuracy table of the benchmark notes. The append (k_new / v_new,
// rotary) against the CPU append: cache bytes equal in every format, page size and rotary form,
// the attention after it as the CPU path's, at every head dim; with varlen new tokens
// (cu_seqlens_k_new) and varlen queries too. Skipped without a Hopper GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/validate_kvcache.hpp"
#include "cpu/reference.hpp"
#include "kvcache/kv_append.hpp"
#include "kvcache/kv_case.hpp"
#include "kvcache/kv_oracle.hpp"
#include "sm90/gpu_test_support.hpp"

namespace hfa::test {
namespace {

// The head dims the GPU path takes; the tests that do not sweep them run at the tuned one.
constexpr int64_t kGpuHeadDims[] = {64, 128, 256};
constexpr int64_t kGpuHeadDim = 128;
constexpr int64_t kScaleWordBytes = 4;  // the GPU copies FP4 scale rows in 4-byte words

// Padding after each FP4 scale row that makes the rows whole words (the GPU refuses other
// strides), and at least a byte wherever the row allows, so that a read of it shows (NaN).
// MXFP4 at hdim 64 has 2 scale bytes a row: padded to 4, of which the GPU reads 2.
int64_t aligned_scale_pad(CacheKind kind, int64_t hdim) {
  if (kind != CacheKind::nvfp4 && kind != CacheKind::mxfp4) return 0;
  const int64_t scales = hdim / (kind == CacheKind::nvfp4 ? quant::kNvfp4BlockSize : quant::kMxfp4BlockSize);
  const int64_t short_of_word = (kScaleWordBytes - scales % kScaleWordBytes) % kScaleWordBytes;
  return short_of_word > 0 ? short_of_word : kScaleWordBytes;
}

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
    if (c.options.cu_seqlens_q) {
      cu_q_ = copy(c.cu_q);
      options_.cu_seqlens_q = &cu_q_;
    }
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
    // An append's tensors live outside the case (kv_append.hpp's Rows): copied from the options.
    if (c.options.k_new) {
      k_new_ = copy_tensor(*c.options.k_new);
      v_new_ = copy_tensor(*c.options.v_new);
      options_.k_new = &k_new_;
      options_.v_new = &v_new_;
    }
    if (c.options.cu_seqlens_k_new) {
      cu_new_ = copy_tensor(*c.options.cu_seqlens_k_new);
      options_.cu_seqlens_k_new = &cu_new_;
    }
    if (c.options.alibi_slopes) {
      alibi_ = copy_tensor(*c.options.alibi_slopes);
      options_.alibi_slopes = &alibi_;
    }
    if (c.options.rotary_cos) {
      rotary_cos_ = copy_tensor(*c.options.rotary_cos);
      rotary_sin_ = copy_tensor(*c.options.rotary_sin);
      options_.rotary_cos = &rotary_cos_;
      options_.rotary_sin = &rotary_sin_;
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

  // The caches and their scales back into the host case (after an append).
  void download_caches() {
    const std::pair<Storage*, const Tensor*> sides[] = {
        {&c_.k, &k_}, {&c_.v, &v_}, {&c_.k_scale, &k_scale_}, {&c_.v_scale, &v_scale_}};
    for (auto [host, device] : sides) {
      if (device->data == nullptr) continue;  // a plain cache: no scales
      ASSERT_EQ(cudaMemcpy(host->bytes.data(), device->data, host->bytes.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
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

  // A host tensor known only by its view: the bytes its elements span.
  Tensor copy_tensor(const Tensor& host) {
    int64_t last = 0;
    for (int32_t d = 0; d < host.rank; ++d) last += (host.shape[d] - 1) * host.stride[d];
    const std::size_t bytes = static_cast<std::size_t>(last + 1) * dtype_size(static_cast<DType>(host.dtype));
    buffers_.push_back(std::make_unique<DeviceBuffer>(bytes));
    EXPECT_EQ(cudaMemcpy(buffers_.back()->get(), host.data, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    Tensor t = host;
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
      v_global_{}, k_new_{}, v_new_{}, rotary_cos_{}, rotary_sin_{}, cu_q_{}, cu_new_{}, alibi_{};
};

Tolerance default_tolerance(DType dtype) { return {dtype == DType::f16 ? 4e-3 : 1.5e-2, 1e-4}; }

void expect_matches_oracle(KVCase& c, Tolerance tol) {
  SCOPED_TRACE(c.describe());
  c.build();
  const Oracle o = oracle_of(c);
  DeviceCase d(c);
  const Status status = d.run();
  ASSERT_TRUE(status.is_ok()) << status.message();
  EXPECT_EQ(compare(c, o, tol, true).failures, 0);
}

KVCase gpu_case(CacheKind kind, int64_t hdim = kGpuHeadDim) {
  KVCase c;
  c.kind = kind;
  c.hdim = hdim;
  c.scale_pad = aligned_scale_pad(kind, hdim);
  return c;
}

void sweep(CacheKind kind, int64_t hdim) {
  HFA_REQUIRE_HOPPER();
  SCOPED_TRACE("hdim " + std::to_string(hdim));
  int n = 0;
  for (int64_t page_size : {int64_t{0}, int64_t{1}, int64_t{16}, int64_t{64}, int64_t{256}})
    for (int64_t group : {1, 4})
      for (int64_t seqlen_q : {1, 4, 33}) {
        KVCase c = gpu_case(kind, hdim);
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

// The sweep at every head dim: DecodeOracleHeadDim.<format>/hdim64 and so on.
class DecodeOracleHeadDim : public ::testing::TestWithParam<int64_t> {};

std::string head_dim_name(const ::testing::TestParamInfo<int64_t>& info) {
  return "hdim" + std::to_string(info.param);
}

TEST_P(DecodeOracleHeadDim, Bf16Cache) { sweep(CacheKind::bf16, GetParam()); }
TEST_P(DecodeOracleHeadDim, F16Cache) { sweep(CacheKind::f16, GetParam()); }
TEST_P(DecodeOracleHeadDim, Fp8PerKvHeadCache) { sweep(CacheKind::fp8_per_head, GetParam()); }
TEST_P(DecodeOracleHeadDim, Fp8PerTokenCache) { sweep(CacheKind::fp8_per_token, GetParam()); }
TEST_P(DecodeOracleHeadDim, Nvfp4Cache) { sweep(CacheKind::nvfp4, GetParam()); }
TEST_P(DecodeOracleHeadDim, Mxfp4Cache) { sweep(CacheKind::mxfp4, GetParam()); }
INSTANTIATE_TEST_SUITE_P(Sm90, DecodeOracleHeadDim, ::testing::ValuesIn(kGpuHeadDims), head_dim_name);

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
  for (int64_t hdim : kGpuHeadDims)
    for (CacheKind kind : {CacheKind::bf16, CacheKind::nvfp4, CacheKind::fp8_per_token}) {
      SCOPED_TRACE("hdim " + std::to_string(hdim));
      KVCase c = gpu_case(kind, hdim);
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

// ALiBi per head and per (sequence, head), on the stream kernel's shapes (one query row a
// kv-head) and the tile kernel's (GQA, several rows), each with causal or a window, softcap,
// splits and varlen queries (rows that see no key included), in plain, FP8 and FP4 caches; and
// the bias must be there: without the slopes the result differs.
TEST(DecodeOracle, Alibi) {
  HFA_REQUIRE_HOPPER();
  int n = 0;
  for (CacheKind kind : {CacheKind::bf16, CacheKind::fp8_per_token, CacheKind::nvfp4})
    for (bool per_sequence : {false, true})
      for (bool stream_shape : {true, false}) {
        KVCase c = gpu_case(kind);
        c.group = stream_shape ? 1 : 4;
        if (stream_shape) {
          c.seqlen_q = 1;
        } else {
          c.query_lengths = {5, 0, 2, 9};
        }
        c.cache_seqlens = {3, 90, 0, 700};
        c.options.causal = per_sequence;
        c.options.window_left = per_sequence ? -1 : 40;
        c.options.softcap = n % 3 == 2 ? 5.0f : 0.0f;
        c.options.num_splits = std::array<int32_t, 3>{0, 1, 3}[n % 3];
        c.seed = static_cast<uint32_t>(900 + n++);
        std::vector<float> slopes;
        for (int64_t i = 0; i < (per_sequence ? 4 : 1) * c.heads_q(); ++i)
          slopes.push_back(0.02f + 0.05f * static_cast<float>(i));
        const Tensor alibi = per_sequence
                                 ? make_tensor(slopes.data(), DType::f32, {4, c.heads_q()})
                                 : make_tensor(slopes.data(), DType::f32, {c.heads_q()});
        c.options.alibi_slopes = &alibi;
        SCOPED_TRACE(std::string(per_sequence ? "per (sequence, head)" : "per head") +
                     (stream_shape ? ", one row a kv-head" : ", GQA rows"));
        // tanh runs at the hardware's approximate precision.
        expect_matches_oracle(c, c.options.softcap > 0 ? Tolerance{1.5e-2, 3e-3}
                                                        : default_tolerance(c.q_dtype()));
        if (::testing::Test::HasFailure()) return;
        std::vector<unsigned char> with_alibi = c.out.bytes;
        c.options.alibi_slopes = nullptr;
        DeviceCase unbiased(c);
        ASSERT_TRUE(unbiased.run().is_ok());
        EXPECT_NE(c.out.bytes, with_alibi);
      }
}

// Windows as wide as an int32 holds (a common stand-in for "unbounded"): the bounds must be
// clamped before query + diagonal ± window is formed, or the sum wraps and no key is seen.
TEST(DecodeOracle, WindowsAtTheInt32Limit) {
  HFA_REQUIRE_HOPPER();
  for (auto [left, right] : {std::pair{INT32_MAX, INT32_MAX}, std::pair{-1, INT32_MAX},
                             std::pair{INT32_MAX - 1, 0}}) {
    SCOPED_TRACE("window " + std::to_string(left) + ", " + std::to_string(right));
    KVCase c = gpu_case(CacheKind::bf16);
    c.group = 4;
    c.seqlen_q = 3;
    c.cache_seqlens = {1, 90, 1000};
    c.options.window_left = left;
    c.options.window_right = right;
    c.options.num_splits = 2;
    expect_matches_oracle(c, default_tolerance(c.q_dtype()));
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

// The varlen sweeps' case: rows {1, 0, 7, 1, 33, 2} over caches {700, 5, 0, 1, 300, 2}, the
// group and causality varied by the case number n, splits >= 0 a split count, < 0 a split size.
KVCase varlen_case(KVCase c, int n, int32_t splits) {
  c.group = (n % 2) ? 4 : 1;
  c.query_lengths = {1, 0, 7, 1, 33, 2};
  c.cache_seqlens = {700, 5, 0, 1, 300, 2};
  c.options.causal = (n % 3) != 0;
  if (splits >= 0) c.options.num_splits = splits;
  else c.options.split_size = -splits;
  return c;
}

// Varlen queries (cu_seqlens_q): decode, speculative and chunked-prefill rows in one call, with
// sequences of no row, of more rows than a 16-row tile (row tiles past a short sequence's rows
// exit), of more rows than keys, an empty cache; every format, page sizes, auto, one and three
// splits, a fixed split size, causal and windowed.
TEST(DecodeVarlen, MatchesOracle) {
  HFA_REQUIRE_HOPPER();
  int n = 0;
  for (CacheKind kind : {CacheKind::bf16, CacheKind::f16, CacheKind::fp8_per_head,
                         CacheKind::fp8_per_token, CacheKind::nvfp4, CacheKind::mxfp4})
    for (int64_t page_size : {int64_t{0}, int64_t{1}, int64_t{16}, int64_t{64}})
      for (int32_t splits : {0, 1, 3, -100}) {  // -100: split_size 100
        KVCase c = varlen_case(gpu_case(kind), n, splits);
        c.paged = page_size > 0;
        c.page_size = page_size;
        if (n % 5 == 4) c.options.window_left = 50;
        c.seed = static_cast<uint32_t>(900 + n++);
        expect_matches_oracle(c, default_tolerance(c.q_dtype()));
        if (::testing::Test::HasFailure()) return;
      }
}

// Varlen queries and a fixed split size at the head dims other than 128: every format.
TEST(DecodeVarlen, OtherHeadDims) {
  HFA_REQUIRE_HOPPER();
  int n = 0;
  for (int64_t hdim : kGpuHeadDims) {
    if (hdim == kGpuHeadDim) continue;  // MatchesOracle's
    SCOPED_TRACE("hdim " + std::to_string(hdim));
    for (CacheKind kind : {CacheKind::bf16, CacheKind::f16, CacheKind::fp8_per_head,
                           CacheKind::fp8_per_token, CacheKind::nvfp4, CacheKind::mxfp4})
      for (int32_t splits : {0, -100}) {  // -100: split_size 100
        KVCase c = varlen_case(gpu_case(kind, hdim), n, splits);
        c.seed = static_cast<uint32_t>(1700 + n++);
        expect_matches_oracle(c, default_tolerance(c.q_dtype()));
        if (::testing::Test::HasFailure()) return;
      }
  }
}

// max_seqlen_q larger than any sequence (more row tiles than rows) and larger than total_q.
TEST(DecodeVarlen, LooseMaxSeqlenQ) {
  HFA_REQUIRE_HOPPER();
  for (int32_t max_seqlen_q : {40, 1000}) {
    KVCase c = gpu_case(CacheKind::bf16);
    c.group = 8;
    c.heads_kv = 1;
    c.query_lengths = {3, 1};
    c.cache_seqlens = {90, 2000};
    c.options.causal = true;
    c.options.num_splits = 2;
    c.options.max_seqlen_q = max_seqlen_q;
    expect_matches_oracle(c, default_tolerance(c.q_dtype()));
  }
}

// Validation mode reads cu_seqlens_q too: a bad offset is an error naming it, not a bad read.
TEST(DecodeVarlen, ValidationModeChecksTheOffsets) {
  HFA_REQUIRE_HOPPER();
  KVCase c = gpu_case(CacheKind::bf16);
  c.query_lengths = {2, 3};
  c.cache_seqlens = {10, 20};
  c.options.validate = true;
  c.build();
  *c.cu_q.at<int32_t>({2}) = 4;  // total_q is 5
  DeviceCase d(c);
  const Status status = d.run();
  EXPECT_EQ(status.code(), Code::invalid_argument);
  EXPECT_NE(status.message().find("cu_seqlens_q"), std::string::npos) << status.message();
}

// split_size: chunks at fixed boundaries, multiples of the 64-key stage or not, one key, more
// chunks than a sequence fills; every format, windows, GQA rows.
TEST(DecodeSplitSize, MatchesOracle) {
  HFA_REQUIRE_HOPPER();
  int n = 0;
  for (CacheKind kind : {CacheKind::bf16, CacheKind::fp8_per_head, CacheKind::fp8_per_token,
                         CacheKind::nvfp4, CacheKind::mxfp4})
    for (int32_t split_size : {12, 64, 100, 333, 4096}) {
      KVCase c = gpu_case(kind);
      c.group = 4;
      c.seqlen_q = 3;
      c.cache_seqlens = {1, 64, 65, 3000};  // capacity 189 pages of 16: split_size >= 12
      c.options.causal = (n % 2) == 0;
      if (n % 3 == 1) {
        c.options.window_left = 77;
        c.options.window_right = 1;
        c.options.causal = false;
      }
      c.options.split_size = split_size;
      c.seed = static_cast<uint32_t>(1300 + n++);
      expect_matches_oracle(c, default_tolerance(c.q_dtype()));
      if (::testing::Test::HasFailure()) return;
    }
}

// With split_size a sequence's out and lse are the same bytes whatever the batch around it:
// alone in a small cache (one chunk: written directly, no combine) or packed among longer and
// empty sequences in a larger cache (more chunks in the grid, the combine), fixed length or
// varlen, chunks on stage boundaries or not.
TEST(DecodeSplitSize, BatchInvariant) {
  HFA_REQUIRE_HOPPER();
  for (CacheKind kind : {CacheKind::bf16, CacheKind::fp8_per_token, CacheKind::nvfp4})
    for (int32_t split_size : {100, 192, 1024}) {
      SCOPED_TRACE(testing::Message() << kind_name(kind) << " split_size " << split_size);
      BatchInvariancePair pair;
      pair.build(gpu_case(kind), split_size);
      KVCase& alone = pair.alone;
      DeviceCase a(alone), c(pair.crowd);
      Status status = a.run();
      ASSERT_TRUE(status.is_ok()) << status.message();
      status = c.run();
      ASSERT_TRUE(status.is_ok()) << status.message();
      EXPECT_TRUE(same_sequence_bytes(alone, 0, pair.crowd, BatchInvariancePair::kCrowdIndex));
      // And right: the alone call against the oracle.
      const Oracle o = oracle_of(alone);
      EXPECT_EQ(compare(alone, o, default_tolerance(alone.q_dtype()), true).failures, 0);
    }
}

// Captures one call of d into a CUDA graph on its own stream, with the workspace its query asks
// for (which must be some: the graph tests pick calls that need one), replays the graph once
// and waits for it.
void run_in_graph(DeviceCase& d) {
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
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  d.options().stream = nullptr;
  d.options().workspace = nullptr;
  d.options().workspace_bytes = 0;
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
  run_in_graph(d);
  if (::testing::Test::HasFatalFailure()) return;
  d.download();
  EXPECT_EQ(compare(c, o, default_tolerance(c.q_dtype()), true).failures, 0);
}

void expect_same_bytes(const char* name, const Storage& got, const Storage& want) {
  ASSERT_EQ(got.bytes.size(), want.bytes.size()) << name;
  const auto [g, w] = std::mismatch(got.bytes.begin(), got.bytes.end(), want.bytes.begin());
  if (g != got.bytes.end())
    ADD_FAILURE() << name << " differs from the CPU append's, first at byte " << (g - got.bytes.begin())
                  << ": " << int(*g) << ", CPU " << int(*w);
}

// The append on the GPU against the CPU append on the same inputs: the caches and scales byte
// for byte (padding included), then out and lse (poisoned first) against the CPU path's.
void expect_gpu_append_matches_cpu(const AppendCase& a, int32_t num_splits) {
  SCOPED_TRACE(describe(a) + " splits " + std::to_string(num_splits));
  KVCase cpu, gpu;
  Rows rows = make_twins(cpu, gpu, a);
  cpu.options.num_splits = gpu.options.num_splits = num_splits;
  const Status cpu_status = cpu.run();
  ASSERT_TRUE(cpu_status.is_ok()) << cpu_status.message();
  DeviceCase d(gpu);
  const Status status = d.run();
  ASSERT_TRUE(status.is_ok()) << status.message();
  d.download_caches();
  expect_same_bytes("k_cache", gpu.k, cpu.k);
  expect_same_bytes("v_cache", gpu.v, cpu.v);
  expect_same_bytes("k_scale", gpu.k_scale, cpu.k_scale);
  expect_same_bytes("v_scale", gpu.v_scale, cpu.v_scale);

  Oracle cpu_result;
  cpu_result.out.resize(static_cast<std::size_t>(cpu.total_q() * cpu.heads_q() * cpu.hdim));
  cpu_result.lse.resize(static_cast<std::size_t>(cpu.heads_q() * cpu.total_q()));
  for (int64_t b = 0; b < cpu.batch(); ++b)
    for (int64_t i = 0; i < cpu.rows_of(b); ++i)
      for (int64_t h = 0; h < cpu.heads_q(); ++h) {
        cpu_result.lse[static_cast<std::size_t>(cpu.lse_index(b, h, i))] = cpu.lse_at(b, h, i);
        for (int64_t c = 0; c < cpu.hdim; ++c)
          cpu_result.out[static_cast<std::size_t>((cpu.token(b, i) * cpu.heads_q() + h) * cpu.hdim + c)] =
              cpu.out_at(b, i, h, c);
      }
  // The GPU rounds the rotated queries to q's dtype (the decode kernel reads them so); the CPU
  // keeps them in fp32: a score moves by about one 16-bit rounding of q.
  const Tolerance base = default_tolerance(gpu.q_dtype());
  const Tolerance tol = a.rotary == Rotary::none ? Tolerance{base.out, 2 * base.lse} : Tolerance{2e-2, 1e-2};
  EXPECT_EQ(compare(gpu, cpu_result, tol, true).failures, 0);
}

// How an append sweep packs its new tokens and its queries.
enum class Packing {
  fixed,             // seqlen_new tokens and query rows a sequence
  varlen_new,        // cu_seqlens_k_new (ragged, 0 included), seqlen_new query rows each
  varlen_new_and_q,  // cu_seqlens_k_new and cu_seqlens_q, counted apart
};

void append_sweep(CacheKind kind, int64_t hdim, Packing packing = Packing::fixed) {
  HFA_REQUIRE_HOPPER();
  SCOPED_TRACE("hdim " + std::to_string(hdim));
  const DType q_dtype = kind == CacheKind::f16 ? DType::f16 : DType::bf16;
  int n = 0;
  for (int64_t page_size : {int64_t{0}, int64_t{1}, int64_t{16}, int64_t{64}, int64_t{256}})
    for (Rotary rotary : {Rotary::none, Rotary::interleaved, Rotary::halves})
      for (int64_t seqlen_new : {1, 5}) {
        AppendCase a;
        a.kind = kind;
        a.paged = page_size > 0;
        a.page_size = a.paged ? page_size : a.page_size;
        a.hdim = hdim;
        a.scale_pad = aligned_scale_pad(kind, hdim);
        a.seqlen_new = seqlen_new;
        a.rotary = rotary;
        // Half the row (a boundary between lanes), 42 (inside a lane where lanes own 4 or 8
        // columns: lane 10 rotates 2 of its 4 at hdim 128), and the whole row.
        a.rotary_dim = std::array<int64_t, 3>{hdim / 2, 42, hdim}[n % 3];
        a.angle_tables = true;
        a.table_dtype = (n / 3) % 2 ? q_dtype : DType::f32;
        a.causal = (n / 2) % 2 == 1;  // moves the queries' rotary positions
        a.lengths = {0, 1, 20, 37, 300};
        const int32_t many = static_cast<int32_t>(2 * seqlen_new);
        if (packing != Packing::fixed) a.new_tokens = {int32_t(seqlen_new), 0, 3, 1, many};
        if (packing == Packing::varlen_new_and_q) a.query_lengths = {2, 3, 0, 1, many};
        expect_gpu_append_matches_cpu(a, std::array<int32_t, 3>{0, 1, 3}[(n / 2) % 3]);
        ++n;
        if (::testing::Test::HasFailure()) return;
      }
}

// The append at every head dim (a lane owns 2, 4 or 8 columns): DecodeAppendHeadDim.<format>/hdim64…
class DecodeAppendHeadDim : public ::testing::TestWithParam<int64_t> {};

TEST_P(DecodeAppendHeadDim, Bf16Cache) { append_sweep(CacheKind::bf16, GetParam()); }
TEST_P(DecodeAppendHeadDim, F16Cache) { append_sweep(CacheKind::f16, GetParam()); }
TEST_P(DecodeAppendHeadDim, Fp8PerKvHeadCache) { append_sweep(CacheKind::fp8_per_head, GetParam()); }
TEST_P(DecodeAppendHeadDim, Fp8PerTokenCache) { append_sweep(CacheKind::fp8_per_token, GetParam()); }
TEST_P(DecodeAppendHeadDim, Nvfp4Cache) { append_sweep(CacheKind::nvfp4, GetParam()); }
TEST_P(DecodeAppendHeadDim, Mxfp4Cache) { append_sweep(CacheKind::mxfp4, GetParam()); }
INSTANTIATE_TEST_SUITE_P(Sm90, DecodeAppendHeadDim, ::testing::ValuesIn(kGpuHeadDims), head_dim_name);

// Varlen new tokens (cu_seqlens_k_new) at every head dim, with fixed-length and varlen queries:
// DecodeAppendVarlen.<format>/hdim64…
class DecodeAppendVarlen : public ::testing::TestWithParam<int64_t> {};

void varlen_append_sweep(CacheKind kind, int64_t hdim) {
  for (Packing packing : {Packing::varlen_new, Packing::varlen_new_and_q}) {
    SCOPED_TRACE(packing == Packing::varlen_new ? "fixed-length q" : "varlen q");
    append_sweep(kind, hdim, packing);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST_P(DecodeAppendVarlen, Bf16Cache) { varlen_append_sweep(CacheKind::bf16, GetParam()); }
TEST_P(DecodeAppendVarlen, F16Cache) { varlen_append_sweep(CacheKind::f16, GetParam()); }
TEST_P(DecodeAppendVarlen, Fp8PerKvHeadCache) { varlen_append_sweep(CacheKind::fp8_per_head, GetParam()); }
TEST_P(DecodeAppendVarlen, Fp8PerTokenCache) { varlen_append_sweep(CacheKind::fp8_per_token, GetParam()); }
TEST_P(DecodeAppendVarlen, Nvfp4Cache) { varlen_append_sweep(CacheKind::nvfp4, GetParam()); }
TEST_P(DecodeAppendVarlen, Mxfp4Cache) { varlen_append_sweep(CacheKind::mxfp4, GetParam()); }
INSTANTIATE_TEST_SUITE_P(Sm90, DecodeAppendVarlen, ::testing::ValuesIn(kGpuHeadDims), head_dim_name);

// Validation mode reads cu_seqlens_k_new too: a bad offset is an error naming it, and the caches
// are left as they were (the check runs before the append).
TEST(DecodeAppendVarlenErrors, ValidationModeChecksTheOffsets) {
  HFA_REQUIRE_HOPPER();
  AppendCase a;
  a.kind = CacheKind::fp8_per_token;
  a.hdim = kGpuHeadDim;
  a.new_tokens = {2, 0, 3, 1};
  KVCase c;
  make_cache(c, a);
  Rows rows = make_rows(c, a);
  attach(c, a, rows);
  c.options.validate = true;
  *rows.cu_new.at<int32_t>({2}) = 1;  // 0 2 1 5 6: decreasing
  const std::vector<unsigned char> k_before = c.k.bytes, k_scale_before = c.k_scale.bytes;
  DeviceCase d(c);
  const Status status = d.run();
  EXPECT_EQ(status.code(), Code::invalid_argument);
  EXPECT_EQ(status.message().rfind("cu_seqlens_k_new:", 0), 0u) << status.message();
  d.download_caches();
  EXPECT_TRUE(c.k.bytes == k_before) << "k_cache written";
  EXPECT_TRUE(c.k_scale.bytes == k_scale_before) << "k_scale written";
}

// The append in a CUDA graph: no allocation, no host synchronization, the rotated queries in
// the captured workspace.
TEST(DecodeAppend, CapturesAndReplays) {
  HFA_REQUIRE_HOPPER();
  AppendCase a;
  a.kind = CacheKind::nvfp4;
  a.hdim = kGpuHeadDim;
  a.scale_pad = aligned_scale_pad(a.kind, a.hdim);
  a.seqlen_new = 3;
  a.rotary = Rotary::halves;
  a.angle_tables = true;
  a.causal = true;
  KVCase cpu, gpu;
  Rows rows = make_twins(cpu, gpu, a);
  ASSERT_TRUE(cpu.run().is_ok());
  DeviceCase d(gpu);
  run_in_graph(d);  // the workspace holds the rotated queries, even with one split
  if (::testing::Test::HasFatalFailure()) return;
  d.download_caches();
  expect_same_bytes("k_cache", gpu.k, cpu.k);
  expect_same_bytes("k_scale", gpu.k_scale, cpu.k_scale);
  expect_same_bytes("v_cache", gpu.v, cpu.v);
}

// sm_margin plans the automatic splits for fewer SMs: still the oracle's answer; with a given
// split count it changes no byte. A margin that leaves no SM is rejected by the workspace query
// and the call alike, naming sm_margin.
TEST(DecodeSmMargin, PlansForTheSmsLeft) {
  HFA_REQUIRE_HOPPER();
  const int sms = sm_count();
  for (int32_t margin : {1, sms / 2, sms - 1}) {
    SCOPED_TRACE("sm_margin " + std::to_string(margin));
    KVCase c = gpu_case(CacheKind::bf16);
    c.group = 4;
    c.cache_seqlens = {3000, 17, 900};
    c.options.sm_margin = margin;
    expect_matches_oracle(c, default_tolerance(c.q_dtype()));
  }
  std::vector<unsigned char> plain_out, plain_lse;
  for (int32_t margin : {0, sms - 1}) {
    KVCase c = gpu_case(CacheKind::fp8_per_head);
    c.cache_seqlens = {3000, 17, 900};
    c.options.num_splits = 5;
    c.options.sm_margin = margin;
    c.build();
    DeviceCase d(c);
    const Status status = d.run();
    ASSERT_TRUE(status.is_ok()) << status.message();
    if (margin == 0) {
      plain_out = c.out.bytes, plain_lse = c.lse.bytes;
    } else {
      EXPECT_TRUE(c.out.bytes == plain_out);
      EXPECT_TRUE(c.lse.bytes == plain_lse);
    }
  }
}

TEST(DecodeSmMargin, NoSmLeftIsRejected) {
  HFA_REQUIRE_HOPPER();
  KVCase c = gpu_case(CacheKind::bf16);
  c.options.sm_margin = sm_count();
  c.build();
  DeviceCase d(c);
  Status status;
  d.workspace_size(&status);
  EXPECT_EQ(status.code(), Code::invalid_argument);
  EXPECT_EQ(status.message().rfind("sm_margin: ", 0), 0u) << status.message();
  status = d.run_as_is();
  EXPECT_EQ(status.code(), Code::invalid_argument);
  EXPECT_EQ(status.message().rfind("sm_margin: ", 0), 0u) << status.message();
}

TEST(DecodeErrors, WorkspaceTooSmallMissingOrMisaligned) {
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
  // Large enough but off the alignment the combine's 16-byte loads need: refused, no launch.
  DeviceBuffer shifted(bytes + 16);
  d.options().workspace = static_cast<unsigned char*>(shifted.get()) + 16;
  d.options().workspace_bytes = bytes;
  status = d.run_as_is();
  EXPECT_EQ(status.code(), Code::invalid_argument);
  EXPECT_EQ(status.message().rfind("workspace: must be aligned to 256 bytes", 0), 0u)
      << status.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
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
  // Head dims between and beyond the compiled ones: the message names them.
  for (int64_t hdim : {96, 192}) {
    KVCase odd_head = gpu_case(CacheKind::bf16, hdim);
    odd_head.build();
    DeviceCase d(odd_head);
    const Status status = d.run();
    EXPECT_EQ(status.code(), Code::not_supported) << "hdim " << hdim;
    EXPECT_NE(status.message().find("headdim"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("64, 128, 256"), std::string::npos) << status.message();
  }

  // FP4 scale rows the 4-byte copies cannot take: 6-byte rows at hdim 128, MXFP4's unpadded
  // 2-byte rows at hdim 64.
  for (auto [hdim, pad] : {std::pair<int64_t, int64_t>{128, 2}, {64, 0}}) {
    KVCase unaligned = gpu_case(CacheKind::mxfp4, hdim);
    unaligned.scale_pad = pad;
    unaligned.build();
    DeviceCase d(unaligned);
    const Status status = d.run();
    EXPECT_EQ(status.code(), Code::not_supported) << "hdim " << hdim;
    EXPECT_NE(status.message().find("k_scale"), std::string::npos) << status.message();
  }
}

// The accuracy table of docs/decisions/028: the largest error against the float64 oracle on the
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
