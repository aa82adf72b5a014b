// The Hopper backward under block-sparse masks (hfa_options' kv_num_blocks ...; FlexAttention's
// BlockMask, 128 × 128 blocks) against the float64 oracle under the same lists, with the checks
// every backward gets (tests/common/backward_checks.hpp: every gradient element written, dq, dk,
// dv within the bound, dq = 0 for rows that see no key), as test_backward.cpp runs them: the
// GPU forward first under the mask, the backward on its out and lse, gradients NaN before the
// call. Masks: random block kinds with empty rows, an empty query block and empty key blocks
// (their dk = dv = 0 exactly), partial blocks only with random bits, documents (broadcast over
// heads), prefix-LM, causal sliding with global tokens, the kernel's window ANDed with a mask;
// odd lengths (not multiples of 128), seqlen_q ≠ seqlen_k both ways, GQA with the group's
// heads split over CTAs (few tiles) and walked by one CTA (a margin leaving few SMs), sinks.
// The refusals run without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/accuracy.hpp"
#include "common/attention_case.hpp"
#include "common/backend.hpp"
#include "common/backward_checks.hpp"
#include "common/expected.hpp"
#include "common/forward_checks.hpp"
#include "sm90/block_mask_case.hpp"
#include "sm90/gpu_case.hpp"

