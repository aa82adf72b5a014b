// What validation hands the backends: resolved defaults, folded causal, element strides.
#include <cmath>

#include "api/validate.hpp"
#include "fixture.hpp"

namespace hfa::test {
namespace {

using detail::ForwardProblem;

ForwardProblem build(Attention& a) {
  ForwardProblem p;
  const Status status = detail::build_forward_problem(
      {&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, &a.lse.tensor, &a.options},
      detail::Purpose::run, &p);
  EXPECT_TRUE(status.is_ok()) << status.message();
  return p;
}

TEST(Problem, DefaultsResolved) {
  Attention a;
  const ForwardProblem p = build(a);
  EXPECT_FLOAT_EQ(p.softmax_scale, 1.0f / std::sqrt(64.0f));
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.seqlen_q, 3);
  EXPECT_EQ(p.seqlen_k, 5);
  EXPECT_EQ(p.heads_q, 4);
  EXPECT_EQ(p.heads_kv, 2);
  EXPECT_EQ(p.hdim_qk, 64);
  EXPECT_EQ(p.hdim_v, 64);
  EXPECT_EQ(p.window_left, -1);
  EXPECT_EQ(p.window_right, -1);
  EXPECT_FALSE(p.causal);
  EXPECT_FALSE(p.is_varlen());
  EXPECT_EQ(p.q_stride.batch, 3 * 4 * 64);
  EXPECT_EQ(p.q_stride.row, 4 * 64);
  EXPECT_EQ(p.q_stride.head, 64);
  EXPECT_EQ(p.lse_batch_stride, 4 * 3);
  EXPECT_EQ(p.lse_head_stride, 3);
  EXPECT_EQ(p.q, a.q.data.data());
  EXPECT_EQ(p.out, a.out.data.data());
  EXPECT_EQ(p.device.kind, DeviceKind::cpu);
}

TEST(Problem, ExplicitScaleKept) {
  Attention a;
  a.options.softmax_scale = 0.0f;  // uniform attention: unusual but well defined
  EXPECT_EQ(build(a).softmax_scale, 0.0f);
}

TEST(Problem, CausalFoldsIntoWindow) {
  Attention a;
  a.options.causal = true;
  a.options.window_right = 3;  // like FlashAttention, causal wins
  a.options.window_left = 1;
  ForwardProblem p = build(a);
  EXPECT_EQ(p.window_right, 0);
  EXPECT_EQ(p.window_left, 1);
  EXPECT_FALSE(p.causal);  // a window (1, 0) is not plain causal
  a.options.window_left = -1;
  p = build(a);
  EXPECT_TRUE(p.causal);
  EXPECT_EQ(p.window_right, 0);
}

TEST(Problem, WindowSpelledAsCausalIsCausal) {
  Attention a;
  a.options.window_right = 0;
  EXPECT_TRUE(build(a).causal);
}

TEST(Problem, LeftWindowPastEveryKeyIsDropped) {
  Attention a;  // seqlen_k 5: a left window >= 4 reaches key 0 from every row
  a.options.window_left = 4;
  EXPECT_EQ(build(a).window_left, -1);
  a.options.window_left = 3;
  EXPECT_EQ(build(a).window_left, 3);
}

TEST(Problem, WorkspaceChecked) {
  EXPECT_TRUE(detail::check_workspace(0, nullptr, 0).is_ok());
  EXPECT_TRUE(Invalid(detail::check_workspace(256, nullptr, 0), "workspace", "needs 256 bytes, got 0"));
  char buffer[64];
  EXPECT_TRUE(Invalid(detail::check_workspace(65, buffer, sizeof buffer), "workspace",
                      "needs 65 bytes, got 64"));
  EXPECT_TRUE(detail::check_workspace(64, buffer, sizeof buffer).is_ok());
  EXPECT_TRUE(Invalid(detail::check_workspace(64, nullptr, sizeof buffer), "workspace", "is null"));
}

TEST(Problem, WorkspaceQueryNeedsNoOutputs) {
  Attention a;
  std::size_t bytes = 12345;
  ASSERT_TRUE(forward_workspace_size(a.q.tensor, a.k.tensor, a.v.tensor, a.options, &bytes).is_ok());
  EXPECT_NE(bytes, 12345u);
  a.k.tensor.shape[3] = 128;
  EXPECT_TRUE(Invalid(forward_workspace_size(a.q.tensor, a.k.tensor, a.v.tensor, a.options, &bytes), "k"));
  EXPECT_TRUE(Invalid(forward_workspace_size(a.q.tensor, a.k.tensor, a.v.tensor, a.options, nullptr), "bytes"));
}

// problem.hpp's ScaleView for each form: per tensor all strides 0; FlashAttention-3's
// (batch, heads_kv) q_descale maps a query head to its group; per block with the block term.
TEST(Problem, Fp8ScaleViews) {
  Attention a = fp8_attention();
  Scales s;
  Tensor per_tensor = s.view({1}), per_kv_head = s.view({2, 2}, {0, 1});
  Tensor per_query_head = s.view({2, 4}), per_block = s.view({2, 3, 2}, {1, 2, 6});
  a.options.q_descale = &per_kv_head;
  a.options.k_descale = &per_block;
  a.options.descale_block_kv = 2;
  ForwardProblem p = build(a);
  EXPECT_EQ(p.dtype, DType::e4m3);
  EXPECT_EQ(p.out_dtype, DType::bf16);
  EXPECT_EQ(p.q_descale.data, s.values.data());
  EXPECT_EQ(p.q_descale.batch_stride, 0);
  EXPECT_EQ(p.q_descale.head_stride, 1);
  EXPECT_EQ(p.q_descale.block_rows, 0);
  EXPECT_EQ(p.q_descale.head_divisor, 2);  // 4 query heads over 2 kv heads
  EXPECT_EQ(p.k_descale.batch_stride, 1);
  EXPECT_EQ(p.k_descale.block_stride, 2);
  EXPECT_EQ(p.k_descale.head_stride, 6);
  EXPECT_EQ(p.k_descale.block_rows, 2);
  EXPECT_EQ(p.k_descale.head_divisor, 1);
  EXPECT_EQ(p.v_descale.data, nullptr);

  a.options.q_descale = &per_query_head;
  a.options.v_descale = &per_tensor;
  p = build(a);
  EXPECT_EQ(p.q_descale.batch_stride, 4);
  EXPECT_EQ(p.q_descale.head_divisor, 1);
  EXPECT_EQ(p.v_descale.data, s.values.data());
  EXPECT_EQ(p.v_descale.batch_stride, 0);
  EXPECT_EQ(p.v_descale.block_stride, 0);
  EXPECT_EQ(p.v_descale.head_stride, 0);
  EXPECT_EQ(p.v_descale.block_rows, 0);
}

}  // namespace
}  // namespace hfa::test
