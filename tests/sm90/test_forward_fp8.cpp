// The Hopper FP8 forward (e4m3 q, k, v with descales, through the public API on device tensors)
// against the float64 oracle of the inputs the codes dequantize to, within the bound of
// docs/design.md §6 against a peer that rounds P as the kernel feeds its tensor cores (scaled to
// 2^8 at the row's largest, to e4m3) and whose LSE bound allows for the FP8 tensor cores'
// accumulation of Q·Kᵀ (fp8_expectation). Every head dim a call may have (64 and 96 run on the
// 128 kernels, 192 on 256) meets every mask × softcap × sinks × GQA × layout, each with a
// descale form (none, per tensor, FlashAttention-3's per kv head broadcast over the batch, per
// query head, per block); out starts as NaN, so unwritten elements fail. Keys past seqused_k
// hold NaN codes in one test: the transposed V must not carry them into P·V (0·NaN = NaN).
// V is transposed by a pass before the kernel or in it (sm90/fwd/launch.hpp's rule picks): one
// test runs the same inputs through both, and checks the rule on the grid it was measured on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/validate.hpp"
#include "common/expected.hpp"
#include "common/forward_checks.hpp"
#include "common/fp8_case.hpp"
#include "sm90/device.hpp"
#include "sm90/fwd/launch.hpp"
#include "sm90/gpu_combinations.hpp"
#include "sm90/gpu_test_support.hpp"
#include "sm90/kernel_list.hpp"

namespace hfa::test {
namespace {

using Form = DescaleForm;

// Elements a strided view spans (its strides are not negative).
int64_t span_elements(const Tensor& t) {
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] == 0) return 0;
    last += (t.shape[d] - 1) * t.stride[d];
  }
  return last + 1;
}

// Device copies of the host views an FP8 call takes, and views of them.
class DeviceViews {
 public:
  const Tensor* mirror(const Tensor* host) {
    if (host == nullptr) return nullptr;
    const std::size_t bytes = std::size_t(span_elements(*host)) * dtype_size(DType(host->dtype));
    copies_.push_back(std::make_unique<DeviceCopy>(host->data, bytes));
    views_.push_back(std::make_unique<Tensor>(*host));
    views_.back()->data = copies_.back()->get<void>();
    views_.back()->device = HFA_CUDA;
    views_.back()->device_index = 0;
    return views_.back().get();
  }
  // Every copy was made.
  bool copied() const {
    for (const auto& copy : copies_)
      if (copy->status() != cudaSuccess) return false;
    return true;
  }

 private:
  std::vector<std::unique_ptr<DeviceCopy>> copies_;
  std::vector<std::unique_ptr<Tensor>> views_;
};

using sm90::fwd::Fp8VTranspose;

