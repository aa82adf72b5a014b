// Empty problems are valid: nothing to compute, and rows that see no key give O = 0 and
// LSE = -inf, never NaN.
#include <cmath>

#include "fixture.hpp"

namespace hfa::test {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

TEST(Empty, BatchZeroWithNullData) {
  Attention a;
  a.batch = 0;
  a.allocate();
  for (Buffer* b : {&a.q, &a.k, &a.v, &a.out, &a.lse}) b->tensor.data = nullptr;
  EXPECT_TRUE(a.forward().is_ok()) << a.forward().message();
}

TEST(Empty, SeqlenQZero) {
  Attention a;
  a.seqlen_q = 0;
  a.allocate();
  EXPECT_TRUE(a.forward().is_ok());
}

TEST(Empty, EmptyTensorsTakeAnyStrides) {
  // numpy gives an empty array strides as if its empty dims had one element (lse (1, 2, 0):
  // strides (2, 1, 1)); torch has its own rules. No element is addressed: any stride goes.
  Attention a;
  a.seqlen_q = 0;
  a.allocate();
  a.lse.tensor.stride[0] = a.heads_q;
  a.lse.tensor.stride[1] = 1;
  a.lse.tensor.stride[2] = 1;
  a.q.tensor.stride[3] = 7;
  a.out.tensor.stride[0] = 0;
  ASSERT_TRUE(a.forward().is_ok()) << a.forward().message();
}

TEST(Empty, SeqlenKZeroGivesZeroOutAndMinusInfLse) {
  Attention a;
  a.seqlen_k = 0;
  a.allocate();
  ASSERT_TRUE(a.forward().is_ok()) << a.forward().message();
  for (float x : a.out.data) ASSERT_EQ(x, 0.0f);
  for (float x : a.lse.data) ASSERT_EQ(x, kMinusInf);
}

// No keys: k and v have no elements, so null data and any strides (even ones whose products
// overflow) are valid; no address is computed from them. The FP8 forward's copies of such an
// input are empty too.
TEST(Empty, NoKeysWithNullDataAndAnyStrides) {
  for (bool fp8 : {false, true}) {
    Attention a;
    if (fp8) a = fp8_attention();
    a.seqlen_k = 0;
    a.allocate();
    if (fp8) {
      a.out.make(DType::bf16, {a.batch, a.seqlen_q, a.heads_q, a.hdim_v});
      a.out.poison();
    }
    for (Buffer* b : {&a.k, &a.v}) {
      b->tensor.data = nullptr;
      for (int d = 0; d < 4; ++d) b->tensor.stride[d] = std::numeric_limits<int64_t>::max();
    }
    ASSERT_TRUE(a.forward().is_ok()) << a.forward().message();
    for (float x : a.lse.data) ASSERT_EQ(x, kMinusInf);
    if (fp8) continue;  // the backward takes no FP8 inputs
    for (float x : a.out.data) ASSERT_EQ(x, 0.0f);
    for (Buffer* b : {&a.dk, &a.dv}) {
      b->tensor.data = nullptr;
      b->tensor.stride[0] = std::numeric_limits<int64_t>::max();
    }
    ASSERT_TRUE(a.backward().is_ok()) << a.backward().message();
    for (float x : a.dq.data) ASSERT_EQ(x, 0.0f);
  }
}

TEST(Empty, FullyMaskedRows) {
  // seqlen_q > seqlen_k, causal, bottom-right aligned: row i sees keys j <= i - 2, so rows 0 and
  // 1 see nothing.
  Attention a;
  a.seqlen_q = 5;
  a.seqlen_k = 3;
  a.options.causal = true;
  a.allocate();
  ASSERT_TRUE(a.forward().is_ok()) << a.forward().message();
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < a.seqlen_q; ++i)
      for (int64_t h = 0; h < a.heads_q; ++h) {
        const float lse = a.lse.data[(b * a.heads_q + h) * a.seqlen_q + i];
        const float* row = &a.out.data[((b * a.seqlen_q + i) * a.heads_q + h) * a.hdim_v];
        if (i < 2) {
          ASSERT_EQ(lse, kMinusInf);
          for (int64_t d = 0; d < a.hdim_v; ++d) ASSERT_EQ(row[d], 0.0f);
        } else {
          ASSERT_TRUE(std::isfinite(lse));
          for (int64_t d = 0; d < a.hdim_v; ++d) ASSERT_TRUE(std::isfinite(row[d]));
        }
      }
}

TEST(Empty, WindowThatSeesNothing) {
  // A (0, 0) window with seqlen_k < seqlen_q: row i sees only key i - 2.
  Attention a;
  a.seqlen_q = 4;
  a.seqlen_k = 2;
  a.options.window_left = 0;
  a.options.window_right = 0;
  a.allocate();
  ASSERT_TRUE(a.forward().is_ok());
  for (float x : a.out.data) ASSERT_FALSE(std::isnan(x));
  for (float x : a.lse.data) ASSERT_FALSE(std::isnan(x));
  EXPECT_EQ(a.lse.data[0], kMinusInf);  // (b 0, h 0, row 0)
}

TEST(Empty, BackwardWithNoQueriesZeroesDkDv) {
  Attention a;
  a.seqlen_q = 0;
  a.allocate();
  const Status status = a.backward();
  if (status.code() == Code::not_supported) GTEST_SKIP() << status.message();
  ASSERT_TRUE(status.is_ok()) << status.message();
  for (float x : a.dk.data) ASSERT_EQ(x, 0.0f);
  for (float x : a.dv.data) ASSERT_EQ(x, 0.0f);
}

TEST(Empty, BackwardBatchZero) {
  Attention a;
  a.batch = 0;
  a.allocate();
  EXPECT_TRUE(a.backward().is_ok()) << a.backward().message();
}

}  // namespace
}  // namespace hfa::test
