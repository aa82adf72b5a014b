// FP8 (e4m3) forward arguments through the public API: the dtypes q, k, v and out may have,
// the descales and their block options. Each bad one is rejected by name with nothing written;
// the ScaleViews valid calls fill are checked in test_problem.cpp, the numbers of FP8 calls in
// tests/cpu/test_fp8.cpp.
#include <cstddef>
#include <cstring>
#include <vector>

#include "fixture.hpp"
#include "hfa/hfa.h"

namespace hfa::test {
namespace {

TEST(Fp8Args, ValidCallsWriteOut) {
  Attention a = fp8_attention();
  Scales s;
  ASSERT_TRUE(a.forward().is_ok()) << a.forward().message();
  EXPECT_FALSE(a.out.untouched());
  EXPECT_FALSE(a.lse.untouched());

  Tensor per_tensor = s.view({1}), per_kv_head = s.view({2, 2}), per_query_head = s.view({2, 4});
  Tensor per_block = s.view({2, 3, 2}), broadcast = s.view({2, 2}, {0, 1});
  const std::vector<std::vector<const Tensor*>> forms = {
      {&per_tensor, &per_tensor, &per_tensor}, {&per_kv_head, &per_kv_head, &per_kv_head},
      {&per_query_head, &broadcast, nullptr}, {nullptr, &per_block, &per_kv_head}};
  for (const auto& form : forms) {
    a.options.q_descale = form[0];
    a.options.k_descale = form[1];
    a.options.v_descale = form[2];
    a.options.descale_block_kv = form[1] == &per_block ? 2 : 0;
    a.poison_outputs();
    ASSERT_TRUE(a.forward().is_ok()) << a.forward().message();
    EXPECT_FALSE(a.out.untouched());
  }
}

TEST(Fp8Args, OutMayBeF16OrOnTheCpuF32) {
  Attention a = fp8_attention();
  for (DType out : {DType::f16, DType::f32}) {
    a.out.make(out, {a.batch, a.seqlen_q, a.heads_q, a.hdim_v});
    a.poison_outputs();
    ASSERT_TRUE(a.forward().is_ok()) << a.forward().message();
    EXPECT_FALSE(a.out.untouched());
  }
}

TEST(Fp8Args, OutOfAnotherDtype) {
  Attention a = fp8_attention();
  a.out.tensor.dtype = HFA_E4M3;
  EXPECT_TRUE(ForwardRejected(a, "out", "expected dtype bf16 or f16 (or f32 on the CPU) for e4m3 "
                                        "inputs, got e4m3"));
}

TEST(Fp8Args, E4m3InputsGoTogether) {
  Attention a = fp8_attention();
  a.v.tensor.dtype = HFA_BF16;
  EXPECT_TRUE(ForwardRejected(a, "v", "expected dtype e4m3 (as q and k), got bf16"));
  a = fp8_attention();
  a.k.tensor.dtype = HFA_F16;
  EXPECT_TRUE(ForwardRejected(a, "k", "expected dtype e4m3 (as q and v), got f16"));
  a = fp8_attention();
  a.k.tensor.dtype = a.v.tensor.dtype = HFA_BF16;
  EXPECT_TRUE(ForwardRejected(a, "q", "dtype e4m3, but k and v are not"));
}

TEST(Fp8Args, E5m2IsNotSupported) {
  Attention a = fp8_attention();
  for (Buffer* b : {&a.q, &a.k, &a.v}) b->tensor.dtype = HFA_E5M2;
  EXPECT_TRUE(ForwardRejected(a, "q", "e5m2 inputs are not supported", Code::not_supported));
  a = fp8_attention();
  a.k.tensor.dtype = HFA_E5M2;
  EXPECT_TRUE(ForwardRejected(a, "k", "e5m2 inputs are not supported", Code::not_supported));
}

TEST(Fp8Args, DescalesNeedE4m3Inputs) {
  Attention a;  // f32
  Scales s;
  Tensor per_tensor = s.view({1});
  a.options.k_descale = &per_tensor;
  EXPECT_TRUE(ForwardRejected(a, "k_descale", "is given, but the inputs are f32 (descales are "
                                              "for e4m3 inputs)"));
  EXPECT_TRUE(BackwardRejected(a, "k_descale", "the inputs are f32"));
}

TEST(Fp8Args, DescaleForm) {
  Attention a = fp8_attention();
  Scales s;
  Tensor wrong_dtype = make_tensor(s.values.data(), DType::f16, {1});
  a.options.q_descale = &wrong_dtype;
  EXPECT_TRUE(ForwardRejected(a, "q_descale", "expected dtype f32, got f16"));
  Tensor rank4 = s.view({2, 1, 1, 2});
  a.options.q_descale = &rank4;
  EXPECT_TRUE(ForwardRejected(a, "q_descale", "expected rank 1 (one scale), 2 (batch, heads) or "
                                              "3 (batch, num_blocks, heads), got 4"));
  Tensor on_gpu = make_tensor(s.values.data(), DType::f32, {1}, {}, Device::cuda());
  a.options.q_descale = nullptr;
  a.options.v_descale = &on_gpu;
  EXPECT_TRUE(ForwardRejected(a, "v_descale", "on cuda:0, expected cpu (as q)"));
  Tensor no_data = make_tensor(nullptr, DType::f32, {2, 2});
  a.options.v_descale = &no_data;
  EXPECT_TRUE(ForwardRejected(a, "v_descale", "data is null"));
  Tensor negative = s.view({2, 2}, {-2, 1});
  a.options.v_descale = &negative;
  EXPECT_TRUE(ForwardRejected(a, "v_descale", "negative stride"));
}

TEST(Fp8Args, DescaleShape) {
  Scales s;
  const struct {
    const Tensor* Options::*option;
    Tensor tensor;
    const char* name;
    const char* message;
  } cases[] = {
      {&Options::q_descale, s.view({2}), "q_descale",
       "expected shape (1) (one scale for the tensor), got (2)"},
      {&Options::q_descale, s.view({2, 3}), "q_descale",
       "expected shape (2, 4) (batch, heads_q) or (2, 2) (batch, heads_kv), got (2, 3)"},
      // k and v have kv heads only.
      {&Options::k_descale, s.view({2, 4}), "k_descale",
       "expected shape (2, 2) (batch, heads_kv), got (2, 4)"},
      {&Options::v_descale, s.view({1, 2}), "v_descale",
       "expected shape (2, 2) (batch, heads_kv), got (1, 2)"},
  };
  for (const auto& c : cases) {
    Attention a = fp8_attention();
    a.options.*c.option = &c.tensor;
    EXPECT_TRUE(ForwardRejected(a, c.name, c.message));
  }
}

TEST(Fp8Args, BlockOptions) {
  Attention a = fp8_attention();
  Scales s;
  Tensor per_block = s.view({2, 2, 2});
  a.options.q_descale = &per_block;
  EXPECT_TRUE(ForwardRejected(a, "descale_block_q", "must be > 0 with a rank-3 (per-block) "
                                                    "q_descale, got 0"));
  a.options.descale_block_q = 1;  // seqlen_q 3: three blocks needed, two given
  EXPECT_TRUE(ForwardRejected(a, "q_descale", "expected shape (2, >= 3, 4) (batch, num_blocks, "
                                              "heads_q) or (2, >= 3, 2) (batch, num_blocks, "
                                              "heads_kv), got (2, 2, 2); num_blocks >= "
                                              "ceil(seqlen_q 3 / descale_block_q 1)"));
  a.options.descale_block_q = 2;
  ASSERT_TRUE(a.forward().is_ok()) << a.forward().message();

  Tensor per_kv_head = s.view({2, 2});
  a.options.q_descale = &per_kv_head;
  EXPECT_TRUE(ForwardRejected(a, "descale_block_q", "is 2, but q_descale is not rank 3"));
  a.options.q_descale = nullptr;
  a.options.descale_block_q = 0;
  a.options.descale_block_kv = 128;
  a.options.k_descale = &per_kv_head;
  EXPECT_TRUE(ForwardRejected(a, "descale_block_kv", "is 128, but neither k_descale nor "
                                                     "v_descale is rank 3"));
  a.options.descale_block_kv = -1;
  EXPECT_TRUE(ForwardRejected(a, "descale_block_kv", "must be >= 0 (0 = no per-block "
                                                     "descales), got -1"));
}

TEST(Fp8Args, VarlenBlocksCountTheLongestSequence) {
  Attention a = fp8_attention();
  Scales s;
  std::vector<int32_t> cu{0, 2, 6};  // 6 = batch · seqlen_q: the fixture's rows, two sequences
  Tensor cu_q = make_tensor(cu.data(), DType::i32, {3});
  std::vector<int32_t> cu_k_values{0, 9, 10};
  Tensor cu_k = make_tensor(cu_k_values.data(), DType::i32, {3});
  for (Buffer* b : {&a.q, &a.k, &a.v, &a.out}) {  // (total_tokens, heads, headdim)
    Tensor& t = b->tensor;
    t = make_tensor(t.data, static_cast<DType>(t.dtype), {t.shape[0] * t.shape[1], t.shape[2],
                                                          t.shape[3]});
  }
  a.lse.make(DType::f32, {4, 6});
  a.options.cu_seqlens_q = &cu_q;
  a.options.cu_seqlens_k = &cu_k;
  a.options.max_seqlen_q = 4;
  a.options.max_seqlen_k = 9;
  Tensor two_blocks = s.view({2, 2, 2});
  a.options.v_descale = &two_blocks;
  a.options.descale_block_kv = 4;
  EXPECT_TRUE(ForwardRejected(a, "v_descale", "ceil(max_seqlen_k 9 / descale_block_kv 4)"));
  a.options.descale_block_kv = 5;
  EXPECT_TRUE(a.forward().is_ok()) << a.forward().message();
}

TEST(Fp8Args, BackwardIsNotSupported) {
  Attention a = fp8_attention();
  a.dout.make(DType::bf16, {a.batch, a.seqlen_q, a.heads_q, a.hdim_v});
  ASSERT_TRUE(a.forward().is_ok());
  EXPECT_TRUE(BackwardRejected(a, "q", "FP8 backward is not supported", Code::not_supported));
  std::size_t bytes = 1;
  EXPECT_EQ(backward_workspace_size(a.q.tensor, a.k.tensor, a.v.tensor, a.options, &bytes).code(),
            Code::not_supported);
}

TEST(Fp8Args, WorkspaceQuery) {
  Attention a = fp8_attention();
  Scales s;
  Tensor per_kv_head = s.view({2, 2});
  a.options.q_descale = &per_kv_head;
  std::size_t bytes = 1;
  ASSERT_TRUE(forward_workspace_size(a.q.tensor, a.k.tensor, a.v.tensor, a.options, &bytes)
                  .is_ok());
  EXPECT_EQ(bytes, 0u);  // the CPU's dequantized copies are its own
}

// On a GPU a block of keys holds whole kernel tiles (kFp8KeyBlock keys): one scale per tile.
TEST(Fp8Args, GpuKeyBlocksAreWholeTiles) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the GPU's rule is not reached";
  Attention a = fp8_attention();
  Scales s;
  for (Buffer* b : {&a.q, &a.k, &a.v, &a.out, &a.lse}) b->tensor.device = HFA_CUDA;
  Tensor per_block = make_tensor(s.values.data(), DType::f32, {2, 1, 2}, {}, Device::cuda());
  a.options.k_descale = &per_block;
  a.options.descale_block_kv = 64;  // never launched: rejected first
  EXPECT_TRUE(ForwardRejected(a, "descale_block_kv", "64 is not a multiple of 128",
                              Code::not_supported));
}

TEST(Fp8Args, CAbiCarriesTheNewFields) {
  static_assert(offsetof(hfa_options, q_descale) > offsetof(hfa_options, dsinks));
  static_assert(offsetof(hfa_options, descale_block_kv) > offsetof(hfa_options, v_descale));
  const hfa_options defaults = hfa_default_options();
  EXPECT_EQ(defaults.q_descale, nullptr);
  EXPECT_EQ(defaults.k_descale, nullptr);
  EXPECT_EQ(defaults.v_descale, nullptr);
  EXPECT_EQ(defaults.descale_block_q, 0);
  EXPECT_EQ(defaults.descale_block_kv, 0);

  Attention a = fp8_attention();
  Scales s;
  Tensor per_tensor = s.view({1}), per_block = s.view({2, 5, 2});
  a.options.q_descale = &per_tensor;
  a.options.k_descale = &per_block;
  a.options.v_descale = &per_tensor;
  a.options.descale_block_q = 0;
  a.options.descale_block_kv = 1;
  const hfa_options c = to_c(a.options);
  EXPECT_EQ(c.q_descale, &per_tensor);
  EXPECT_EQ(c.k_descale, &per_block);
  EXPECT_EQ(c.v_descale, &per_tensor);
  EXPECT_EQ(c.descale_block_kv, 1);

  // The C call gives the C++ call's results.
  ASSERT_TRUE(a.forward().is_ok()) << a.forward().message();
  const std::vector<float> cpp_out = a.out.data;
  a.poison_outputs();
  ASSERT_EQ(hfa_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, &a.lse.tensor, &c),
            HFA_SUCCESS);
  EXPECT_EQ(0, std::memcmp(cpp_out.data(), a.out.data.data(), cpp_out.size() * sizeof(float)));
}

}  // namespace
}  // namespace hfa::test