// The FP8 forward on the GPU over the codes; out and lse come back into the case's buffers.
// With `v_transpose`, the sm90 forward's entry runs the problem the API builds with V transposed
// that way, whatever the rule would pick; without, the API's call.
void fp8_forward_on_gpu(AttentionData& data, const Fp8Inputs& fp8,
                        std::optional<Fp8VTranspose> v_transpose = std::nullopt) {
  DeviceViews device;
  const Tensor q = fp8.q.view(), k = fp8.k.view(), v = fp8.v.view();
  const Tensor out = data.out.view(), lse = data.lse.view();
  const Tensor *dq = device.mirror(&q), *dk = device.mirror(&k), *dv = device.mirror(&v);
  const Tensor *dout = device.mirror(&out), *dlse = device.mirror(&lse);
  Options o = fp8.options();
  for (const Tensor** field : {&o.cu_seqlens_q, &o.cu_seqlens_k, &o.seqused_q, &o.seqused_k,
                               &o.sinks, &o.q_descale, &o.k_descale, &o.v_descale}) {
    *field = device.mirror(*field);
  }
  ASSERT_TRUE(device.copied());
  if (v_transpose) {
    detail::ForwardProblem p;
    const Status built =
        detail::build_forward_problem({dq, dk, dv, dout, dlse, &o}, detail::Purpose::run, &p);
    ASSERT_TRUE(built.is_ok()) << built.message();
    DeviceBuffer workspace(sm90::fwd::workspace_bytes(p, *v_transpose));
    p.workspace = workspace.get(), p.workspace_bytes = workspace.bytes();
    const sm90::DeviceFacts& facts = sm90::device_facts(0);
    ASSERT_TRUE(facts.status.is_ok()) << facts.status.message();
    const sm90::fwd::LaunchContext context{facts.sm_count, facts.l2_bytes};
    const Status status = sm90::with_compiled_fp8_kernel(
        p.out_dtype, p.hdim_qk, p.hdim_v, [&]<int kQK, int kV, typename Out>() {
          return sm90::fwd::run_forward_fp8<kQK, kV, Out>(p, context, *v_transpose);
        });
    ASSERT_TRUE(status.is_ok()) << status.message();
    HFA_CUDA_OK(cudaDeviceSynchronize());
  } else {
    std::size_t bytes = 0;
    ASSERT_TRUE(forward_workspace_size(*dq, *dk, *dv, o, &bytes).is_ok());
    DeviceBuffer workspace(bytes);
    o.workspace = workspace.get(), o.workspace_bytes = bytes;
    const Status status = forward(*dq, *dk, *dv, *dout, dlse, o);
    ASSERT_TRUE(status.is_ok()) << status.message();
  }
  HFA_CUDA_OK(cudaDeviceSynchronize());
  HFA_CUDA_OK(cudaMemcpy(data.out.data(), dout->data, data.out.storage_bytes(), cudaMemcpyDeviceToHost));
  HFA_CUDA_OK(cudaMemcpy(data.lse.data(), dlse->data, data.lse.storage_bytes(), cudaMemcpyDeviceToHost));
}

// The largest Euclidean norm of a row (over the head dim) of a tensor's values.
double largest_row_norm(const HostTensor& t) {
  const std::vector<double> values = t.values();
  const int64_t dim = t.shape().back();
  double largest = 0.0;
  for (std::size_t row = 0; row * dim < values.size(); ++row) {
    double sum = 0.0;
    for (int64_t c = 0; c < dim; ++c) sum += values[row * dim + c] * values[row * dim + c];
    largest = std::max(largest, sum);
  }
  return std::sqrt(largest);
}

// The oracle and the peer of a case whose inputs the codes dequantize to. The FP8 tensor cores
// accumulate Q·Kᵀ with about 13 mantissa bits, truncated (FlashAttention-3's and DeepSeek's
// "FP22"), where the peer adds in fp32: measured on the H200, a score errs by up to ~2^-12 of
// Σ|q_c·k_c| ≤ ‖q‖·‖k‖, and the LSE with it (its error is a softmax average of the scores').
// The LSE bound gets 2^-10·scale·max‖q‖·max‖k‖ on top: a few times the worst seen, far below
// what a wrong scale or mask would give.
ForwardExpectation fp8_expectation(AttentionData& data) {
  ForwardExpectation e = expected_forward(data, cpu::ProbabilityRounding::e4m3);
  const detail::ForwardProblem p = data.forward_problem();
  e.lse_floor += std::ldexp(p.softmax_scale * largest_row_norm(data.q) * largest_row_norm(data.k), -10);
  return e;
}

// The descale forms, one per case in turn: every form meets every option over the loop.
Fp8Spec spec_for(int index) {
  switch (index % 5) {
    case 0: return {Form::per_tensor, Form::per_tensor};
    case 1: return {Form::per_kv_head, Form::per_kv_head, 0, 0, true};  // FA3's, broadcast
    case 2: return {Form::per_query_head, Form::per_kv_head};
    case 3: return {Form::per_block, Form::per_block, 37, 128, true};
    default: return {Form::none, Form::per_block, 0, 256};
  }
}

class ForwardSm90Fp8 : public ::testing::TestWithParam<HeadDims> {};

