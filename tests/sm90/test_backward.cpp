// The Hopper backward against the float64 oracle, with the checks the CPU backend gets
// (tests/common/backward_checks.hpp). Each case runs the GPU forward first and the backward on
// its out and lse, as a training step does; gradients start as NaN. The peer that sets the
// bound rounds P and dS to the input dtype before the gradient GEMMs, as a 16-bit tensor-core
// backward feeds them.
//
//   Features: per dtype × head dims, every mask × layout × GQA ratio, softcap and sinks in turn.
//   Lengths: 1, 17, 255, 1000, 4097, seqlen_q ≠ seqlen_k both ways, GQA 8, large magnitudes;
//     around hdim 128's 80-query blocks and hdim 192's and 256's 80-key blocks (79, 81, 161).
//   NaN padding: rows past seqused hold NaN in q, k, v, dout, out and lse and must not leak.
//   Turns: walks long enough to take turns at the exponentials (dQ a step late).
//   Determinism: the deterministic mode gives the same bytes twice, and from a CUDA graph.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/attention_case.hpp"
#include "common/backward_checks.hpp"
#include "common/expected.hpp"
#include "common/forward_checks.hpp"
#include "sm90/gpu_case.hpp"
#include "sm90/gpu_combinations.hpp"

namespace hfa::test {
namespace {

// Forward and backward of a case on the GPU, checked against the oracle.
void check_on_gpu(AttentionData& data, bool deterministic = false, int sm_margin = 0) {
  const ForwardExpectation fwd = expected_forward(data, true);
  GpuCase gpu(data);
  gpu.sm_margin = sm_margin;
  ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
  ASSERT_NO_FATAL_FAILURE(gpu.forward());
  check_forward_results(data, fwd);
  const BackwardExpectation bwd = expected_backward(data, true);
  ASSERT_NO_FATAL_FAILURE(gpu.backward(deterministic));
  check_backward_results(data, fwd, bwd);
}

// Lengths that fill no tile (64, 80 or 128 rows × 64, 80 or 128 keys), seqlen_q ≠ seqlen_k, empty
// sequences (varlen: no queries, no keys; seqused: no keys) and a one-token sequence.
AttentionCase make_case(const Combination& combination, Mask mask, Layout layout, int group,
                        int turn) {
  AttentionCase c;
  c.dtype = combination.dtype;
  c.hdim_qk = combination.dims.qk;
  c.hdim_v = combination.dims.v;
  c.heads_kv = 2;
  c.heads_q = 2 * group;
  set_mask(c, mask);
  // Softcap and sinks in turn, so that each meets every mask, layout and ratio.
  if (turn % 2 == 1) c.softcap = 4.0f;  // small enough that tanh bends the scores
  c.sinks = turn % 4 >= 2;
  set_layout(c, layout);
  c.seed = 100 + turn;
  return c;
}

class BackwardSm90Features : public ::testing::TestWithParam<Combination> {};

TEST_P(BackwardSm90Features, EveryOptionWithEveryOther) {
  HFA_REQUIRE_HOPPER();
  int turn = 0;
  for (Mask mask : {Mask::none, Mask::causal, Mask::sliding, Mask::window})
    for (Layout layout : {Layout::fixed, Layout::varlen, Layout::seqused})
      for (int group : {1, 4}) {
        const AttentionCase c = make_case(GetParam(), mask, layout, group, turn++);
        SCOPED_TRACE(c.name());
        AttentionData data(c);
        check_on_gpu(data);
      }
}

INSTANTIATE_TEST_SUITE_P(Matrix, BackwardSm90Features, ::testing::ValuesIn(combinations()),
                         [](const auto& info) { return combination_name(info.param); });

// ALiBi (alibi_cases in gpu_combinations.hpp): forward, then dq, dk, dv (NaN before the call)
// against the float64 oracle; each case's bias moves the oracle's out by 0.1 or more, so its
// gradients could not match with the bias ignored.
TEST(BackwardSm90Alibi, SlopesMasksLayouts) {
  HFA_REQUIRE_HOPPER();
  for (const AlibiCase& a : alibi_cases()) {
    SCOPED_TRACE(a.c.name() + "_" + slopes_name(a.slopes) +
                 (a.deterministic ? "_deterministic" : ""));
    AttentionData data(a.c);
    set_slopes(data, a.slopes);
    check_on_gpu(data, a.deterministic);
    EXPECT_GT(alibi_effect_on_out(data, expected_forward(data).out_ref), 0.1);
  }
}

// seqlens 1, 17, 255, 1000 and 4097 (one past a multiple of every tile), unequal both ways,
// GQA 8 and MQA, large magnitudes that stress the exponentials.
TEST(BackwardSm90Lengths, SeqlensRatiosMagnitudes) {
  HFA_REQUIRE_HOPPER();
  std::vector<AttentionCase> cases;
  const std::pair<int, int> seqlens[] = {{1, 1}, {17, 17}, {255, 1000}, {1000, 255}, {1000, 1000}};
  int turn = 0;
  for (int hdim : {64, 128, 256})
    for (bool causal : {false, true})
      for (auto [sq, sk] : seqlens) {
        AttentionCase c;
        c.dtype = turn % 2 ? DType::f16 : DType::bf16;
        c.hdim_qk = c.hdim_v = hdim;
        c.causal = causal;
        c.batch = 1, c.seqlen_q = sq, c.seqlen_k = sk;
        c.heads_q = 8, c.heads_kv = turn % 3 == 0 ? 1 : 8 / (1 + turn % 2 * 3);
        c.seed = 200 + turn++;
        cases.push_back(c);
      }
  for (int hdim : {64, 128}) {
    AttentionCase c;
    c.dtype = DType::bf16;
    c.hdim_qk = c.hdim_v = hdim;
    c.causal = hdim == 128;
    c.seqlen_q = c.seqlen_k = 4097;
    c.heads_q = 2, c.heads_kv = 1;
    c.seed = 300 + hdim;
    cases.push_back(c);
  }
  // hdim 128 without a mask walks 80-query blocks (tile_config.hpp, kDqTransposed): one short of
  // a block, one past it, one past two, each against keys that fill no 128-key block; one MQA.
  const std::pair<int, int> around_80[] = {{79, 161}, {81, 79}, {161, 300}};
  for (auto [sq, sk] : around_80) {
    AttentionCase c;
    c.dtype = turn % 2 ? DType::f16 : DType::bf16;
    c.hdim_qk = c.hdim_v = 128;
    c.batch = 2, c.seqlen_q = sq, c.seqlen_k = sk;
    c.heads_q = 4, c.heads_kv = sq == 161 ? 1 : 2;
    c.seed = 250 + turn++;
    cases.push_back(c);
  }
  // Head dims 192 and 256 without a window walk 80-key blocks with the gradients transposed
  // (tile_config.hpp, kTransposedGradients): keys one short of a block, one past it, one past
  // two, and 1000 (12.5 blocks), against queries that fill no 64-query block; GQA and MQA
  // (split over CTAs or not, as heads_per_tile decides), softcap and sinks in turn.
  const std::pair<int, int> around_80_keys[] = {{100, 79}, {63, 81}, {130, 161}, {1000, 1000}};
  for (HeadDims dims : {HeadDims{256, 256}, HeadDims{192, 192}, HeadDims{192, 128}})
    for (auto [sq, sk] : around_80_keys) {
      AttentionCase c;
      c.dtype = turn % 2 ? DType::f16 : DType::bf16;
      c.hdim_qk = dims.qk, c.hdim_v = dims.v;
      c.batch = sq == 1000 ? 1 : 2, c.seqlen_q = sq, c.seqlen_k = sk;
      c.heads_q = 4, c.heads_kv = sk == 161 ? 1 : 2;
      if (turn % 4 == 1) c.softcap = 4.0f;
      c.sinks = turn % 4 == 2;
      c.seed = 260 + turn++;
      cases.push_back(c);
    }
  AttentionCase large;
  large.dtype = DType::bf16;
  large.hdim_qk = large.hdim_v = 128;
  large.seqlen_q = 300, large.seqlen_k = 513;
  large.heads_q = large.heads_kv = 2;
  large.input_scale = 4.0;
  cases.push_back(large);
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(c.name());
    AttentionData data(c);
    check_on_gpu(data);
  }
}

// A GQA group walked whole by one CTA (dK, dV in registers) and split over CTAs, one a query head
// (dK, dV added in fp32 and rounded by the key postprocess): bwd::heads_per_tile splits a grid of
// equal tiles (no mask) that leaves SMs idle and keeps whole groups where they fill the waves
// (test_tile_order.cpp), so the same cases run both ways: on every SM (a few tiles, split) and
// with all but two SMs left free by sm_margin (an even number of tiles, whole groups).
TEST(BackwardSm90Gqa, WholeGroupsAndSplitHeads) {
  HFA_REQUIRE_HOPPER();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  int turn = 0;
  for (int hdim : {64, 128, 192, 256})
    for (int margin : {0, sms - 2}) {
      AttentionCase c;
      c.dtype = turn % 2 ? DType::f16 : DType::bf16;
      c.hdim_qk = c.hdim_v = hdim;
      c.batch = 2, c.seqlen_q = 200, c.seqlen_k = 300;  // 2 kv heads × 2: tiles come in fours
      c.heads_q = 8, c.heads_kv = 2;
      c.sinks = turn % 3 == 1;
      c.seed = 400 + turn++;
      SCOPED_TRACE(c.name() + ", sm_margin " + std::to_string(margin));
      AttentionData data(c);
      check_on_gpu(data, false, margin);
    }
}

// Walks long enough to take turns at the exponentials, dQ a step late (TileConfig::
// kTurnsFromSteps: launch.cuh runs the turns kernel where a CTA walks 16 steps or more on
// average). Whole GQA groups of 8 (all but two SMs left free, as above) walk 8 heads × 3 or 4
// query blocks, so that a step's dQ is computed in the next head's first step; fixed, varlen
// (one sequence of a single block: a short walk in the same kernel) and seqused (rows zeroed
// inside the walk) at hdim 128 (80-query blocks), and the same walks at hdim 64, which keeps
// the shared step (decision 044); then the windowed tiles, which split heads: hdim 64 causal
// over 4000 queries (17 blocks on average; hdim 128 causal at 4097, which takes turns, is in
// SeqlensRatiosMagnitudes).
TEST(BackwardSm90Turns, LongWalks) {
  HFA_REQUIRE_HOPPER();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  std::vector<std::pair<AttentionCase, int>> cases;  // a case and its sm_margin
  int turn = 0;
  for (int hdim : {64, 128})
    for (Layout layout : {Layout::fixed, Layout::varlen, Layout::seqused}) {
      AttentionCase c;
      c.dtype = turn % 2 ? DType::f16 : DType::bf16;
      c.hdim_qk = c.hdim_v = hdim;
      c.heads_q = 8, c.heads_kv = 1;
      c.sinks = turn % 3 == 1;
      if (layout == Layout::varlen) {
        c.varlen_q = {300, 17, 260};
        c.varlen_k = {200, 150, 1};  // 2 key blocks × 3 sequences: an even grid, whole groups
      } else {
        c.batch = 2, c.seqlen_q = 300, c.seqlen_k = 200;
      }
      if (layout == Layout::seqused) {
        c.seqused_q = {250, 300};
        c.seqused_k = {200, 77};
      }
      c.seed = 500 + turn++;
      cases.emplace_back(c, sms - 2);
    }
  AttentionCase causal;
  causal.dtype = DType::bf16;
  causal.hdim_qk = causal.hdim_v = 64;
  causal.causal = true;
  causal.seqlen_q = causal.seqlen_k = 4000;
  causal.heads_q = causal.heads_kv = 1;
  causal.seed = 520;
  cases.emplace_back(causal, 0);
  for (const auto& [c, margin] : cases) {
    SCOPED_TRACE(c.name() + ", sm_margin " + std::to_string(margin));
    AttentionData data(c);
    check_on_gpu(data, false, margin);
  }
}

// Rows past seqused (and their out and lse) hold NaN: nothing of them may reach a gradient.
TEST(BackwardSm90NanPadding, PaddingNeverLeaks) {
  HFA_REQUIRE_HOPPER();
  // hdim 128 both ways: causal on 64-query blocks, without a mask on 80-query ones; 192 and 256
  // without a mask on 80-key blocks (gradients transposed), 256 causal on 64-key ones.
  const std::pair<int, bool> shapes[] = {{64, false}, {128, true}, {128, false},
                                         {192, false}, {256, false}, {256, true}};
  for (auto [hdim, causal] : shapes)
    for (bool varlen : {false, true}) {
      AttentionCase c;
      c.dtype = DType::bf16;
      c.hdim_qk = c.hdim_v = hdim;
      c.heads_q = 4, c.heads_kv = 2;
      c.causal = causal;
      c.sinks = hdim == 64;
      if (varlen) {
        c.varlen_q = {100, 130, 64};
        c.varlen_k = {150, 90, 128};
      } else {
        c.batch = 3, c.seqlen_q = 130, c.seqlen_k = 150;
      }
      c.seqused_q = {70, 130, 1};
      c.seqused_k = {33, 90, 128};
      SCOPED_TRACE(c.name());
      AttentionData data(c);
      const std::vector<bool> used_q = data.used_tokens(true), used_k = data.used_tokens(false);
      auto poison = [](HostTensor& t, const std::vector<bool>& used) {
        const int64_t per_token = t.numel() / int64_t(used.size());
        for (int64_t i = 0; i < t.numel(); ++i) {
          if (!used[i / per_token]) t.set(i, std::numeric_limits<double>::quiet_NaN());
        }
      };
      poison(data.q, used_q);
      poison(data.dout, used_q);
      poison(data.k, used_k);
      poison(data.v, used_k);
      const ForwardExpectation fwd = expected_forward(data, true);
      GpuCase gpu(data);
      ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
      ASSERT_NO_FATAL_FAILURE(gpu.forward());
      check_forward_results(data, fwd);
      // The forward left out and lse of the padding rows as they were: NaN.
      const BackwardExpectation bwd = expected_backward(data, true);
      ASSERT_NO_FATAL_FAILURE(gpu.backward());
      check_backward_results(data, fwd, bwd);
    }
}

// The deterministic mode: right against the oracle, the same bytes twice, and from a CUDA graph
// of the call. The first comparison checks its own tile orders (sectioned: 2 or 4 of the 4
// (batch, kv head) pairs a section here, by head dim) and turn orders.
TEST(BackwardSm90Determinism, SameBytesEveryRun) {
  HFA_REQUIRE_HOPPER();
  // Both kinds of configuration (keys split at 64/128, the deterministic mode's own at 192/256),
  // the windowed turn order (descending) beside the plain one (ascending), and hdim 128's
  // 80-query blocks (no mask: dQ transposed, one dQ tile) beside its 64-query ones (causal).
  const std::pair<int, bool> cases[] = {{64, true}, {128, true}, {128, false}, {192, false},
                                        {256, false}, {256, true}};
  for (auto [hdim, causal] : cases) {
    AttentionCase c;
    c.dtype = DType::bf16;
    c.hdim_qk = c.hdim_v = hdim;
    c.batch = 2, c.seqlen_q = c.seqlen_k = 1500;
    c.heads_q = 8, c.heads_kv = 2;
    c.causal = causal;
    c.sinks = true;
    SCOPED_TRACE(c.name());
    AttentionData data(c);
    const ForwardExpectation fwd = expected_forward(data, true);
    GpuCase gpu(data);
    ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
    ASSERT_NO_FATAL_FAILURE(gpu.forward());
    auto gradients = [&] {
      std::vector<double> all = data.dq.values();
      for (const HostTensor* t : {&data.dk, &data.dv}) {
        const std::vector<double> v = t->values();
        all.insert(all.end(), v.begin(), v.end());
      }
      all.insert(all.end(), data.dsinks.begin(), data.dsinks.end());
      return all;
    };
    ASSERT_NO_FATAL_FAILURE(gpu.backward(true));
    check_backward_results(data, fwd, expected_backward(data, true));
    const std::vector<double> first = gradients();
    ASSERT_NO_FATAL_FAILURE(gpu.backward(true));
    const std::vector<double> second = gradients();
    ASSERT_EQ(first.size(), second.size());
    EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(double)))
        << "two deterministic runs differ";

    // Captured in a graph (no allocation, no synchronization in the call), replayed twice.
    cudaStream_t stream;
    HFA_CUDA_OK(cudaStreamCreate(&stream));
    DeviceBuffer workspace(gpu.workspace_bytes(true));
    cudaGraph_t graph;
    HFA_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const Status status = gpu.enqueue_backward(true, workspace.get(), workspace.bytes(), stream);
    HFA_CUDA_OK(cudaStreamEndCapture(stream, &graph));
    ASSERT_TRUE(status.is_ok()) << status.message();
    cudaGraphExec_t exec;
    HFA_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 2; ++replay) {
      HFA_CUDA_OK(cudaGraphLaunch(exec, stream));
      HFA_CUDA_OK(cudaStreamSynchronize(stream));
      ASSERT_NO_FATAL_FAILURE(gpu.download_gradients());
      const std::vector<double> replayed = gradients();
      EXPECT_EQ(0, std::memcmp(first.data(), replayed.data(), first.size() * sizeof(double)))
          << "graph replay " << replay << " differs from the direct call";
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

}  // namespace
}  // namespace hfa::test
