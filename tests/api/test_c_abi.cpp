// The C ABI is glue over the C++ API: same results, plus a per-thread last-error message.
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>

#include "fixture.hpp"
#include "hfa/hfa.h"

namespace hfa::test {
namespace {

TEST(CAbi, ForwardEqualsCpp) {
  Attention cpp;
  ASSERT_TRUE(cpp.forward().is_ok());
  Attention c;
  const hfa_options options = hfa_default_options();
  ASSERT_EQ(hfa_forward(&c.q.tensor, &c.k.tensor, &c.v.tensor, &c.out.tensor, &c.lse.tensor, &options),
            HFA_SUCCESS);
  EXPECT_EQ(c.out.data, cpp.out.data);
  EXPECT_EQ(0, std::memcmp(c.lse.data.data(), cpp.lse.data.data(), c.lse.data.size() * 4));
}

TEST(CAbi, NullOptionsMeanDefaults) {
  Attention c;
  ASSERT_EQ(hfa_forward(&c.q.tensor, &c.k.tensor, &c.v.tensor, &c.out.tensor, nullptr, nullptr),
            HFA_SUCCESS);
}

TEST(CAbi, OptionsRoundTrip) {
  Options options;
  options.softmax_scale = 0.25f;
  options.causal = true;
  options.window_left = 7;
  options.softcap = 30.0f;
  options.max_seqlen_q = 9;
  options.deterministic = true;
  options.sm_margin = 8;
  const hfa_options c = to_c(options);
  EXPECT_EQ(c.has_softmax_scale, 1);
  EXPECT_EQ(c.softmax_scale, 0.25f);
  EXPECT_EQ(c.causal, 1);
  EXPECT_EQ(c.window_left, 7);
  EXPECT_EQ(c.window_right, -1);
  EXPECT_EQ(c.softcap, 30.0f);
  EXPECT_EQ(c.max_seqlen_q, 9);
  EXPECT_EQ(c.deterministic, 1);
  EXPECT_EQ(c.sm_margin, 8);

  const hfa_options defaults = hfa_default_options();
  EXPECT_EQ(defaults.has_softmax_scale, 0);
  EXPECT_EQ(defaults.window_left, -1);
  EXPECT_EQ(defaults.window_right, -1);
  EXPECT_EQ(defaults.cu_seqlens_q, nullptr);
  EXPECT_EQ(defaults.sm_margin, 0);
  EXPECT_EQ(hfa_default_kvcache_options().sm_margin, 0);
  KVCacheOptions kv;
  kv.sm_margin = 3;
  EXPECT_EQ(to_c(kv).sm_margin, 3);
  EXPECT_EQ(to_c(Options{}).window_right, -1);
}

// The field appended last reaches the C++ options (from_c): a bad value is named.
TEST(CAbi, SmMarginReachesTheCall) {
  Attention a;
  hfa_options options = hfa_default_options();
  options.sm_margin = -2;
  EXPECT_EQ(hfa_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, nullptr, &options),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "sm_margin: must be >= 0 (SMs left free; 0 = use every SM), got -2");
  options.sm_margin = 2;  // the CPU ignores it
  EXPECT_EQ(hfa_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, nullptr, &options),
            HFA_SUCCESS);
}

TEST(CAbi, LastErrorSetThenCleared) {
  Attention a;
  a.k.tensor.shape[3] = 128;
  EXPECT_EQ(hfa_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, nullptr, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "k: expected headdim 64 (as q), got 128");
  a.k.tensor.shape[3] = 64;
  EXPECT_EQ(hfa_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, nullptr, nullptr),
            HFA_SUCCESS);
  EXPECT_STREQ(hfa_last_error(), "");
}