TEST_P(ForwardSm90Fp8, EveryOptionWithEveryDescaleForm) {
  HFA_REQUIRE_HOPPER();
  for_each_forward_feature_case(DType::f32, GetParam(), [](AttentionCase c, int index) {
    c.out_dtype = index % 7 == 3 ? DType::f16 : DType::bf16;
    c.seed = 7000 + index;
    const Fp8Spec spec = spec_for(index);
    SCOPED_TRACE(c.name() + "_descale" + std::to_string(index % 5));
    AttentionData data(c);
    const Fp8Inputs fp8(data, spec);
    const ForwardExpectation expected = fp8_expectation(data);
    fp8_forward_on_gpu(data, fp8);
    check_forward_results(data, expected);
  });
}

INSTANTIATE_TEST_SUITE_P(HeadDims, ForwardSm90Fp8,
                         ::testing::Values(HeadDims{64, 64}, HeadDims{96, 96}, HeadDims{128, 128},
                                           HeadDims{192, 128}, HeadDims{256, 256}),
                         [](const auto& info) {
                           return "d" + std::to_string(info.param.qk) + "v" + std::to_string(info.param.v);
                         });

// Long sequences: many key blocks per tile (the descales' per-block units change block after
// block; without per-block k and v scales, the wider tiles of hdim 128), a varlen batch of long
// and short sequences, causal with seqlen_q != seqlen_k.
TEST(ForwardSm90Fp8Long, ManyBlocks) {
  HFA_REQUIRE_HOPPER();
  int index = 0;
  for (int hdim : {128, 256}) {
    AttentionCase fixed;
    fixed.out_dtype = DType::bf16;
    fixed.hdim_qk = fixed.hdim_v = hdim;
    fixed.heads_q = 4, fixed.heads_kv = 2;
    fixed.seqlen_q = 700, fixed.seqlen_k = 1500;
    fixed.causal = true;
    AttentionCase varlen = fixed;
    varlen.causal = false;
    varlen.varlen_q = {1000, 3, 700, 257};
    varlen.varlen_k = {1000, 900, 700, 1};
    for (const AttentionCase& base : {fixed, varlen})
      for (const Fp8Spec& spec : {Fp8Spec{Form::per_block, Form::per_block, 64, 128},
                                  Fp8Spec{Form::per_kv_head, Form::per_block, 0, 384},
                                  Fp8Spec{Form::per_tensor, Form::per_kv_head}}) {
        AttentionCase c = base;
        c.seed = 7900 + index++;
        SCOPED_TRACE(c.name());
        AttentionData data(c);
        const Fp8Inputs fp8(data, spec);
        const ForwardExpectation expected = fp8_expectation(data);
        fp8_forward_on_gpu(data, fp8);
        check_forward_results(data, expected);
      }
  }
}

// NaN codes in k and v at the keys past each sequence's seqused_k (a padded allocation's
// garbage).
void poison_past_used_keys(const AttentionData& data, Fp8Inputs& fp8) {
  const AttentionCase& c = data.spec();
  const std::vector<int32_t>& cu = data.cu_seqlens_k();
  const int64_t row_codes = int64_t(c.heads_kv) * c.hdim_qk;
  for (std::size_t b = 0; b < c.seqused_k.size(); ++b)
    for (int64_t row = cu[b] + c.seqused_k[b]; row < cu[b + 1]; ++row)
      for (int64_t i = row * row_codes; i < (row + 1) * row_codes; ++i) {
        fp8.k.set(i, NAN);
        fp8.v.set(i, NAN);
      }
}

// A padded allocation with garbage past seqused_k: NaN codes in k and v there never reach out.
TEST(ForwardSm90Fp8Padding, NaNPastSequsedK) {
  HFA_REQUIRE_HOPPER();
  for (int hdim : {128, 256}) {
    AttentionCase c;
    c.out_dtype = DType::bf16;
    c.hdim_qk = c.hdim_v = hdim;
    c.heads_q = c.heads_kv = 2;
    c.varlen_q = {300, 200};
    c.varlen_k = {1024, 1024};
    c.seqused_k = {700, 1000};
    c.causal = hdim == 256;
    c.seed = 7990 + hdim;
    SCOPED_TRACE(c.name());
    AttentionData data(c);
    Fp8Inputs fp8(data, {Form::per_tensor, Form::per_kv_head});
    poison_past_used_keys(data, fp8);
    const ForwardExpectation expected = fp8_expectation(data);
    fp8_forward_on_gpu(data, fp8);
    check_forward_results(data, expected);
  }
}

