// The Hopper FP8 forward (e4m3 q, k, v with descales, through the public API on device tensors)
// against the float64 oracle of the inputs the codes dequantize to, within the bound of
// docs/design.md §6 against a peer that rounds P as the kernel feeds its tensor cores (scaled to
// 2^8 at the row's largest, to e4m3) and whose LSE bound allows for the FP8 tensor cores'
// accumulation of Q·Kᵀ (fp8_expectation). Every head dim a call may have (64 and 96 run on the
// 128 kernels, 192 on 256) meets every mask × softcap × sinks × GQA × layout, each with a
// descale form (none, per tensor, FlashAttention-3's per kv head broadcast over the batch, per
// query head, per block); out starts as NaN, so unwritten elements fail. Keys past seqused_k
// hold NaN codes in one test: the transposed V must not carry them into P·V (0·NaN = NaN).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "common/forward_checks.hpp"
#include "common/fp8_case.hpp"
#include "sm90/gpu_combinations.hpp"
#include "sm90/gpu_test_support.hpp"

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

// The FP8 forward on the GPU over the codes; out and lse come back into the case's buffers.
void fp8_forward_on_gpu(AttentionData& data, const Fp8Inputs& fp8) {
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
  std::size_t bytes = 0;
  ASSERT_TRUE(forward_workspace_size(*dq, *dk, *dv, o, &bytes).is_ok());
  DeviceBuffer workspace(bytes);
  o.workspace = workspace.get(), o.workspace_bytes = bytes;
  const Status status = forward(*dq, *dk, *dv, *dout, dlse, o);
  ASSERT_TRUE(status.is_ok()) << status.message();
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
    const std::vector<int32_t>& cu = data.cu_seqlens_k();
    for (std::size_t b = 0; b < c.seqused_k.size(); ++b)
      for (int64_t row = cu[b] + c.seqused_k[b]; row < cu[b + 1]; ++row)
        for (int64_t i = row * c.heads_kv * hdim; i < (row + 1) * c.heads_kv * hdim; ++i) {
          fp8.k.set(i, NAN);
          fp8.v.set(i, NAN);
        }
    const ForwardExpectation expected = fp8_expectation(data);
    fp8_forward_on_gpu(data, fp8);
    check_forward_results(data, expected);
  }
}

}  // namespace
}  // namespace hfa::test
