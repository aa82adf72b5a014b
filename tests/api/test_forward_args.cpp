// One test per class of rejected forward argument: the status, the argument named first in the
// message, and outputs left as they were.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "fixture.hpp"

namespace hfa::test {
namespace {

TEST(ForwardArgs, ValidCallSucceeds) {
  Attention a;
  ASSERT_TRUE(a.forward().is_ok()) << a.forward().message();
  EXPECT_FALSE(a.out.untouched());
}

TEST(ForwardArgs, NullDataWithElements) {
  Attention a;
  a.k.tensor.data = nullptr;
  EXPECT_TRUE(ForwardRejected(a, "k", "null"));
  a = Attention{};
  a.out.tensor.data = nullptr;
  EXPECT_TRUE(ForwardRejected(a, "out", "null"));
}

// Elements are loaded as their type: a pointer off its dtype's alignment is named, not read.
TEST(ForwardArgs, MisalignedData) {
  Attention a;
  a.k.tensor.data = reinterpret_cast<unsigned char*>(a.k.data.data()) + 2;
  EXPECT_TRUE(ForwardRejected(a, "k", "is not aligned to its dtype's size (4 bytes)"));
  Attention b;
  b.dtype = DType::bf16;
  b.allocate();
  b.out.tensor.data = reinterpret_cast<unsigned char*>(b.out.data.data()) + 1;
  EXPECT_TRUE(ForwardRejected(b, "out", "(2 bytes)"));
}

TEST(ForwardArgs, WrongRank) {
  Attention a;
  a.q.tensor.rank = 3;
  EXPECT_TRUE(ForwardRejected(a, "q", "expected rank 4"));
  a = Attention{};
  a.v.tensor.rank = 5;
  EXPECT_TRUE(ForwardRejected(a, "v", "expected rank 4"));
}

TEST(ForwardArgs, MismatchedBatch) {
  Attention a;
  a.k.tensor.shape[0] = 1;
  EXPECT_TRUE(ForwardRejected(a, "k", "expected batch 2 (as q), got 1"));
}

TEST(ForwardArgs, MismatchedSeqlen) {
  Attention a;
  a.v.tensor.shape[1] = 4;
  EXPECT_TRUE(ForwardRejected(a, "v", "expected seqlen 5 (as k), got 4"));
  a = Attention{};
  a.out.tensor.shape[1] = 2;
  EXPECT_TRUE(ForwardRejected(a, "out", "expected seqlen 3 (as q), got 2"));
}

TEST(ForwardArgs, MismatchedHeads) {
  Attention a;
  a.v.tensor.shape[2] = 1;
  EXPECT_TRUE(ForwardRejected(a, "v", "expected heads 2 (as k), got 1"));
  a = Attention{};
  a.out.tensor.shape[2] = 2;
  EXPECT_TRUE(ForwardRejected(a, "out", "expected heads 4 (as q), got 2"));
}

TEST(ForwardArgs, MismatchedHeadDim) {
  Attention a;
  a.k.tensor.shape[3] = 128;  // still a supported size: the mismatch is the fault
  EXPECT_TRUE(ForwardRejected(a, "k", "expected headdim 64 (as q), got 128"));
  a = Attention{};
  a.out.tensor.shape[3] = 128;
  EXPECT_TRUE(ForwardRejected(a, "out", "expected headdim 64 (as v), got 128"));
}

TEST(ForwardArgs, HeadsNotAMultiple) {
  Attention a;
  a.heads_q = 3;
  a.allocate();
  EXPECT_TRUE(ForwardRejected(a, "k", "heads 2 must divide q's heads 3"));
  a.heads_kv = 0;
  a.allocate();
  EXPECT_TRUE(ForwardRejected(a, "k", "heads must be at least 1"));
}

TEST(ForwardArgs, UnsupportedHeadDim) {
  Attention a;
  a.hdim = 80;
  a.allocate();
  EXPECT_TRUE(ForwardRejected(a, "q", "headdim 80 is not supported"));
  a = Attention{};
  a.hdim_v = 32;
  a.allocate();
  EXPECT_TRUE(ForwardRejected(a, "v", "headdim 32 is not supported"));
}

TEST(ForwardArgs, MismatchedDtype) {
  Attention a;
  a.k.tensor.dtype = HFA_BF16;
  EXPECT_TRUE(ForwardRejected(a, "k", "expected dtype f32 (as q), got bf16"));
  a = Attention{};
  a.out.tensor.dtype = HFA_F16;
  EXPECT_TRUE(ForwardRejected(a, "out", "expected dtype f32 (as q), got f16"));
  // 16-bit inputs may also write an f32 out (a partial result, test_partials.cpp).
  Attention b;
  b.dtype = DType::bf16;
  b.allocate();
  b.out.tensor.dtype = HFA_F16;
  EXPECT_TRUE(ForwardRejected(b, "out", "expected dtype bf16 (as q) or f32, got f16"));
}

TEST(ForwardArgs, UnsupportedDtype) {
  Attention a;
  for (Buffer* b : {&a.q, &a.k, &a.v, &a.out}) b->tensor.dtype = HFA_I32;
  EXPECT_TRUE(ForwardRejected(a, "q", "dtype i32 is not supported"));
  for (Buffer* b : {&a.q, &a.k, &a.v, &a.out}) b->tensor.dtype = static_cast<hfa_dtype>(42);
  EXPECT_TRUE(ForwardRejected(a, "q", "unknown dtype 42"));
}

TEST(ForwardArgs, NonUnitLastStride) {
  Attention a;
  a.q.tensor.stride[3] = 2;
  EXPECT_TRUE(ForwardRejected(a, "q", "unit stride"));
}

TEST(ForwardArgs, NegativeStride) {
  Attention a;
  a.v.tensor.stride[1] = -a.v.tensor.stride[1];
  EXPECT_TRUE(ForwardRejected(a, "v", "negative stride"));
}

TEST(ForwardArgs, NegativeExtent) {
  Attention a;
  a.q.tensor.shape[1] = -1;
  EXPECT_TRUE(ForwardRejected(a, "q", "negative extent"));
}

TEST(ForwardArgs, OverlappingOutput) {
  Attention a;
  a.out.tensor.stride[1] = 0;
  EXPECT_TRUE(ForwardRejected(a, "out", "zero stride"));
}

TEST(ForwardArgs, StridesOverflow) {
  Attention a;
  a.k.tensor.stride[0] = std::numeric_limits<int64_t>::max() - 10;
  EXPECT_TRUE(ForwardRejected(a, "k", "overflows int64"));
}

TEST(ForwardArgs, BadWindow) {
  Attention a;
  a.options.window_left = -2;
  EXPECT_TRUE(ForwardRejected(a, "window_left", "must be >= -1"));
  a.options.window_left = 3;
  a.options.window_right = -5;
  EXPECT_TRUE(ForwardRejected(a, "window_right", "must be >= -1"));
}

TEST(ForwardArgs, BadScale) {
  Attention a;
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity(), -0.5f}) {
    a.options.softmax_scale = bad;
    EXPECT_TRUE(ForwardRejected(a, "softmax_scale", "must be finite"));
  }
}