// The same inputs with V transposed by the pass and in the kernel: each against the float64
// oracle, and the two bit for bit (the same tiles meet the same bytes of V in shared memory).
// Head dims 64 and 96 (padded on 128), 128, 192 (on 256) and 256; odd lengths; causal,
// sliding and none; GQA; per-block k and v scales (the 128-key tiles at hdim 128); varlen with
// NaN codes past seqused_k, where the in-kernel transpose must write zeros for the keys of a
// block past its sequence's used end, part of a 16-key group or all of it, and keys of the next
// sequence behind them.
TEST(ForwardSm90Fp8VTranspose, InKernelAndPass) {
  HFA_REQUIRE_HOPPER();
  int index = 0;
  for (int hdim : {64, 96, 128, 192, 256})
    for (int shape = 0; shape < 4; ++shape) {
      AttentionCase c;
      c.out_dtype = shape == 2 ? DType::f16 : DType::bf16;
      c.hdim_qk = c.hdim_v = hdim;
      Fp8Spec spec{Form::per_tensor, Form::per_kv_head};
      switch (shape) {
        case 0:  // odd lengths, GQA, causal with more keys than queries
          c.batch = 2, c.seqlen_q = 333, c.seqlen_k = 517;
          c.heads_q = 6, c.heads_kv = 2;
          c.causal = true;
          break;
        case 1:  // no mask, keys ending inside a 16-key group, per-block scales
          c.batch = 3, c.seqlen_q = 190, c.seqlen_k = 1001;
          c.heads_q = c.heads_kv = 2;
          spec = {Form::per_block, Form::per_block, 64, 128};
          break;
        case 2:  // varlen, garbage past seqused_k (a group's tail, whole groups, whole blocks)
          c.heads_q = 4, c.heads_kv = 2;
          c.varlen_q = {129, 1, 300, 77};
          c.varlen_k = {700, 260, 1024, 33};
          c.seqused_k = {643, 257, 700, 17};
          c.causal = hdim != 128;
          break;
        default:  // a sliding window over a varlen batch, keys of the next sequence behind
          c.heads_q = c.heads_kv = 3;
          c.varlen_q = {250, 513};
          c.varlen_k = {451, 513};
          c.causal = true, c.window_left = 100;
          spec = {Form::per_query_head, Form::per_kv_head};
          break;
      }
      c.seed = 8100 + index++;
      SCOPED_TRACE(c.name());
      AttentionData pass_data(c), kernel_data(c);
      Fp8Inputs pass_fp8(pass_data, spec), kernel_fp8(kernel_data, spec);
      poison_past_used_keys(pass_data, pass_fp8);
      poison_past_used_keys(kernel_data, kernel_fp8);
      const ForwardExpectation expected = fp8_expectation(pass_data);
      fp8_forward_on_gpu(pass_data, pass_fp8, Fp8VTranspose::pass);
      fp8_forward_on_gpu(kernel_data, kernel_fp8, Fp8VTranspose::in_kernel);
      {
        SCOPED_TRACE("pass");
        check_forward_results(pass_data, expected);
      }
      {
        SCOPED_TRACE("in the kernel");
        check_forward_results(kernel_data, expected);
      }
      ASSERT_EQ(pass_data.out.storage_bytes(), kernel_data.out.storage_bytes());
      EXPECT_EQ(std::memcmp(pass_data.out.data(), kernel_data.out.data(),
                            pass_data.out.storage_bytes()),
                0)
          << "out differs between the pass and the in-kernel transpose";
      EXPECT_EQ(std::memcmp(pass_data.lse.data(), kernel_data.lse.data(),
                            pass_data.lse.storage_bytes()),
                0)
          << "lse differs between the pass and the in-kernel transpose";
    }
}

