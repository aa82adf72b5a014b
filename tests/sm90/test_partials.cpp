// Attention split over keys on the Hopper backend (hfa_options.accumulate, softmax_d; the CPU's
// semantics are tests/api/test_partials.cpp):
//   F32Out: an f32 out of 16-bit inputs, every head-dim pair × mask × layout × GQA, within the
//     docs/design.md §6 bound of the oracle (the peer rounds P to the input dtype, as the
//     kernels do).
//   Accumulate: the keys split in two calls, the second merging into the first's f32 out and
//     lse (or both merging into lse = −inf over a NaN out), against the whole problem's oracle;
//     causal cuts that leave rows no key in one part.
//   SoftmaxD: the backward with a given D, over an out poisoned with NaN, within the bound.
// Skipped without a Hopper GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/attention_case.hpp"
#include "common/backend.hpp"
#include "common/backward_checks.hpp"
#include "common/expected.hpp"
#include "common/forward_checks.hpp"
#include "sm90/gpu_case.hpp"
#include "sm90/gpu_combinations.hpp"

namespace hfa::test {
namespace {

class F32Out : public ::testing::TestWithParam<Combination> {};

TEST_P(F32Out, MatchesTheOracle) {
  HFA_REQUIRE_HOPPER();
  const Combination& combination = GetParam();
  for (Mask mask : {Mask::none, Mask::causal, Mask::window})
    for (Layout layout : {Layout::fixed, Layout::varlen, Layout::seqused, Layout::short_varlen})
      for (bool gqa : {false, true}) {
        AttentionCase c;
        c.dtype = combination.dtype;
        c.out_dtype = DType::f32;
        c.hdim_qk = combination.dims.qk;
        c.hdim_v = combination.dims.v;
        c.heads_q = gqa ? 8 : 4;
        c.heads_kv = gqa ? 2 : 4;
        c.sinks = gqa;
        set_mask(c, mask);
        set_layout(c, layout);
        SCOPED_TRACE(c.name());
        AttentionData data(c);
        const ForwardExpectation expected = expected_forward(data, true);
        GpuCase gpu(data);
        ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
        ASSERT_NO_FATAL_FAILURE(gpu.forward());
        check_forward_results(data, expected);
      }
}

INSTANTIATE_TEST_SUITE_P(Sm90, F32Out, ::testing::ValuesIn(combinations()),
                         [](const auto& info) { return combination_name(info.param); });

// The case's keys split at `cut`: a first call over [0, cut) and a second over [cut, seqlen_k),
// as problems over the same device buffers. Bottom-right causal over the whole is, for the
// first part, a window whose right edge sits seqlen_k − cut keys further right.
void run_in_two_parts(const GpuCase& gpu, const AttentionCase& c, int32_t cut,
                      bool first_accumulates) {
  const detail::Backend& sm90 = *detail::sm90_backend();
  detail::ForwardProblem first = gpu.forward_problem();
  detail::ForwardProblem second = first;
  first.seqlen_k = cut;
  first.causal = false;
  first.window_right = c.causal ? c.seqlen_k - cut : -1;
  first.accumulate = first_accumulates;
  const std::size_t element = dtype_size(c.dtype);
  second.k = static_cast<const std::byte*>(second.k) + int64_t{cut} * second.k_stride.row * element;
  second.v = static_cast<const std::byte*>(second.v) + int64_t{cut} * second.v_stride.row * element;
  second.seqlen_k = c.seqlen_k - cut;
  second.sinks = nullptr;  // a series passes its sinks to one call
  second.accumulate = true;
  for (detail::ForwardProblem* part : {&first, &second}) {
    std::size_t bytes = 0;
    ASSERT_TRUE(sm90.forward_workspace_size(*part, &bytes).is_ok());
    DeviceBuffer workspace(bytes);
    part->workspace = workspace.get(), part->workspace_bytes = bytes;
    const Status status = sm90.forward(*part);
    ASSERT_TRUE(status.is_ok()) << status.message();
    HFA_CUDA_OK(cudaDeviceSynchronize());
  }
}

TEST(Accumulate, TwoPartsGiveTheWhole) {
  HFA_REQUIRE_HOPPER();
  for (DType dtype : {DType::bf16, DType::f16})
    for (int hdim : {64, 128, 256})
      for (bool causal : {false, true})
        for (int32_t cut : {0, 130, 200, 211}) {
          AttentionCase c;
          c.dtype = dtype;
          c.out_dtype = DType::f32;
          c.hdim_qk = c.hdim_v = hdim;
          c.batch = 2, c.seqlen_q = 150, c.seqlen_k = 211;
          c.heads_q = 8, c.heads_kv = 2;  // GQA 4 (PackGQA where the tile allows)
          c.causal = causal;
          c.sinks = true;
          c.seed = 7 + cut;
          for (bool first_accumulates : {false, true}) {
            SCOPED_TRACE(c.name() + " cut " + std::to_string(cut) +
                         (first_accumulates ? " from lse -inf" : ""));
            AttentionData data(c);
            const ForwardExpectation expected = expected_forward(data, true);
            // out stays NaN; from lse −inf the first call must not read it.
            if (first_accumulates) {
              for (int64_t i = 0; i < data.lse.numel(); ++i) data.lse.set(i, -INFINITY);
            }
            GpuCase gpu(data);
            ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
            ASSERT_NO_FATAL_FAILURE(run_in_two_parts(gpu, c, cut, first_accumulates));
            ASSERT_NO_FATAL_FAILURE(gpu.download_forward());
            check_forward_results(data, expected);
          }
        }
}

// D = rowsum(dO∘O) of the case's out and dout, laid out as its lse.
std::vector<float> row_sums(const AttentionData& data) {
  const AttentionCase& c = data.spec();
  const std::vector<double> out = data.out.values(), dout = data.dout.values();
  std::vector<float> d(static_cast<std::size_t>(data.lse.numel()), 0.0f);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < c.seqlen_q; ++i) {
        double sum = 0.0;
        for (int64_t e = 0; e < c.hdim_v; ++e) {
          const std::size_t at = static_cast<std::size_t>(((b * c.seqlen_q + i) * c.heads_q + h) * c.hdim_v + e);
          sum += out[at] * dout[at];
        }
        d[static_cast<std::size_t>((b * c.heads_q + h) * c.seqlen_q + i)] = static_cast<float>(sum);
      }
  return d;
}

TEST(SoftmaxD, GivenDGivesTheGradients) {
  HFA_REQUIRE_HOPPER();
  for (DType dtype : {DType::bf16, DType::f16})
    for (int hdim : {64, 128, 192, 256})
      for (bool causal : {false, true}) {
        AttentionCase c;
        c.dtype = dtype;
        c.hdim_qk = c.hdim_v = hdim;
        c.batch = 2, c.seqlen_q = 150, c.seqlen_k = 211;
        c.heads_q = 4, c.heads_kv = 2;
        c.causal = causal;
        c.sinks = causal;
        SCOPED_TRACE(c.name());
        AttentionData data(c);
        const ForwardExpectation fwd = expected_forward(data, true);
        GpuCase gpu(data);
        ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
        ASSERT_NO_FATAL_FAILURE(gpu.forward());
        const BackwardExpectation bwd = expected_backward(data, true);
        const std::vector<float> d = row_sums(data);
        DeviceCopy softmax_d(d);
        HFA_CUDA_OK(softmax_d.status());
        // With D given the backward reads no out: poison the device copy.
        detail::BackwardProblem p = gpu.backward_problem(false);
        HFA_CUDA_OK(cudaMemset(const_cast<void*>(p.fwd.out), 0xff, data.out.storage_bytes()));
        p.softmax_d = softmax_d.get<float>();
        p.softmax_d_batch_stride = data.lse.stride(0);
        p.softmax_d_head_stride = data.lse.stride(1);
        std::size_t bytes = 0;
        ASSERT_TRUE(detail::sm90_backend()->backward_workspace_size(p, &bytes).is_ok());
        DeviceBuffer workspace(bytes);
        p.fwd.workspace = workspace.get(), p.fwd.workspace_bytes = bytes;
        const Status status = detail::sm90_backend()->backward(p);
        ASSERT_TRUE(status.is_ok()) << status.message();
        HFA_CUDA_OK(cudaDeviceSynchronize());
        ASSERT_NO_FATAL_FAILURE(gpu.download_gradients());
        check_backward_results(data, fwd, bwd);
      }
}

// The GPU takes no softcap with an f32 out (kernel_list.def compiles none), and says so.
TEST(F32OutLimits, SoftcapIsNotSupported) {
  HFA_REQUIRE_HOPPER();
  AttentionCase c;
  c.dtype = DType::bf16;
  c.out_dtype = DType::f32;
  c.hdim_qk = c.hdim_v = 128;
  c.batch = 1, c.seqlen_q = 64, c.seqlen_k = 64;
  c.heads_q = c.heads_kv = 2;
  c.softcap = 20.0f;
  AttentionData data(c);
  GpuCase gpu(data);
  ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
  const Status status = detail::sm90_backend()->forward(gpu.forward_problem());
  EXPECT_EQ(status.code(), Code::not_supported);
  EXPECT_NE(status.message().find("softcap with an f32 out"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace hfa::test
