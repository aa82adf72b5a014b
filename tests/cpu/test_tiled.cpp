// The tiled CPU backend (forward and backward) against the float64 oracle over a matrix of
// cases, with the docs/design.md §6 bound from the float32 peer. Outputs start as NaN so unwritten
// elements fail; rows that see no key must give exactly 0 and LSE −inf.
//
// The matrix: every seqlen pair (1, 17, 255, 1000; seqlen_q ≠ seqlen_k both ways) meets every
// mask kind, and dtype, head dims, GQA ratio and softcap rotate across them so that each value
// meets many others; then varlen (with empty sequences), fully masked rows, strided tensors and
// large magnitudes. ctest runs it all twice: with the AVX-512 kernels and with HFA_CPU_ISA=generic.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/accuracy.hpp"
#include "common/attention_case.hpp"
#include "common/backward_checks.hpp"
#include "common/backend.hpp"
#include "common/expected.hpp"
#include "common/forward_checks.hpp"
#include "cpu/kernels.hpp"
#include "cpu/tiled_attention.hpp"

namespace hfa::test {
namespace {

void check_forward_and_backward(const AttentionCase& c) {
  SCOPED_TRACE(c.name() + " on the " + cpu::active_kernels().isa + " kernels");
  const detail::Backend& cpu = detail::cpu_backend();
  AttentionData data(c);

  const ForwardExpectation fwd = expected_forward(data);
  const Status forward_status = cpu.forward(data.forward_problem());
  ASSERT_TRUE(forward_status.is_ok()) << forward_status.message();
  check_forward_results(data, fwd);

  // The backward reads the out and lse the forward just wrote, like a training step does.
  const BackwardExpectation bwd = expected_backward(data);
  const Status backward_status = cpu.backward(data.backward_problem());
  ASSERT_TRUE(backward_status.is_ok()) << backward_status.message();
  check_backward_results(data, fwd, bwd);
}

struct Mask {
  bool causal;
  int32_t left, right;
};

std::vector<AttentionCase> matrix_cases() {
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
  const std::pair<int32_t, int32_t> hdims[] = {{64, 64}, {128, 128}, {192, 128}, {96, 96}, {256, 256}};
  const std::pair<int32_t, int32_t> heads[] = {{2, 2}, {4, 2}, {4, 1}};  // GQA ratios 1, 2, 4
  const float softcaps[] = {0.0f, 0.0f, 5.0f};
  const Mask masks[] = {{false, -1, -1}, {true, -1, -1}, {false, 40, 7}, {true, 16, -1}, {false, -1, 3}};
  const std::pair<int32_t, int32_t> seqlens[] = {{1, 1},     {1, 17},    {17, 1},     {17, 17},
                                                 {17, 255},  {255, 17},  {255, 255},  {100, 300}};
  std::vector<AttentionCase> cases;
  int index = 0;
  for (const auto& [seqlen_q, seqlen_k] : seqlens) {
    for (const Mask& mask : masks) {
      AttentionCase c;
      c.seqlen_q = seqlen_q;
      c.seqlen_k = seqlen_k;
      c.causal = mask.causal;
      c.window_left = mask.left;
      c.window_right = mask.right;
      c.dtype = dtypes[index % 3];
      std::tie(c.hdim_qk, c.hdim_v) = hdims[(index / 3 + index) % 5];
      std::tie(c.heads_q, c.heads_kv) = heads[(index / 5 + index / 2) % 3];
      c.softcap = softcaps[(index / 7 + index) % 3];
      c.seed = 100 + index++;
      cases.push_back(c);
    }
  }
  return cases;
}

// add(edit): one more case, the default one edited, seeded first_seed + its index.
auto case_adder(std::vector<AttentionCase>& cases, int first_seed) {
  return [&cases, first_seed](auto&& edit) {
    AttentionCase c;
    c.seed = first_seed + static_cast<int>(cases.size());
    edit(c);
    cases.push_back(c);
  };
}

std::vector<AttentionCase> special_cases() {
  std::vector<AttentionCase> cases;
  const auto add = case_adder(cases, 500);
  // Long sequences, both ways round.
  add([](AttentionCase& c) { c.seqlen_q = 1000; c.seqlen_k = 255; c.causal = true; c.hdim_qk = c.hdim_v = 128; c.heads_q = 2; });
  add([](AttentionCase& c) { c.dtype = DType::bf16; c.seqlen_q = 255; c.seqlen_k = 1000; c.window_left = 100; c.window_right = 20; c.heads_q = 2; c.heads_kv = 1; });
  add([](AttentionCase& c) { c.dtype = DType::f16; c.seqlen_q = c.seqlen_k = 1000; c.hdim_qk = c.hdim_v = 64; c.softcap = 20.0f; });
  // A narrow window over long rows: blocks of query tiles whose tiles see different key ranges.
  add([](AttentionCase& c) { c.dtype = DType::bf16; c.seqlen_q = 1000; c.seqlen_k = 900; c.window_left = 100; c.window_right = 50; c.heads_q = 2; c.heads_kv = 1; });
  // A batch of fixed-length sequences.
  add([](AttentionCase& c) { c.dtype = DType::bf16; c.batch = 3; c.seqlen_q = 70; c.seqlen_k = 130; c.heads_q = 4; c.heads_kv = 2; c.causal = true; });
  // Varlen with empty sequences (no queries, no keys, neither).
  add([](AttentionCase& c) { c.varlen_q = {0, 17, 255, 1, 0}; c.varlen_k = {5, 0, 300, 17, 0}; c.heads_q = 4; c.heads_kv = 2; });
  add([](AttentionCase& c) { c.dtype = DType::f16; c.varlen_q = {130, 0, 64, 9}; c.varlen_k = {65, 12, 0, 200}; c.causal = true; c.hdim_qk = 128; c.hdim_v = 128; });
  add([](AttentionCase& c) { c.dtype = DType::bf16; c.varlen_q = {33, 200}; c.varlen_k = {129, 190}; c.window_left = 30; c.window_right = 0; c.softcap = 5.0f; c.heads_q = 4; c.heads_kv = 1; c.hdim_qk = 192; c.hdim_v = 128; });
  // Fully masked rows: causal with seqlen_q > seqlen_k; a diagonal-only window likewise.
  add([](AttentionCase& c) { c.seqlen_q = 255; c.seqlen_k = 17; c.causal = true; c.heads_q = 2; c.heads_kv = 1; });
  add([](AttentionCase& c) { c.dtype = DType::bf16; c.seqlen_q = 200; c.seqlen_k = 70; c.window_left = 0; c.window_right = 0; });
  add([](AttentionCase& c) { c.dtype = DType::f16; c.seqlen_q = 90; c.seqlen_k = 0; });
  add([](AttentionCase& c) { c.seqlen_q = 0; c.seqlen_k = 40; });
  // Strided (non-contiguous) tensors, with the padding full of NaN.
  add([](AttentionCase& c) { c.padding = 8; c.seqlen_q = 77; c.seqlen_k = 140; c.heads_q = 4; c.heads_kv = 2; c.causal = true; });
  add([](AttentionCase& c) { c.dtype = DType::bf16; c.padding = 3; c.varlen_q = {10, 50}; c.varlen_k = {60, 20}; c.hdim_qk = 96; c.hdim_v = 96; });
  // Large magnitudes: the running max grows tile after tile and old sums must be rescaled.
  add([](AttentionCase& c) { c.seqlen_q = 150; c.seqlen_k = 400; c.input_scale = 6.0; });
  add([](AttentionCase& c) { c.dtype = DType::bf16; c.seqlen_q = 150; c.seqlen_k = 400; c.input_scale = 6.0; c.softcap = 10.0f; c.causal = true; });
  // Head dims that are not multiples of the 16-float vectors; three query heads per kv head.
  add([](AttentionCase& c) { c.dtype = DType::f16; c.seqlen_q = 70; c.seqlen_k = 150; c.hdim_qk = 40; c.hdim_v = 24; c.heads_q = 6; c.heads_kv = 2; c.window_left = 50; c.softcap = 3.0f; });
  // A scale other than the default.
  add([](AttentionCase& c) { c.seqlen_q = 40; c.seqlen_k = 90; c.softmax_scale = 0.5f; c.hdim_qk = c.hdim_v = 32; });
  return cases;
}

// Attention sinks and used lengths (seqused_q/k) against every other option: each dtype meets
// causal, windows, softcap, GQA, varlen and padding, with and without sinks.
std::vector<AttentionCase> sink_and_seqused_cases() {
  std::vector<AttentionCase> cases;
  const auto add = case_adder(cases, 700);
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  for (int i = 0; i < 3; ++i) {
    const DType dtype = dtypes[i];
    // Sinks alone: plain, causal with rows that see no key, window + softcap, GQA, varlen.
    add([&](AttentionCase& c) { c.dtype = dtype; c.sinks = true; c.seqlen_q = 100; c.seqlen_k = 300; c.heads_q = 2; });
    add([&](AttentionCase& c) { c.dtype = dtype; c.sinks = true; c.seqlen_q = 255; c.seqlen_k = 17; c.causal = true; c.heads_q = 4; c.heads_kv = 2; });
    add([&](AttentionCase& c) { c.dtype = dtype; c.sinks = true; c.seqlen_q = 200; c.seqlen_k = 150; c.window_left = 30; c.window_right = 5; c.softcap = 5.0f; c.heads_q = 4; c.heads_kv = 1; c.hdim_qk = 128; c.hdim_v = 128; });
    add([&](AttentionCase& c) { c.dtype = dtype; c.sinks = true; c.varlen_q = {0, 70, 130, 1}; c.varlen_k = {4, 0, 260, 9}; c.causal = true; c.heads_q = 4; c.heads_kv = 2; c.input_scale = 3.0; });
    // Used lengths, fixed length: rows and keys beyond them are padding (NaN poison in out).
    add([&](AttentionCase& c) { c.dtype = dtype; c.batch = 3; c.seqlen_q = 130; c.seqlen_k = 200; c.seqused_q = {130, 70, 0}; c.seqused_k = {150, 200, 9}; c.causal = true; c.heads_q = 2; c.heads_kv = 1; });
    add([&](AttentionCase& c) { c.dtype = dtype; c.batch = 2; c.seqlen_q = 90; c.seqlen_k = 90; c.seqused_q = {65, 90}; c.seqused_k = {0, 33}; c.window_left = 20; c.window_right = 0; c.softcap = 10.0f; c.hdim_qk = 192; c.hdim_v = 128; });
    // Used lengths with varlen, and everything together.
    add([&](AttentionCase& c) { c.dtype = dtype; c.varlen_q = {80, 0, 140, 5}; c.varlen_k = {100, 30, 150, 0}; c.seqused_q = {64, 0, 139, 5}; c.seqused_k = {100, 17, 1, 0}; c.causal = true; c.heads_q = 4; c.heads_kv = 2; });
    add([&](AttentionCase& c) { c.dtype = dtype; c.sinks = true; c.padding = 3; c.varlen_q = {150, 33}; c.varlen_k = {140, 200}; c.seqused_q = {129, 20}; c.seqused_k = {70, 199}; c.window_left = 40; c.window_right = 10; c.softcap = 5.0f; c.heads_q = 6; c.heads_kv = 2; c.hdim_qk = 96; c.hdim_v = 96; });
    add([&](AttentionCase& c) { c.dtype = dtype; c.sinks = true; c.batch = 2; c.seqlen_q = 70; c.seqlen_k = 60; c.seqused_q = {70, 10}; c.seqused_k = {20, 60}; c.causal = true; c.heads_q = 2; c.heads_kv = 2; c.hdim_qk = 64; c.hdim_v = 64; });
  }
  return cases;
}

class TiledMatrix : public ::testing::TestWithParam<AttentionCase> {};
// ALiBi (per head, per (sequence, head)) against every other option, on odd sizes: every dtype
// meets causal, windows, softcap, GQA, varlen with empty sequences, used lengths and sinks.
std::vector<AttentionCase> alibi_cases() {
  std::vector<AttentionCase> cases;
  auto add = case_adder(cases, 700);
  using A = AttentionCase::Alibi;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    add([&](AttentionCase& c) {
      c.dtype = dtype, c.alibi = A::per_head, c.seqlen_q = 100, c.seqlen_k = 301, c.heads_q = 2;
    });
    add([&](AttentionCase& c) {
      c.dtype = dtype, c.alibi = A::per_sequence_head, c.batch = 2, c.seqlen_q = 255;
      c.seqlen_k = 17, c.causal = true, c.heads_q = 4, c.heads_kv = 2;
    });
    add([&](AttentionCase& c) {
      c.dtype = dtype, c.alibi = A::per_head, c.seqlen_q = 199, c.seqlen_k = 151;
      c.window_left = 30, c.window_right = 5, c.softcap = 5.0f, c.heads_q = 4, c.heads_kv = 1;
      c.hdim_qk = c.hdim_v = 128;
    });
    add([&](AttentionCase& c) {
      c.dtype = dtype, c.alibi = A::per_sequence_head, c.sinks = true, c.causal = true;
      c.varlen_q = {0, 70, 131, 1}, c.varlen_k = {4, 0, 261, 9}, c.heads_q = 4, c.heads_kv = 2;
    });
    add([&](AttentionCase& c) {
      c.dtype = dtype, c.alibi = A::per_sequence_head, c.padding = 3;
      c.varlen_q = {150, 33}, c.varlen_k = {140, 200}, c.seqused_q = {129, 20};
      c.seqused_k = {70, 199}, c.window_left = 40, c.window_right = 10, c.softcap = 5.0f;
      c.heads_q = 6, c.heads_kv = 2, c.hdim_qk = c.hdim_v = 96;
    });
  }
  return cases;
}

TEST_P(TiledMatrix, ForwardAndBackwardMatchReference) { check_forward_and_backward(GetParam()); }

std::string case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  return std::to_string(info.index) + "_" + info.param.name();
}