TEST(ForwardArgs, BadSoftcap) {
  Attention a;
  for (float bad : {std::nanf(""), -1.0f, std::numeric_limits<float>::infinity()}) {
    a.options.softcap = bad;
    EXPECT_TRUE(ForwardRejected(a, "softcap", "must be finite"));
  }
}

TEST(ForwardArgs, NegativeSmMargin) {
  Attention a;
  a.options.sm_margin = -1;
  EXPECT_TRUE(ForwardRejected(a, "sm_margin", "must be >= 0 (SMs left free; 0 = use every SM), got -1"));
  std::size_t bytes = 0;
  EXPECT_TRUE(Invalid(forward_workspace_size(a.q.tensor, a.k.tensor, a.v.tensor, a.options, &bytes),
                      "sm_margin"));
}

// The CPU has no SMs to leave free: any margin is accepted and changes nothing, bit for bit.
TEST(ForwardArgs, SmMarginIgnoredOnTheCpu) {
  Attention plain;
  ASSERT_TRUE(plain.forward().is_ok());
  Attention margin;
  margin.options.sm_margin = 1000;
  ASSERT_TRUE(margin.forward().is_ok()) << margin.forward().message();
  EXPECT_EQ(margin.out.data, plain.out.data);
  EXPECT_EQ(0, std::memcmp(margin.lse.data.data(), plain.lse.data.data(), plain.lse.data.size() * 4));
}

TEST(ForwardArgs, LseNotFp32) {
  Attention a;
  a.lse.tensor.dtype = HFA_BF16;
  EXPECT_TRUE(ForwardRejected(a, "lse", "expected dtype f32, got bf16"));
}

TEST(ForwardArgs, LseWrongShape) {
  Attention a;
  std::swap(a.lse.tensor.shape[1], a.lse.tensor.shape[2]);  // (batch, seqlen, heads)
  EXPECT_TRUE(ForwardRejected(a, "lse", "expected shape (2, 4, 3)"));
  a = Attention{};
  a.lse.tensor.rank = 4;
  EXPECT_TRUE(ForwardRejected(a, "lse", "expected rank 3"));
}

// A one-element dim's stride is used by no offset, but backends step in bytes: one that
// overflows there is rejected by name (a framework's is never that large).
TEST(ForwardArgs, StrideOverflowingInBytes) {
  Attention a;
  a.batch = 1;
  a.allocate();
  a.q.tensor.stride[0] = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_TRUE(ForwardRejected(a, "q", "overflows int64 in bytes"));
}

// An lse slice (padding between batches or heads) is taken; its rows must be unit-stride.
TEST(ForwardArgs, LseRowsNotUnitStride) {
  Attention a;
  a.lse.tensor.stride[2] = 2;
  EXPECT_TRUE(ForwardRejected(a, "lse", "the last dim must have unit stride, got stride 2"));
}

TEST(ForwardArgs, MixedDevices) {
  Attention a;
  a.v.tensor.device = HFA_CUDA;
  EXPECT_TRUE(ForwardRejected(a, "v", "on cuda:0, expected cpu (as q)"));
  a = Attention{};
  a.lse.tensor.device = HFA_CUDA;
  EXPECT_TRUE(ForwardRejected(a, "lse", "on cuda:0, expected cpu"));
}

TEST(ForwardArgs, CpuDeviceIndexIsIgnored) {
  Attention a;
  a.k.tensor.device_index = -1;  // PyTorch's CPU index
  EXPECT_TRUE(a.forward().is_ok());
}

TEST(ForwardArgs, UnknownDeviceKind) {
  Attention a;
  a.q.tensor.device = static_cast<hfa_device_kind>(7);
  EXPECT_TRUE(ForwardRejected(a, "q", "unknown device kind 7"));
}

TEST(ForwardArgs, SeqlenExceedsInt32) {
  Attention a;
  a.k.tensor.shape[1] = int64_t{1} << 32;  // never read: rejected before
  a.v.tensor.shape[1] = int64_t{1} << 32;
  EXPECT_TRUE(ForwardRejected(a, "k", "exceeds int32"));
}

}  // namespace
}  // namespace hfa::test
