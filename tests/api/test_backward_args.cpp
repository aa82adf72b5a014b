// The backward checks everything the forward does, plus dout, dq, dk, dv and the lse it needs.
#include <cmath>
#include <cstddef>

#include "fixture.hpp"

namespace hfa::test {
namespace {

TEST(BackwardArgs, ChecksTheForwardArguments) {
  Attention a;
  a.k.tensor.shape[3] = 128;
  EXPECT_TRUE(BackwardRejected(a, "k", "expected headdim 64 (as q), got 128"));
}

TEST(BackwardArgs, NegativeSmMargin) {
  Attention a;
  a.options.sm_margin = -3;
  EXPECT_TRUE(BackwardRejected(a, "sm_margin", "got -3"));
  std::size_t bytes = 0;
  EXPECT_TRUE(Invalid(backward_workspace_size(a.q.tensor, a.k.tensor, a.v.tensor, a.options, &bytes),
                      "sm_margin"));
}

TEST(BackwardArgs, SmMarginIgnoredOnTheCpu) {
  Attention plain;
  ASSERT_TRUE(plain.forward().is_ok());
  ASSERT_TRUE(plain.backward().is_ok());
  Attention margin;
  margin.options.sm_margin = 1000;
  ASSERT_TRUE(margin.forward().is_ok());
  ASSERT_TRUE(margin.backward().is_ok()) << margin.backward().message();
  EXPECT_EQ(margin.dq.data, plain.dq.data);
  EXPECT_EQ(margin.dk.data, plain.dk.data);
  EXPECT_EQ(margin.dv.data, plain.dv.data);
}

// A zero softmax_scale is valid: every score is 0, so P is uniform over the keys a row sees,
// dK = scale·dSᵀ·Q and dQ = scale·dS·K are 0, and dV = Pᵀ·dO. Never 0 / 0.
TEST(BackwardArgs, ZeroScaleGivesFiniteGradients) {
  Attention a;
  a.options.softmax_scale = 0.0f;
  ASSERT_TRUE(a.forward().is_ok());
  ASSERT_TRUE(a.backward().is_ok()) << a.backward().message();
  for (float x : a.dk.data) ASSERT_EQ(x, 0.0f);
  for (float x : a.dq.data) ASSERT_EQ(x, 0.0f);
  for (float x : a.dv.data) ASSERT_TRUE(std::isfinite(x));
  EXPECT_FALSE(a.dv.untouched());
}

TEST(BackwardArgs, DoutShape) {
  Attention a;
  a.dout.tensor.shape[1] = 2;
  EXPECT_TRUE(BackwardRejected(a, "dout", "expected seqlen 3 (as out), got 2"));
}

TEST(BackwardArgs, DoutDtype) {
  Attention a;
  a.dout.tensor.dtype = HFA_BF16;
  EXPECT_TRUE(BackwardRejected(a, "dout", "expected dtype f32 (as q), got bf16"));
}

TEST(BackwardArgs, GradientShapes) {
  Attention a;
  a.dq.tensor.shape[2] = 2;
  EXPECT_TRUE(BackwardRejected(a, "dq", "expected heads 4 (as q), got 2"));
  a = Attention{};
  a.dk.tensor.shape[1] = 4;
  EXPECT_TRUE(BackwardRejected(a, "dk", "expected seqlen 5 (as k), got 4"));
  a = Attention{};
  a.dv.tensor.shape[3] = 128;
  EXPECT_TRUE(BackwardRejected(a, "dv", "expected headdim 64 (as v), got 128"));
}

TEST(BackwardArgs, GradientDtypes) {
  Attention a;
  a.dk.tensor.dtype = HFA_F16;
  EXPECT_TRUE(BackwardRejected(a, "dk", "expected dtype f32 (as q), got f16"));
}

TEST(BackwardArgs, GradientOnAnotherDevice) {
  Attention a;
  a.dv.tensor.device = HFA_CUDA;
  EXPECT_TRUE(BackwardRejected(a, "dv", "on cuda:0, expected cpu"));
}

TEST(BackwardArgs, GradientNullData) {
  Attention a;
  a.dq.tensor.data = nullptr;
  EXPECT_TRUE(BackwardRejected(a, "dq", "null"));
}

TEST(BackwardArgs, LseRequired) {
  Attention a;
  a.poison_outputs();
  const hfa_options options = to_c(a.options);
  EXPECT_EQ(hfa_backward(&a.dout.tensor, &a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor,
                         nullptr, &a.dq.tensor, &a.dk.tensor, &a.dv.tensor, &options),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "lse: is null");
  EXPECT_TRUE(a.backward_outputs_untouched());
}

TEST(BackwardArgs, LseShape) {
  Attention a;
  a.lse.tensor.shape[2] = 4;
  EXPECT_TRUE(BackwardRejected(a, "lse", "expected shape (2, 4, 3)"));
}

}  // namespace
}  // namespace hfa::test
