// Attention sinks (sinks, dsinks) and used lengths (seqused_q, seqused_k) through the public
// API: every bad argument is rejected by name with nothing written, and valid calls mean what
// hfa.h says (out/lse rows beyond seqused_q untouched, gradients beyond seqused zero).
#include <cmath>
#include <cstddef>
#include <vector>

#include "fixture.hpp"
#include "hfa/hfa.h"

namespace hfa::test {
namespace {

// The fixture's call (batch 2, seqlen_q 3, seqlen_k 5, heads_q 4) with sinks and used lengths.
struct Extras {
  std::vector<float> sinks{0.5f, -1.0f, 2.0f, 0.0f};
  std::vector<float> dsinks = std::vector<float>(4, 0.0f);
  std::vector<int32_t> seqused_q{2, 3};
  std::vector<int32_t> seqused_k{5, 1};
  Tensor sinks_tensor = make_tensor(sinks.data(), DType::f32, {4});
  Tensor dsinks_tensor = make_tensor(dsinks.data(), DType::f32, {4});
  Tensor seqused_q_tensor = make_tensor(seqused_q.data(), DType::i32, {2});
  Tensor seqused_k_tensor = make_tensor(seqused_k.data(), DType::i32, {2});
};

TEST(SinksArgs, RejectedByName) {
  Attention a;
  Extras e;
  a.options.sinks = &e.sinks_tensor;
  ASSERT_TRUE(a.forward().is_ok());

  Tensor wrong_dtype = e.sinks_tensor;
  wrong_dtype.dtype = HFA_F16;
  a.options.sinks = &wrong_dtype;
  EXPECT_TRUE(ForwardRejected(a, "sinks", "expected dtype f32, got f16"));

  Tensor wrong_shape = make_tensor(e.sinks.data(), DType::f32, {3});
  a.options.sinks = &wrong_shape;
  EXPECT_TRUE(ForwardRejected(a, "sinks", "expected shape (4) (heads_q), got (3)"));

  Tensor rank2 = make_tensor(e.sinks.data(), DType::f32, {2, 2});
  a.options.sinks = &rank2;
  EXPECT_TRUE(ForwardRejected(a, "sinks", "expected rank 1"));

  Tensor strided = make_tensor(e.sinks.data(), DType::f32, {2}, {2});
  a.heads_q = 2;
  a.allocate();
  a.options.sinks = &strided;
  EXPECT_TRUE(ForwardRejected(a, "sinks", "unit stride, got stride 2"));

  Tensor on_gpu = make_tensor(e.sinks.data(), DType::f32, {2}, {}, Device::cuda());
  a.options.sinks = &on_gpu;
  EXPECT_TRUE(ForwardRejected(a, "sinks", "expected cpu"));

  Tensor no_data = make_tensor(nullptr, DType::f32, {2});
  a.options.sinks = &no_data;
  EXPECT_TRUE(ForwardRejected(a, "sinks", "data is null"));
  // The backward goes through the same checks.
  EXPECT_TRUE(BackwardRejected(a, "sinks", "data is null"));
}

TEST(SinksArgs, DsinksRejectedByName) {
  Attention a;
  Extras e;
  ASSERT_TRUE(a.forward().is_ok());
  a.options.dsinks = &e.dsinks_tensor;
  EXPECT_TRUE(BackwardRejected(a, "dsinks", "sinks is null"));

  a.options.sinks = &e.sinks_tensor;
  Tensor wrong_shape = make_tensor(e.dsinks.data(), DType::f32, {2});
  a.options.dsinks = &wrong_shape;
  EXPECT_TRUE(BackwardRejected(a, "dsinks", "expected shape (4)"));
  Tensor wrong_dtype = make_tensor(e.dsinks.data(), DType::bf16, {4});
  a.options.dsinks = &wrong_dtype;
  EXPECT_TRUE(BackwardRejected(a, "dsinks", "expected dtype f32"));
  Tensor overlapping = make_tensor(e.dsinks.data(), DType::f32, {4}, {0});
  a.options.dsinks = &overlapping;
  EXPECT_TRUE(BackwardRejected(a, "dsinks", "unit stride, got stride 0"));

  // The forward ignores dsinks (a backward-only output) whatever it holds.
  a.options.dsinks = &wrong_dtype;
  EXPECT_TRUE(a.forward().is_ok());
}

TEST(SequsedArgs, RejectedByName) {
  Attention a;
  Extras e;
  a.options.seqused_q = &e.seqused_q_tensor;
  a.options.seqused_k = &e.seqused_k_tensor;
  ASSERT_TRUE(a.forward().is_ok());

  Tensor wrong_dtype = make_tensor(e.seqused_q.data(), DType::f32, {2});
  a.options.seqused_q = &wrong_dtype;
  EXPECT_TRUE(ForwardRejected(a, "seqused_q", "expected dtype i32, got f32"));
  Tensor wrong_shape = make_tensor(e.seqused_q.data(), DType::i32, {1});
  a.options.seqused_q = &wrong_shape;
  EXPECT_TRUE(ForwardRejected(a, "seqused_q", "expected shape (2) (batch), got (1)"));
  a.options.seqused_q = &e.seqused_q_tensor;

  e.seqused_q[1] = 4;  // seqlen_q is 3
  EXPECT_TRUE(ForwardRejected(a, "seqused_q", "element 1 (4) exceeds sequence 1's allocated length 3"));
  e.seqused_q[1] = -1;
  EXPECT_TRUE(ForwardRejected(a, "seqused_q", "element 1 is negative"));
  e.seqused_q[1] = 3;
  e.seqused_k[0] = 6;  // seqlen_k is 5
  EXPECT_TRUE(ForwardRejected(a, "seqused_k", "exceeds sequence 0's allocated length 5"));
  EXPECT_TRUE(BackwardRejected(a, "seqused_k", "exceeds sequence 0's allocated length 5"));
  e.seqused_k[0] = 5;

  Tensor on_gpu = make_tensor(e.seqused_k.data(), DType::i32, {2}, {}, Device::cuda());
  a.options.seqused_k = &on_gpu;
  EXPECT_TRUE(ForwardRejected(a, "seqused_k", "expected cpu"));
}

// With varlen, each used length is bounded by its own sequence's length from cu_seqlens.
TEST(SequsedArgs, VarlenBoundIsTheSequenceLength) {
  std::vector<int32_t> cu_q{0, 2, 5}, cu_k{0, 4, 5};
  std::vector<int32_t> used_q{2, 3}, used_k{2, 2};
  Buffer q, k, v, out;
  q.make(DType::f32, {5, 1, 64});
  k.make(DType::f32, {5, 1, 64});
  v.make(DType::f32, {5, 1, 64});
  out.make(DType::f32, {5, 1, 64});
  const Tensor cu_q_t = make_tensor(cu_q.data(), DType::i32, {3});
  const Tensor cu_k_t = make_tensor(cu_k.data(), DType::i32, {3});
  const Tensor used_q_t = make_tensor(used_q.data(), DType::i32, {2});
  const Tensor used_k_t = make_tensor(used_k.data(), DType::i32, {2});
  Options options;
  options.cu_seqlens_q = &cu_q_t;
  options.cu_seqlens_k = &cu_k_t;
  options.max_seqlen_q = 3;
  options.max_seqlen_k = 4;
  options.seqused_q = &used_q_t;
  options.seqused_k = &used_k_t;
  // Sequence 1 has one key: a used length of 2 is too long, although sequence 0 has 4.
  EXPECT_TRUE(Invalid(hfa::forward(q.tensor, k.tensor, v.tensor, out.tensor, nullptr, options),
                      "seqused_k", "element 1 (2) exceeds sequence 1's allocated length 1"));
  used_k[1] = 1;
  EXPECT_TRUE(hfa::forward(q.tensor, k.tensor, v.tensor, out.tensor, nullptr, options).is_ok());
}

// Valid calls: rows beyond seqused_q keep what they held; the backward zeroes the gradient rows
// beyond the used lengths and writes dsinks.
TEST(SinksSequsedCalls, RowsBeyondSequsedAndDsinks) {
  Attention a;
  Extras e;
  a.options.sinks = &e.sinks_tensor;
  a.options.seqused_q = &e.seqused_q_tensor;
  a.options.seqused_k = &e.seqused_k_tensor;
  ASSERT_TRUE(a.forward().is_ok());
  const int64_t row = a.heads_q * a.hdim_v;  // out elements per token
  // Sequence 0 uses rows 0..1 of 3: row 2 still holds the sentinel; sequence 1 uses all rows.
  const auto* out_bytes = reinterpret_cast<const unsigned char*>(a.out.data.data());
  for (int64_t i = 2 * row * 4; i < 3 * row * 4; ++i) ASSERT_EQ(out_bytes[i], kSentinel) << i;
  for (int64_t i = 0; i < 2 * row; ++i) ASSERT_TRUE(std::isfinite(a.out.data[i])) << i;
  for (int64_t i = 3 * row; i < 6 * row; ++i) ASSERT_TRUE(std::isfinite(a.out.data[i])) << i;
  for (int64_t h = 0; h < a.heads_q; ++h) {
    const auto* lse_bytes = reinterpret_cast<const unsigned char*>(&a.lse.data[h * 3 + 2]);
    for (int byte = 0; byte < 4; ++byte) ASSERT_EQ(lse_bytes[byte], kSentinel);
    // The sink is in the LSE: it is above the sink's own logit.
    EXPECT_GT(a.lse.data[h * 3 + 0], e.sinks[h]);
  }

  a.options.dsinks = &e.dsinks_tensor;
  std::fill(e.dsinks.begin(), e.dsinks.end(), NAN);
  ASSERT_TRUE(a.backward().is_ok());
  for (float x : e.dsinks) EXPECT_TRUE(std::isfinite(x));
  const int64_t q_row = a.heads_q * a.hdim, k_row = a.heads_kv * a.hdim;
  for (int64_t i = 2 * q_row; i < 3 * q_row; ++i) ASSERT_EQ(a.dq.data[i], 0.0f) << i;
  // Sequence 1 uses 1 of its 5 keys: dk and dv rows 1..4 of it are 0.
  for (int64_t i = (5 + 1) * k_row; i < 10 * k_row; ++i) {
    ASSERT_EQ(a.dk.data[i], 0.0f) << i;
    ASSERT_EQ(a.dv.data[i], 0.0f) << i;
  }
  for (int64_t i = 5 * k_row; i < 6 * k_row; ++i) ASSERT_TRUE(std::isfinite(a.dk.data[i]));
}

// An empty problem with dsinks still writes it: zeros, the gradient of sinks no row uses.
TEST(SinksSequsedCalls, EmptyBackwardZeroesDsinks) {
  Attention a;
  a.batch = 0;
  a.allocate();
  Extras e;
  a.options.sinks = &e.sinks_tensor;
  a.options.dsinks = &e.dsinks_tensor;
  std::fill(e.dsinks.begin(), e.dsinks.end(), NAN);
  ASSERT_TRUE(a.backward().is_ok()) << a.backward().message();
  for (float x : e.dsinks) EXPECT_EQ(x, 0.0f);
}

TEST(SinksSequsedCalls, CAbiCarriesTheNewFields) {
  // Appended after workspace_bytes: the fields before keep their offsets.
  static_assert(offsetof(hfa_options, sinks) > offsetof(hfa_options, workspace_bytes));
  static_assert(offsetof(hfa_options, dsinks) > offsetof(hfa_options, seqused_k));
  const hfa_options defaults = hfa_default_options();
  EXPECT_EQ(defaults.sinks, nullptr);
  EXPECT_EQ(defaults.seqused_q, nullptr);
  EXPECT_EQ(defaults.seqused_k, nullptr);
  EXPECT_EQ(defaults.dsinks, nullptr);

  Attention a;
  Extras e;
  a.options.sinks = &e.sinks_tensor;
  a.options.seqused_q = &e.seqused_q_tensor;
  a.options.seqused_k = &e.seqused_k_tensor;
  a.options.dsinks = &e.dsinks_tensor;
  const hfa_options c = to_c(a.options);
  EXPECT_EQ(c.sinks, &e.sinks_tensor);
  EXPECT_EQ(c.seqused_q, &e.seqused_q_tensor);
  EXPECT_EQ(c.seqused_k, &e.seqused_k_tensor);
  EXPECT_EQ(c.dsinks, &e.dsinks_tensor);

  // The C call gives the C++ call's results.
  ASSERT_TRUE(a.forward().is_ok());
  Attention b;
  ASSERT_EQ(hfa_forward(&b.q.tensor, &b.k.tensor, &b.v.tensor, &b.out.tensor, &b.lse.tensor, &c),
            HFA_SUCCESS);
  EXPECT_EQ(0, std::memcmp(a.out.data.data(), b.out.data.data(), a.out.data.size() * 4));
  EXPECT_EQ(0, std::memcmp(a.lse.data.data(), b.lse.data.data(), a.lse.data.size() * 4));
  e.sinks_tensor.dtype = HFA_I32;
  EXPECT_EQ(hfa_forward(&b.q.tensor, &b.k.tensor, &b.v.tensor, &b.out.tensor, &b.lse.tensor, &c),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "sinks: expected dtype f32, got i32");
}

}  // namespace
}  // namespace hfa::test