TEST(CAbi, LastErrorIsPerThread) {
  Attention a;
  EXPECT_EQ(hfa_forward(nullptr, &a.k.tensor, &a.v.tensor, &a.out.tensor, nullptr, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  std::string other = "unset";
  std::thread([&] { other = hfa_last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_STREQ(hfa_last_error(), "q: is null");
}

TEST(CAbi, NullTensorsNamed) {
  Attention a;
  EXPECT_EQ(hfa_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, nullptr, nullptr, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "out: is null");
  EXPECT_EQ(hfa_backward(&a.dout.tensor, &a.q.tensor, nullptr, &a.v.tensor, &a.out.tensor,
                         &a.lse.tensor, &a.dq.tensor, &a.dk.tensor, &a.dv.tensor, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "k: is null");
  size_t bytes = 0;
  EXPECT_EQ(hfa_forward_workspace_size(&a.q.tensor, &a.k.tensor, &a.v.tensor, nullptr, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "bytes: is null");
  EXPECT_EQ(hfa_backward_workspace_size(&a.q.tensor, &a.k.tensor, &a.v.tensor, nullptr, &bytes),
            HFA_SUCCESS);
}

// A C caller may put any int32 in an enum field; C++ sees the same (the enums' fixed type is
// int32_t there), and hfa names the unknown value.
TEST(CAbi, EnumFieldsTakeAnyInt32) {
  static_assert(std::is_same_v<std::underlying_type_t<hfa_dtype>, int32_t>);
  static_assert(std::is_same_v<std::underlying_type_t<hfa_device_kind>, int32_t>);
  Attention a;
  a.k.tensor.dtype = static_cast<hfa_dtype>(-5);
  EXPECT_EQ(hfa_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, nullptr, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "k: unknown dtype -5");
  a = Attention{};
  a.v.tensor.device = static_cast<hfa_device_kind>(-1);
  EXPECT_EQ(hfa_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, nullptr, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "v: unknown device kind -1");
  EXPECT_TRUE(a.forward_outputs_untouched());
}

TEST(CAbi, StatusNamesAndVersion) {
  EXPECT_STREQ(hfa_status_name(HFA_SUCCESS), "HFA_SUCCESS");
  EXPECT_STREQ(hfa_status_name(HFA_ERROR_INVALID_ARGUMENT), "HFA_ERROR_INVALID_ARGUMENT");
  EXPECT_STREQ(hfa_status_name(HFA_ERROR_NOT_SUPPORTED), "HFA_ERROR_NOT_SUPPORTED");
  EXPECT_STREQ(hfa_status_name(HFA_ERROR_CUDA), "HFA_ERROR_CUDA");
  EXPECT_STREQ(hfa_status_name(HFA_ERROR_INTERNAL), "HFA_ERROR_INTERNAL");
  EXPECT_STREQ(hfa_status_name(static_cast<hfa_status>(99)), "HFA_UNKNOWN_STATUS");
  EXPECT_STREQ(hfa_version(), HFA_VERSION_STRING);
  EXPECT_GT(std::strlen(hfa_version()), 0u);
}

TEST(Tensors, MakeTensorIsRowMajor) {
  float x = 0;
  const Tensor t = make_tensor(&x, DType::bf16, {2, 3, 4, 64});
  EXPECT_EQ(t.rank, 4);
  EXPECT_EQ(t.stride[0], 3 * 4 * 64);
  EXPECT_EQ(t.stride[1], 4 * 64);
  EXPECT_EQ(t.stride[2], 64);
  EXPECT_EQ(t.stride[3], 1);
  EXPECT_EQ(t.dtype, HFA_BF16);
  EXPECT_EQ(t.device, HFA_CPU);
  const Tensor s = make_tensor(&x, DType::f32, {2, 64}, {128, 1}, Device::cuda(1));
  EXPECT_EQ(s.stride[0], 128);
  EXPECT_EQ(s.device, HFA_CUDA);
  EXPECT_EQ(s.device_index, 1);
  EXPECT_THROW(make_tensor(&x, DType::f32, {2, 64}, {1}), std::invalid_argument);
  EXPECT_THROW(make_tensor(&x, DType::f32, {1, 1, 1, 1, 1}), std::invalid_argument);
}

TEST(Tensors, DtypeSizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::e5m2), 1u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  EXPECT_STREQ(dtype_name(DType::bf16), "bf16");
  EXPECT_STREQ(dtype_name(DType::e5m2), "e5m2");
  EXPECT_STREQ(dtype_name(static_cast<DType>(77)), "unknown");
}

}  // namespace
}  // namespace hfa::test
