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
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/attention_case.hpp"
#include "common/backend.hpp"
#include "common/expected.hpp"
#include "common/forward_checks.hpp"
#include "sm90/block_mask_case.hpp"
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

// A small bf16 hdim 128 problem, two heads, for the refusal tests: what they add decides.
AttentionCase refusal_case(int seqlen) {
  AttentionCase c;
  c.dtype = DType::bf16;
  c.hdim_qk = c.hdim_v = 128;
  c.batch = 1, c.seqlen_q = c.seqlen_k = seqlen;
  c.heads_q = c.heads_kv = 2;
  return c;
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
// without a GPU): softcap beside it (no model has both; the CPU backend runs it), e4m3 inputs, an
// f32 out and a softmax_scale of 0.
TEST(ForwardSm90Alibi, RefusesWhatItDoesNotCompile) {
  AttentionCase c = refusal_case(64);
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
  {  // the bias is applied in units of the scale: 0 (or below FLT_MIN) has none
    AttentionData data(c);
    for (float scale : {0.0f, 1e-39f}) {
      detail::ForwardProblem p = data.forward_problem();
      p.softmax_scale = scale;
      EXPECT_NE(refusal(sm90.forward(p)).find("alibi_slopes with softmax_scale"), std::string::npos);
    }
    detail::BackwardProblem b = data.backward_problem();
    b.fwd.softmax_scale = 0.0f;
    EXPECT_NE(refusal(sm90.backward(b)).find("alibi_slopes with softmax_scale"), std::string::npos);
  }
  {
    AttentionCase partial = c;
    partial.out_dtype = DType::f32;
    AttentionData data(partial);
    EXPECT_NE(refusal(sm90.forward(data.forward_problem())).find("alibi_slopes with an f32 out"),
              std::string::npos);
  }
}

// ---- Block-sparse masks (hfa_options' kv_num_blocks ...; common/block_sparse.hpp) ------------

struct SparseCase {
  std::string name;
  AttentionCase c;
  int mask_heads;
  bool with_full;
  MaskPredicate visible;
};

std::vector<SparseCase> sparse_cases() {
  std::vector<SparseCase> cases;
  for (int hdim : {64, 128}) {
    AttentionCase base;
    base.dtype = hdim == 64 ? DType::bf16 : DType::f16;
    base.hdim_qk = base.hdim_v = hdim;
    base.seed = 7 + hdim;

    AttentionCase gqa = base;  // odd lengths, GQA, one mask per head
    gqa.batch = 2, gqa.seqlen_q = gqa.seqlen_k = 300, gqa.heads_q = 4, gqa.heads_kv = 2;
    cases.push_back({"random", gqa, gqa.heads_q, true, random_blocks});
    cases.push_back({"random_no_full_lists", gqa, gqa.heads_q, false, random_blocks});

    AttentionCase cross = gqa;  // more keys than queries, and sinks
    cross.seqlen_k = 700, cross.sinks = true;
    cases.push_back({"random_cross_sinks", cross, cross.heads_q, true, random_blocks});

    AttentionCase docs = base;  // one mask broadcast over the heads
    docs.batch = 1, docs.seqlen_q = docs.seqlen_k = 1000, docs.heads_q = docs.heads_kv = 2;
    const std::vector<int> starts = {0, 130, 400, 401, 777};
    cases.push_back({"documents_causal", docs, 1, true, documents(starts, true)});

    AttentionCase causal_docs = docs;  // causal by the kernel's window, ANDed with the mask
    causal_docs.causal = true;
    cases.push_back({"documents_and_window_causal", causal_docs, 1, true,
                     documents(starts, false)});

    AttentionCase sliding = gqa;  // a sliding window ANDed with random blocks
    sliding.seqlen_q = sliding.seqlen_k = 520, sliding.causal = true, sliding.window_left = 100;
    cases.push_back({"random_and_sliding_window", sliding, sliding.heads_q, true,
                     random_blocks});
  }
  return cases;
}

// Block-sparse masks against the float64 oracle under the same lists (the CPU backend's rule,
// cpu/reference.cpp), out and lse NaN before the call: every row written, rows that see no key
// O = 0 and LSE = −inf.
TEST(ForwardSm90BlockSparse, MasksAgainstTheOracle) {
  HFA_REQUIRE_HOPPER();
  for (const SparseCase& sc : sparse_cases()) {
    SCOPED_TRACE(sc.name + "_" + sc.c.name());
    AttentionData data(sc.c);
    const BlockMask mask(sc.c, sc.mask_heads, sc.with_full, sc.visible);
    const ForwardExpectation expected = expected_masked_forward(data, mask);

    const DeviceBlockMask device_mask(mask);
    ASSERT_NO_FATAL_FAILURE(device_mask.check_copies());
    GpuCase gpu(data);
    ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
    gpu.block_sparse = device_mask.view();
    gpu.forward();
    check_forward_results(data, expected);
  }
}

// What the GPU does not compile with a block mask is refused by name, before any kernel (so this
// runs without a GPU): other block sizes, a packed (varlen) mask, seqused_k, softcap, head dims
// outside the block-sparse list. (The backward's: test_backward_block_sparse.cpp.)
TEST(ForwardSm90BlockSparse, RefusesWhatItDoesNotCompile) {
  AttentionCase c = refusal_case(256);
  const BlockMask mask(c, 1, true, random_blocks);
  const detail::Backend& sm90 = *detail::sm90_backend();
  auto refusal = [&](const AttentionCase& with, const std::string& why,
                     void (*edit)(detail::BlockSparse&) = nullptr) {
    SCOPED_TRACE(why);
    AttentionData data(with);
    detail::ForwardProblem p = data.forward_problem();
    p.block_sparse = mask.host_view();
    if (edit != nullptr) edit(p.block_sparse);
    const Status status = sm90.forward(p);
    EXPECT_EQ(status.code(), Code::not_supported) << status.message();
    EXPECT_NE(status.message().find(why), std::string::npos) << status.message();
    std::size_t bytes = 0;
    EXPECT_EQ(sm90.forward_workspace_size(p, &bytes).code(), Code::not_supported);
  };
  refusal(c, "sparse_block_q x sparse_block_kv = 64 x 128",
          [](detail::BlockSparse& s) { s.block_q = 64; });
  AttentionCase varlen = c;
  varlen.varlen_q = varlen.varlen_k = {128, 128};
  refusal(varlen, "cu_seqlens");
  AttentionCase used = c;
  used.seqused_k = {200};
  refusal(used, "seqused_k");
  AttentionCase capped = c;
  capped.softcap = 30.0f;
  refusal(capped, "softcap");
  AttentionCase wide = c;
  wide.hdim_qk = wide.hdim_v = 256;
  refusal(wide, "head dims 256/256");
}

}  // namespace
}  // namespace hfa::test
