// The Hopper forward with every option against every other: for each dtype × head dims, every
// combination of mask (none, causal, causal sliding window, two-sided window) × softcap ×
// sinks × GQA × layout (fixed length, varlen with empty sequences, seqused, and both with short
// queries, where GQA groups are packed into one tile: PackGQA) against the float64 oracle, with the checks the CPU backend gets (tests/common/forward_checks.hpp). The peer that
// sets the bound rounds P to the input dtype, as every 16-bit tensor-core kernel does.
//
// One test per (dtype, head dims) runs its combinations in a loop (SCOPED_TRACE names the one
// that fails), so ctest lists a dozen entries, not a thousand.
#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "common/attention_case.hpp"
#include "common/backend.hpp"
#include "common/expected.hpp"
#include "common/forward_checks.hpp"
#include "sm90/gpu_case.hpp"
#include "sm90/gpu_combinations.hpp"

namespace hfa::test {
namespace {

// Runs the case's forward on the sm90 backend; out and lse come back into its host buffers.
void forward_on_gpu(AttentionData& data) {
  GpuCase gpu(data);
  ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
  gpu.forward();
}

class ForwardSm90Features : public ::testing::TestWithParam<Combination> {};

TEST_P(ForwardSm90Features, EveryOptionWithEveryOther) {
  HFA_REQUIRE_HOPPER();
  for_each_forward_feature_case(GetParam().dtype, GetParam().dims, [](const AttentionCase& c, int) {
    SCOPED_TRACE(c.name());
    AttentionData data(c);
    const ForwardExpectation expected = expected_forward(data, true);
    forward_on_gpu(data);
    check_forward_results(data, expected);
  });
}

INSTANTIATE_TEST_SUITE_P(Matrix, ForwardSm90Features, ::testing::ValuesIn(combinations()),
                         [](const auto& info) { return combination_name(info.param); });

// Long sequences where the window skips most blocks, and a varlen batch with long and short
// sequences, so the skipping and the per-sequence addressing meet more than two blocks.
TEST(ForwardSm90Long, WindowsAndVarlen) {
  HFA_REQUIRE_HOPPER();
  std::vector<AttentionCase> cases;
  for (int hdim : {64, 128}) {
    AttentionCase sliding;
    sliding.dtype = DType::bf16;
    sliding.hdim_qk = sliding.hdim_v = hdim;
    sliding.heads_q = sliding.heads_kv = 2;
    sliding.seqlen_q = sliding.seqlen_k = 2000;
    sliding.causal = true;
    sliding.window_left = 300;
    cases.push_back(sliding);

    AttentionCase varlen = sliding;
    varlen.window_left = -1;
    varlen.varlen_q = {1000, 3, 700, 257};
    varlen.varlen_k = {1000, 900, 700, 1};
    cases.push_back(varlen);
  }
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(c.name());
    AttentionData data(c);
    const ForwardExpectation expected = expected_forward(data, true);
    forward_on_gpu(data);
    check_forward_results(data, expected);
  }
}

// ALiBi (alibi_cases in gpu_combinations.hpp) against the float64 oracle, out and lse NaN before
// the call, and each case's bias large enough to matter: out moves by 0.1 or more without it.
TEST(ForwardSm90Alibi, SlopesMasksLayouts) {
  HFA_REQUIRE_HOPPER();
  for (const AlibiCase& a : alibi_cases()) {
    SCOPED_TRACE(a.c.name() + "_" + slopes_name(a.slopes));
    AttentionData data(a.c);
    set_slopes(data, a.slopes);
    const ForwardExpectation expected = expected_forward(data, true);
    forward_on_gpu(data);
    check_forward_results(data, expected);
    EXPECT_GT(alibi_effect_on_out(data, expected.out_ref), 0.1);
  }
}

// What the GPU does not compile with ALiBi is refused by name, before any kernel (so this runs
// without a GPU): softcap beside it (no model has both; the CPU backend runs it), e4m3 inputs and
// an f32 out.
TEST(ForwardSm90Alibi, RefusesWhatItDoesNotCompile) {
  AttentionCase c;
  c.dtype = DType::bf16;
  c.hdim_qk = c.hdim_v = 128;
  c.batch = 1, c.seqlen_q = c.seqlen_k = 64;
  c.heads_q = c.heads_kv = 2;
  c.alibi = AttentionCase::Alibi::per_head;
  auto refusal = [](const Status& status) {
    EXPECT_EQ(status.code(), Code::not_supported) << status.message();
    return status.message();
  };
  const detail::Backend& sm90 = *detail::sm90_backend();
  {  // the forward, the backward and the forward's workspace sizing
    AttentionCase softcapped = c;
    softcapped.softcap = 30.0f;
    AttentionData data(softcapped);
    const std::string why = "alibi_slopes with softcap";
    EXPECT_NE(refusal(sm90.forward(data.forward_problem())).find(why), std::string::npos);
    EXPECT_NE(refusal(sm90.backward(data.backward_problem())).find(why), std::string::npos);
    std::size_t bytes = 0;
    EXPECT_EQ(sm90.forward_workspace_size(data.forward_problem(), &bytes).code(),
              Code::not_supported);
  }
  {
    AttentionData data(c);
    detail::ForwardProblem p = data.forward_problem();
    p.dtype = DType::e4m3;
    EXPECT_NE(refusal(sm90.forward(p)).find("alibi_slopes with e4m3 inputs"), std::string::npos);
  }
  {
    AttentionCase partial = c;
    partial.out_dtype = DType::f32;
    AttentionData data(partial);
    EXPECT_NE(refusal(sm90.forward(data.forward_problem())).find("alibi_slopes with an f32 out"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace hfa::test
