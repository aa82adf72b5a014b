// Variable-length batches: the cu_seqlens checks (on CPU tensors the values are read too), and
// that a valid varlen call means the same as fixed-length calls per sequence.
#include <cmath>
#include <vector>

#include "fixture.hpp"

namespace hfa::test {
namespace {

// Three sequences: q lengths {2, 0, 3}, k lengths {4, 1, 2}.
struct Varlen {
  int64_t heads_q = 2, heads_kv = 1, hdim = 64;
  std::vector<int32_t> cu_q{0, 2, 2, 5};
  std::vector<int32_t> cu_k{0, 4, 5, 7};
  Buffer q, k, v, out, lse;
  Tensor cu_q_tensor{}, cu_k_tensor{};
  Options options;

  Varlen() { reset(); }
  Varlen(const Varlen&) = delete;  // options point into the object itself

  void reset() {
    std::mt19937 rng(7);
    cu_q = {0, 2, 2, 5};
    cu_k = {0, 4, 5, 7};
    options = Options{};
    q.make(DType::f32, {5, heads_q, hdim});
    k.make(DType::f32, {7, heads_kv, hdim});
    v.make(DType::f32, {7, heads_kv, hdim});
    out.make(DType::f32, {5, heads_q, hdim});
    lse.make(DType::f32, {heads_q, 5});
    for (Buffer* b : {&q, &k, &v}) b->fill_random(rng);
    cu_q_tensor = make_tensor(cu_q.data(), DType::i32, {4});
    cu_k_tensor = make_tensor(cu_k.data(), DType::i32, {4});
    options.cu_seqlens_q = &cu_q_tensor;
    options.cu_seqlens_k = &cu_k_tensor;
    options.max_seqlen_q = 3;
    options.max_seqlen_k = 4;
  }