namespace hfa::test {
namespace {

constexpr int kBlock = BlockMask::kBlock;

// random_blocks (block_mask_case.hpp) with key block 1 of sequence 1 seen by no query of any
// head: a key block no query block lists, whose dk and dv must be exactly 0.
constexpr int kEmptyKeyBatch = 1, kEmptyKeyBlock = 1;
bool random_blocks_with_empty_keys(int b, int h, int i, int j) {
  if (b == kEmptyKeyBatch && j / kBlock == kEmptyKeyBlock) return false;
  return random_blocks(b, h, i, j);
}

// Every block partial: each pair visible with probability 1/2 (and rows i ≡ 3 (mod 37) none).
bool random_bits(int b, int h, int i, int j) {
  return i % 37 != 3 && unit_hash(b + 7, h, i, j) < 0.5;
}

// Prefix-LM: the first kPrefix tokens see each other both ways, the rest causally.
constexpr int kPrefix = 200;
bool prefix_lm(int, int, int i, int j) { return j <= i || j < kPrefix; }

// Causal sliding window of kSlidingKeys keys, plus kGlobalTokens tokens every query sees and
// that see every key (Longformer's global attention).
constexpr int kSlidingKeys = 180, kGlobalTokens = 16;
bool sliding_and_global(int, int, int i, int j) {
  return (j <= i && i - j < kSlidingKeys) || j < kGlobalTokens || i < kGlobalTokens;
}

struct SparseCase {
  std::string name;
  AttentionCase c;
  int mask_heads;
  bool with_full;
  MaskPredicate visible;
  int sm_margin = 0;  // > 0: leave few SMs, so that a CTA walks its GQA group's every head
};

// The SMs a margin leaves (at least one).
constexpr int kFewSms = 4;

std::vector<SparseCase> sparse_cases(int sms) {
  std::vector<SparseCase> cases;
  for (int hdim : {64, 128}) {
    AttentionCase base;
    base.dtype = hdim == 64 ? DType::bf16 : DType::f16;
    base.hdim_qk = base.hdim_v = hdim;
    base.seed = 11 + hdim;

    AttentionCase gqa = base;  // odd lengths, GQA (heads split over CTAs), one mask per head
    gqa.batch = 2, gqa.seqlen_q = gqa.seqlen_k = 300, gqa.heads_q = 4, gqa.heads_kv = 2;
    cases.push_back({"random_empty_keys", gqa, gqa.heads_q, true, random_blocks_with_empty_keys});
    cases.push_back({"random_no_full_lists", gqa, gqa.heads_q, false,
                     random_blocks_with_empty_keys});
    cases.push_back({"random_bits", gqa, gqa.heads_q, false, random_bits});

    AttentionCase cross = gqa;  // more keys than queries, and sinks
    cross.seqlen_k = 700, cross.sinks = true;
    cases.push_back({"random_more_keys_sinks", cross, cross.heads_q, true,
                     random_blocks_with_empty_keys});
    AttentionCase fewer = gqa;  // more queries than keys
    fewer.seqlen_q = 700, fewer.seqlen_k = 260;
    cases.push_back({"random_more_queries", fewer, fewer.heads_q, true, random_blocks});

    AttentionCase docs = base;  // one mask broadcast over the heads, a group of one
    docs.batch = 1, docs.seqlen_q = docs.seqlen_k = 1000, docs.heads_q = docs.heads_kv = 2;
    const std::vector<int> starts = {0, 130, 400, 401, 777};
    cases.push_back({"documents_causal", docs, 1, true, documents(starts, true)});
    AttentionCase causal_docs = docs;  // causal by the kernel's window, ANDed with the mask
    causal_docs.causal = true;
    cases.push_back({"documents_and_window_causal", causal_docs, 1, true,
                     documents(starts, false)});

    AttentionCase prefix = base;  // GQA 4:1, one mask for all heads
    prefix.batch = 2, prefix.seqlen_q = prefix.seqlen_k = 520, prefix.heads_q = 4;
    prefix.heads_kv = 1;
    cases.push_back({"prefix_lm", prefix, 1, true, prefix_lm});
    AttentionCase global = prefix;
    global.seqlen_q = global.seqlen_k = 777;
    cases.push_back({"sliding_and_global_tokens", global, 1, true, sliding_and_global});

    AttentionCase sliding = gqa;  // a sliding window ANDed with random blocks
    sliding.seqlen_q = sliding.seqlen_k = 520, sliding.causal = true, sliding.window_left = 100;
    cases.push_back({"random_and_sliding_window", sliding, sliding.heads_q, true,
                     random_blocks});

    // Few SMs: a CTA walks its kv head's whole group (heads_per_tile = 4), each head with its own
    // lists, some of them empty for its key block.
    AttentionCase group = base;
    group.batch = 2, group.seqlen_q = group.seqlen_k = 1000, group.heads_q = 4, group.heads_kv = 1;
    if (sms > kFewSms) {
      cases.push_back({"random_whole_group_a_cta", group, group.heads_q, true,
                       random_blocks_with_empty_keys, sms - kFewSms});
    }
  }
  return cases;
}

// Indices (into dk's or dv's logical order, (batch, seqlen_k, heads_kv, hdim)) of the rows of
// key block `block` of sequence `batch`.
std::vector<std::size_t> key_block_elements(const AttentionCase& c, int batch, int block,
                                            int hdim) {
  std::vector<std::size_t> indices;
  for (int key = block * kBlock; key < std::min((block + 1) * kBlock, c.seqlen_k); ++key)
    for (int h = 0; h < c.heads_kv; ++h)
      for (int d = 0; d < hdim; ++d)
        indices.push_back(((static_cast<std::size_t>(batch) * c.seqlen_k + key) * c.heads_kv + h) *
                              hdim + d);
  return indices;
}

TEST(BackwardSm90BlockSparse, MasksAgainstTheOracle) {
  HFA_REQUIRE_HOPPER();
  for (const SparseCase& sc : sparse_cases(sm_count())) {
    SCOPED_TRACE(sc.name + "_" + sc.c.name());
    AttentionData data(sc.c);
    const BlockMask mask(sc.c, sc.mask_heads, sc.with_full, sc.visible);
    const ForwardExpectation fwd = expected_masked_forward(data, mask);

    const DeviceBlockMask device_mask(mask);
    ASSERT_NO_FATAL_FAILURE(device_mask.check_copies());
    GpuCase gpu(data);
    ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
    gpu.block_sparse = device_mask.view();
    gpu.sm_margin = sc.sm_margin;
    ASSERT_NO_FATAL_FAILURE(gpu.forward());
    check_forward_results(data, fwd);

    // The oracle's backward over the GPU forward's out and lse (now in the host buffers).
    detail::BackwardProblem host_backward = data.backward_problem();
    host_backward.fwd.block_sparse = mask.host_view();
    const BackwardExpectation bwd = expected_backward(data, host_backward, true);
    ASSERT_NO_FATAL_FAILURE(gpu.backward());
    check_backward_results(data, fwd, bwd);
    if (sc.c.batch > kEmptyKeyBatch && sc.c.seqlen_k > kEmptyKeyBlock * kBlock &&
        sc.name.find("empty_keys") != std::string::npos) {
      EXPECT_REPORT(check_zero("dk of a key block no query sees", data.dk.values(),
                               key_block_elements(sc.c, kEmptyKeyBatch, kEmptyKeyBlock,
                                                  sc.c.hdim_qk)));
      EXPECT_REPORT(check_zero("dv of a key block no query sees", data.dv.values(),
                               key_block_elements(sc.c, kEmptyKeyBatch, kEmptyKeyBlock,
                                                  sc.c.hdim_v)));
    }
  }
}

// A second call over the workspace of a first with another mask, whose lists and pairs the first
// left behind: its gradients are those of its own mask (the preprocess clears the pairs and
// rebuilds every list).
TEST(BackwardSm90BlockSparse, WorkspaceReusedAcrossCalls) {
  HFA_REQUIRE_HOPPER();
  AttentionCase c;
  c.dtype = DType::bf16;
  c.hdim_qk = c.hdim_v = 128;
  c.batch = 1, c.seqlen_q = c.seqlen_k = 450, c.heads_q = c.heads_kv = 2;
  c.seed = 5;
  AttentionData data(c);
  const BlockMask first(c, c.heads_q, true, random_blocks);
  const BlockMask second(c, c.heads_q, true, random_bits);
  const DeviceBlockMask device_first(first), device_second(second);
  ASSERT_NO_FATAL_FAILURE(device_first.check_copies());
  ASSERT_NO_FATAL_FAILURE(device_second.check_copies());

  GpuCase gpu(data);
  ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
  gpu.block_sparse = device_first.view();
  ASSERT_NO_FATAL_FAILURE(gpu.forward());
  const std::size_t bytes = gpu.workspace_bytes(false);
  DeviceBuffer workspace(bytes);
  ASSERT_TRUE(gpu.enqueue_backward(false, workspace.get(), bytes, nullptr).is_ok());
  HFA_CUDA_OK(cudaDeviceSynchronize());

  // The second mask over the first call's workspace: its out and lse, then its gradients.
  const ForwardExpectation fwd = expected_masked_forward(data, second);
  gpu.block_sparse = device_second.view();
  ASSERT_NO_FATAL_FAILURE(gpu.forward());
  check_forward_results(data, fwd);
  detail::BackwardProblem host_backward = data.backward_problem();
  host_backward.fwd.block_sparse = second.host_view();
  const BackwardExpectation bwd = expected_backward(data, host_backward, true);
  ASSERT_LE(gpu.workspace_bytes(false), bytes);  // same shapes, same slots
  ASSERT_TRUE(gpu.enqueue_backward(false, workspace.get(), bytes, nullptr).is_ok());
  HFA_CUDA_OK(cudaDeviceSynchronize());
  gpu.download_gradients();
  check_backward_results(data, fwd, bwd);
}

// What the backward does not compile with a block mask is refused by name, by the call and by
// the workspace query, before any kernel (so this runs without a GPU): the forward's refusals
// (other block sizes, a packed mask, seqused_k, softcap, ALiBi, head dims outside the list) and
// the deterministic mode.
TEST(BackwardSm90BlockSparse, RefusesWhatItDoesNotCompile) {
  AttentionCase c;
  c.dtype = DType::bf16;
  c.hdim_qk = c.hdim_v = 128;
  c.batch = 1, c.seqlen_q = c.seqlen_k = 256;
  c.heads_q = c.heads_kv = 2;
  const BlockMask mask(c, 1, true, random_blocks);
  const detail::Backend& sm90 = *detail::sm90_backend();
  auto refusal = [&](const AttentionCase& with, const std::string& why, bool deterministic,
                     void (*edit)(detail::BlockSparse&) = nullptr) {
    SCOPED_TRACE(why);
    AttentionData data(with);
    detail::BackwardProblem p = data.backward_problem();
    p.fwd.block_sparse = mask.host_view();
    p.fwd.deterministic = deterministic;
    if (edit != nullptr) edit(p.fwd.block_sparse);
    const Status status = sm90.backward(p);
    EXPECT_EQ(status.code(), Code::not_supported) << status.message();
    EXPECT_NE(status.message().find(why), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("sm90 backward"), std::string::npos) << status.message();
    std::size_t bytes = 0;
    EXPECT_EQ(sm90.backward_workspace_size(p, &bytes).code(), Code::not_supported);
  };
  refusal(c, "deterministic=true", true);
  refusal(c, "sparse_block_q x sparse_block_kv = 128 x 64", false,
          [](detail::BlockSparse& s) { s.block_kv = 64; });
  AttentionCase varlen = c;
  varlen.varlen_q = varlen.varlen_k = {128, 128};
  refusal(varlen, "cu_seqlens", false);
  AttentionCase used = c;
  used.seqused_k = {200};
  refusal(used, "seqused_k", false);
  AttentionCase capped = c;
  capped.softcap = 30.0f;
  refusal(capped, "softcap", false);
  AttentionCase alibi = c;
  alibi.alibi = AttentionCase::Alibi::per_head;
  refusal(alibi, "alibi_slopes", false);
  AttentionCase wide = c;
  wide.hdim_qk = wide.hdim_v = 256;
  refusal(wide, "head dims 256/256", false);
}

}  // namespace
}  // namespace hfa::test