INSTANTIATE_TEST_SUITE_P(Matrix, TiledMatrix, ::testing::ValuesIn(matrix_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Special, TiledMatrix, ::testing::ValuesIn(special_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Alibi, TiledMatrix, ::testing::ValuesIn(alibi_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(SinksSeqused, TiledMatrix, ::testing::ValuesIn(sink_and_seqused_cases()),
                         case_name);

// The backward's key pass splits a head's keys into ranges, each adding into its own fp32
// slice of dQ, as many as the thread count and the keys' length ask for; here the count is
// walked from one range to more ranges than key tiles (empty ranges), on cases whose ranges
// end mid-way through the rows: odd lengths, causal with seqlen_q != seqlen_k both ways
// (rows that see no key), windows, GQA, varlen with empty sequences, softcap with sinks and
// seqused. Each partition must match the oracle; dK and dV (whose sums do not depend on the
// ranges) and the result of a repeated run must come out bit for bit the same.
std::vector<AttentionCase> partition_cases() {
  std::vector<AttentionCase> cases;
  const auto add = case_adder(cases, 900);
  add([](AttentionCase& c) { c.seqlen_q = 301; c.seqlen_k = 777; c.causal = true; c.heads_q = 2; c.heads_kv = 2; });
  add([](AttentionCase& c) { c.dtype = DType::bf16; c.seqlen_q = 777; c.seqlen_k = 301; c.causal = true; c.heads_q = 4; c.heads_kv = 2; });
  add([](AttentionCase& c) { c.dtype = DType::f16; c.seqlen_q = 500; c.seqlen_k = 650; c.window_left = 100; c.window_right = 30; c.heads_q = 6; c.heads_kv = 2; c.hdim_qk = c.hdim_v = 64; });
  add([](AttentionCase& c) { c.dtype = DType::bf16; c.varlen_q = {0, 300, 129, 1}; c.varlen_k = {200, 0, 520, 130}; c.causal = true; c.heads_q = 4; c.heads_kv = 1; });
  add([](AttentionCase& c) { c.sinks = true; c.softcap = 5.0f; c.batch = 2; c.seqlen_q = 260; c.seqlen_k = 400; c.seqused_q = {260, 77}; c.seqused_k = {399, 129}; c.window_left = 150; c.heads_q = 2; c.heads_kv = 1; c.hdim_qk = 96; c.hdim_v = 96; });
  return cases;
}

class TiledKeyRanges : public ::testing::TestWithParam<AttentionCase> {};
TEST_P(TiledKeyRanges, EveryPartitionMatchesReference) {
  const AttentionCase& c = GetParam();
  std::vector<double> dk_one_range, dv_one_range;
  for (int ranges : {1, 2, 3, 7, 40}) {
    SCOPED_TRACE(c.name() + " in " + std::to_string(ranges) + " key ranges on the " + cpu::active_kernels().isa + " kernels");
    AttentionData data(c);
    const ForwardExpectation fwd = expected_forward(data);
    ASSERT_TRUE(detail::cpu_backend().forward(data.forward_problem()).is_ok());
    const BackwardExpectation bwd = expected_backward(data);
    ASSERT_TRUE(cpu::tiled_backward(data.backward_problem(), ranges).is_ok());
    check_backward_results(data, fwd, bwd);
    if (ranges == 1) {
      dk_one_range = data.dk.values();
      dv_one_range = data.dv.values();
    } else {
      EXPECT_TRUE(data.dk.values() == dk_one_range) << "dK depends on the key ranges";
      EXPECT_TRUE(data.dv.values() == dv_one_range) << "dV depends on the key ranges";
    }
    const std::vector<double> dq = data.dq.values();
    ASSERT_TRUE(cpu::tiled_backward(data.backward_problem(), ranges).is_ok());
    EXPECT_TRUE(data.dq.values() == dq) << "a second run gave another dQ";
  }
}
INSTANTIATE_TEST_SUITE_P(Partitions, TiledKeyRanges, ::testing::ValuesIn(partition_cases()), case_name);

TEST(TiledBackend, ReportsNoWorkspace) {
  AttentionCase c;
  AttentionData data(c);
  std::size_t bytes = 1;
  EXPECT_TRUE(detail::cpu_backend().forward_workspace_size(data.forward_problem(), &bytes).is_ok());
  EXPECT_EQ(bytes, 0u);
  bytes = 1;
  EXPECT_TRUE(detail::cpu_backend().backward_workspace_size(data.backward_problem(), &bytes).is_ok());
  EXPECT_EQ(bytes, 0u);
  EXPECT_STREQ(detail::cpu_backend().name, "cpu");
}

// Varlen lengths come from cu_seqlens: a max_seqlen that is too small must not leave rows unwritten.
TEST(TiledBackend, VarlenReadsLengthsFromCuSeqlens) {
  AttentionCase c;
  c.varlen_q = {3, 150};
  c.varlen_k = {200, 70};
  AttentionData data(c);
  const ForwardExpectation expected = expected_forward(data);
  detail::ForwardProblem p = data.forward_problem();
  p.seqlen_q = p.seqlen_k = 1;
  ASSERT_TRUE(detail::cpu_backend().forward(p).is_ok());
  EXPECT_REPORT(check_all_written("out", data.out.values()));
  EXPECT_REPORT(check_accuracy("out", data.out.values(), expected.out_peer, expected.out_ref));
  detail::BackwardProblem bp = data.backward_problem();
  bp.fwd.seqlen_q = bp.fwd.seqlen_k = 1;
  ASSERT_TRUE(detail::cpu_backend().backward(bp).is_ok());
  EXPECT_REPORT(check_all_written("dq", data.dq.values()));
  EXPECT_REPORT(check_all_written("dk", data.dk.values()));
}

// A child made by fork() has none of the pool's threads; the backend must still run there
// (Python's multiprocessing forks processes that have used hfa).
TEST(TiledBackend, RunsInAForkedChild) {
  AttentionCase c;
  c.seqlen_q = c.seqlen_k = 300;  // enough tiles to involve every thread
  c.heads_q = c.heads_kv = 2;
  AttentionData data(c);
  ASSERT_TRUE(detail::cpu_backend().forward(data.forward_problem()).is_ok());  // the pool exists
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(30);  // a hang kills the child, and the parent sees a signal
    _exit(detail::cpu_backend().forward(data.forward_problem()).is_ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace hfa::test