  Status forward() {
    out.poison();
    lse.poison();
    return hfa::forward(q.tensor, k.tensor, v.tensor, out.tensor, &lse.tensor, options);
  }
  bool untouched() const { return out.untouched() && lse.untouched(); }
};

::testing::AssertionResult VarlenRejected(Varlen& a, const std::string& argument,
                                          const std::string& fragment) {
  if (auto result = Invalid(a.forward(), argument, fragment); !result) return result;
  if (!a.untouched()) return ::testing::AssertionFailure() << "an output was written";
  return ::testing::AssertionSuccess();
}

TEST(VarlenArgs, ValidCallMatchesFixedLengthPerSequence) {
  Varlen a;
  ASSERT_TRUE(a.forward().is_ok()) << a.forward().message();
  // Sequence 2 (q rows 2..4, k rows 5..6) on its own, as a fixed-length batch of one.
  Attention one;
  one.batch = 1, one.seqlen_q = 3, one.seqlen_k = 2, one.heads_q = 2, one.heads_kv = 1;
  one.allocate();
  std::copy_n(a.q.data.begin() + 2 * 2 * 64, 3 * 2 * 64, one.q.data.begin());
  std::copy_n(a.k.data.begin() + 5 * 64, 2 * 64, one.k.data.begin());
  std::copy_n(a.v.data.begin() + 5 * 64, 2 * 64, one.v.data.begin());
  ASSERT_TRUE(one.forward().is_ok());
  for (int i = 0; i < 3 * 2 * 64; ++i) ASSERT_EQ(a.out.data[2 * 2 * 64 + i], one.out.data[i]) << i;
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 3; ++i) ASSERT_EQ(a.lse.data[h * 5 + 2 + i], one.lse.data[h * 3 + i]);
}

TEST(VarlenArgs, BackwardMatchesFixedLengthPerSequence) {
  Varlen a;
  ASSERT_TRUE(a.forward().is_ok());
  Buffer dout, dq, dk, dv;
  dout.make(DType::f32, {5, 2, 64});
  dq.make(DType::f32, {5, 2, 64});
  dk.make(DType::f32, {7, 1, 64});
  dv.make(DType::f32, {7, 1, 64});
  std::mt19937 rng(11);
  dout.fill_random(rng);
  const Status status = hfa::backward(dout.tensor, a.q.tensor, a.k.tensor, a.v.tensor, a.out.tensor,
                                      a.lse.tensor, dq.tensor, dk.tensor, dv.tensor, a.options);
  if (status.code() == Code::not_supported) GTEST_SKIP() << status.message();
  ASSERT_TRUE(status.is_ok()) << status.message();

  // Sequence 0 (q rows 0..1, k rows 0..3) as a fixed-length batch of one.
  Attention one;
  one.batch = 1, one.seqlen_q = 2, one.seqlen_k = 4, one.heads_q = 2, one.heads_kv = 1;
  one.allocate();
  std::copy_n(a.q.data.begin(), 2 * 2 * 64, one.q.data.begin());
  std::copy_n(a.k.data.begin(), 4 * 64, one.k.data.begin());
  std::copy_n(a.v.data.begin(), 4 * 64, one.v.data.begin());
  std::copy_n(dout.data.begin(), 2 * 2 * 64, one.dout.data.begin());
  ASSERT_TRUE(one.forward().is_ok());
  ASSERT_TRUE(one.backward().is_ok());
  for (int i = 0; i < 2 * 2 * 64; ++i) ASSERT_NEAR(dq.data[i], one.dq.data[i], 1e-5) << i;
  for (int i = 0; i < 4 * 64; ++i) {
    ASSERT_NEAR(dk.data[i], one.dk.data[i], 1e-5) << i;
    ASSERT_NEAR(dv.data[i], one.dv.data[i], 1e-5) << i;
  }
}

TEST(VarlenArgs, BackwardChecksCuSeqlens) {
  Varlen a;
  ASSERT_TRUE(a.forward().is_ok());
  Buffer dout, dq, dk, dv;
  dout.make(DType::f32, {5, 2, 64});
  dq.make(DType::f32, {5, 2, 64});
  dk.make(DType::f32, {7, 1, 64});
  dv.make(DType::f32, {7, 1, 64});
  for (Buffer* b : {&dq, &dk, &dv}) b->poison();
  a.cu_k[3] = 6;
  const Status status = hfa::backward(dout.tensor, a.q.tensor, a.k.tensor, a.v.tensor, a.out.tensor,
                                      a.lse.tensor, dq.tensor, dk.tensor, dv.tensor, a.options);
  EXPECT_TRUE(Invalid(status, "cu_seqlens_k", "must equal k's total_tokens 7"));
  EXPECT_TRUE(dq.untouched() && dk.untouched() && dv.untouched());
}

TEST(VarlenArgs, WrongRank) {
  Varlen a;
  a.q.tensor = make_tensor(a.q.data.data(), DType::f32, {1, 5, 2, 64});
  EXPECT_TRUE(VarlenRejected(a, "q", "expected rank 3"));
}

TEST(VarlenArgs, OnlyOneCuSeqlens) {
  Varlen a;
  a.options.cu_seqlens_k = nullptr;
  EXPECT_TRUE(VarlenRejected(a, "cu_seqlens_k", "varlen needs both"));
  a.reset();
  a.options.cu_seqlens_q = nullptr;
  EXPECT_TRUE(VarlenRejected(a, "cu_seqlens_q", "varlen needs both"));
}

TEST(VarlenArgs, CuSeqlensNotInt32) {
  Varlen a;
  a.cu_q_tensor.dtype = HFA_F32;
  EXPECT_TRUE(VarlenRejected(a, "cu_seqlens_q", "expected dtype i32, got f32"));
}

TEST(VarlenArgs, CuSeqlensWrongRankOrSize) {
  Varlen a;
  a.cu_k_tensor = make_tensor(a.cu_k.data(), DType::i32, {2, 2});
  EXPECT_TRUE(VarlenRejected(a, "cu_seqlens_k", "expected rank 1"));
  a.reset();
  a.cu_k_tensor.shape[0] = 3;
  EXPECT_TRUE(VarlenRejected(a, "cu_seqlens_k", "expected 4 elements"));
  a.reset();
  a.cu_q_tensor.stride[0] = 2;
  EXPECT_TRUE(VarlenRejected(a, "cu_seqlens_q", "unit stride"));
}

TEST(VarlenArgs, CuSeqlensOnAnotherDevice) {
  Varlen a;
  a.cu_q_tensor.device = HFA_CUDA;
  EXPECT_TRUE(VarlenRejected(a, "cu_seqlens_q", "on cuda:0, expected cpu"));
}

TEST(VarlenArgs, CuSeqlensFirstNotZero) {
  Varlen a;
  a.cu_q[0] = 1;
  EXPECT_TRUE(VarlenRejected(a, "cu_seqlens_q", "must start at 0, got 1"));
}

TEST(VarlenArgs, CuSeqlensDecreasing) {
  Varlen a;
  a.cu_k[2] = 3;
  EXPECT_TRUE(VarlenRejected(a, "cu_seqlens_k", "must not decrease"));
}

TEST(VarlenArgs, CuSeqlensLastNotTotal) {
  Varlen a;
  a.cu_q[3] = 4;
  EXPECT_TRUE(VarlenRejected(a, "cu_seqlens_q", "must equal q's total_tokens 5"));
}

TEST(VarlenArgs, MaxSeqlenTooSmall) {
  Varlen a;
  a.options.max_seqlen_k = 3;
  EXPECT_TRUE(VarlenRejected(a, "max_seqlen_k", "smaller than sequence 0 (length 4)"));
}

// The offsets' own structure (start 0, never decreasing, ending at the token count) is checked
// before the lengths are held against max_seqlen: a bad offset is the offsets' fault, even where it
// also makes a length exceed the bound.
TEST(VarlenArgs, CuSeqlensBlamedBeforeMaxSeqlen) {
  Varlen a;
  a.cu_k = {0, 5, 7, 100};  // k has 7 rows; the last "sequence" would be 93 long
  a.options.max_seqlen_k = 5;
  EXPECT_TRUE(VarlenRejected(a, "cu_seqlens_k", "last element 100 must equal k's total_tokens 7"));
  a.reset();
  a.cu_q = {0, 4, 2, 5};  // decreasing, and its first length 4 exceeds max_seqlen_q 3
  EXPECT_TRUE(VarlenRejected(a, "cu_seqlens_q", "must not decrease, but element 2 (2) < element 1 (4)"));
}

TEST(VarlenArgs, MaxSeqlenNotPositive) {
  Varlen a;
  a.options.max_seqlen_q = 0;
  EXPECT_TRUE(VarlenRejected(a, "max_seqlen_q", "must be positive"));
}

TEST(VarlenArgs, LseShape) {
  Varlen a;
  a.lse.tensor = make_tensor(a.lse.data.data(), DType::f32, {1, 2, 5});
  EXPECT_TRUE(VarlenRejected(a, "lse", "expected rank 2"));
  a.reset();
  a.lse.tensor = make_tensor(a.lse.data.data(), DType::f32, {5, 2});
  EXPECT_TRUE(VarlenRejected(a, "lse", "expected shape (2, 5)"));
}

}  // namespace
}  // namespace hfa::test