// The rule (host arithmetic, no GPU): on the grid it was measured on (16k tokens a call, 16
// heads), the in-kernel transpose at 2k tokens with and without the causal mask and at 4k
// causal, the pass from 4k non-causal and 8k causal on; never with softcap; and the workspace
// query asks for no copy of v where the kernel transposes.
TEST(ForwardSm90Fp8VTranspose, RulePicksShortProblems) {
  auto problem = [](int seqlen, bool causal) {
    detail::ForwardProblem p;
    p.dtype = DType::e4m3;
    p.out_dtype = DType::bf16;
    p.batch = 16384 / seqlen;
    p.seqlen_q = p.seqlen_k = seqlen;
    p.heads_q = p.heads_kv = 16;
    p.hdim_qk = p.hdim_v = 128;
    p.causal = causal;
    p.window_right = causal ? 0 : -1;
    return p;
  };
  for (bool causal : {false, true}) {
    EXPECT_TRUE(sm90::fwd::fp8_transposes_v_in_kernel(problem(2048, causal))) << causal;
    EXPECT_FALSE(sm90::fwd::fp8_transposes_v_in_kernel(problem(8192, causal))) << causal;
    EXPECT_FALSE(sm90::fwd::fp8_transposes_v_in_kernel(problem(16384, causal))) << causal;
  }
  EXPECT_TRUE(sm90::fwd::fp8_transposes_v_in_kernel(problem(4096, true)));
  EXPECT_FALSE(sm90::fwd::fp8_transposes_v_in_kernel(problem(4096, false)));
  EXPECT_DOUBLE_EQ(sm90::fwd::query_rows_per_key(problem(4096, true)), 2048.5);
  // Other head dims: the causal 2k kind only (the bound is 1280 rows a key there).
  auto wide = [&](int seqlen, bool causal) {
    detail::ForwardProblem p = problem(seqlen, causal);
    p.hdim_qk = p.hdim_v = 256;
    p.heads_q = p.heads_kv = 8;
    return p;
  };
  EXPECT_TRUE(sm90::fwd::fp8_transposes_v_in_kernel(wide(2048, true)));
  EXPECT_FALSE(sm90::fwd::fp8_transposes_v_in_kernel(wide(2048, false)));
  EXPECT_FALSE(sm90::fwd::fp8_transposes_v_in_kernel(wide(4096, true)));
  EXPECT_DOUBLE_EQ(sm90::fwd::query_rows_per_key(problem(2048, false)), 2048.0);

  // A window of 100 keys to the left: 101 rows a key, but for the last keys' fewer.
  detail::ForwardProblem windowed = problem(2048, true);
  windowed.window_left = 100;
  EXPECT_DOUBLE_EQ(sm90::fwd::query_rows_per_key(windowed), (101.0 * 2048 - 100 * 101 / 2) / 2048);
  // More queries than keys, causal (bottom-right): the first 1000 queries see no key.
  detail::ForwardProblem tall = problem(2048, true);
  tall.seqlen_q = 3048;
  EXPECT_DOUBLE_EQ(sm90::fwd::query_rows_per_key(tall), 2049.0 / 2);
  // GQA: every query head of a kv head reads its v.
  detail::ForwardProblem grouped = problem(2048, true);
  grouped.heads_kv = 4;
  EXPECT_FALSE(sm90::fwd::fp8_transposes_v_in_kernel(grouped));

  detail::ForwardProblem softcapped = problem(2048, false);
  softcapped.softcap = 30.0f;
  EXPECT_FALSE(sm90::fwd::fp8_transposes_v_in_kernel(softcapped));
  EXPECT_GT(sm90::fwd::workspace_bytes(softcapped), sm90::fwd::fp8_vt_bytes(softcapped));

  EXPECT_EQ(sm90::fwd::workspace_bytes(problem(2048, false)), 0u);
  EXPECT_EQ(sm90::fwd::workspace_bytes(problem(2048, true)), sm90::fwd::kTileCounterBytes);
  EXPECT_EQ(sm90::fwd::workspace_bytes(problem(16384, false)),
            sm90::fwd::kVtOffset + sm90::fwd::fp8_vt_bytes(problem(16384, false)));
}

}  // namespace
}  // namespace hfa::test
