// hfa::merge_partials / hfa_merge_partials on the CPU against a float64 merge: N = 1 to
// HFA_MAX_MERGE_PARTIALS partials of mixed dtypes, fixed length and varlen, odd sizes, strided
// tensors, f32 / bf16 / f16 out, rows seen by no partial (0 and −inf, never NaN) and partials
// whose unseen rows hold NaN (never read), far-apart LSEs, a NaN LSE, in-place accumulation
// (also into a window of longer tensors, as the ring passes them);
// then every bad argument, named, with nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/host_tensor.hpp"
#include "common/merge_case.hpp"
#include "hfa/hfa.h"
#include "hfa/hfa.hpp"

namespace hfa::test {
namespace {

const MergeShape kFixed{false, 2, 5, 3, 37};
const MergeShape kVarlen{true, 1, 11, 2, 64};
const std::vector<DType> kMixed = {DType::f32, DType::bf16, DType::f16};

std::string label(const MergeShape& shape, int n, DType out_dtype, int64_t padding) {
  return std::string(shape.varlen ? "varlen" : "fixed") + " n=" + std::to_string(n) +
         " out=" + dtype_name(out_dtype) + " padding=" + std::to_string(padding);
}

Status merge(MergeCase& c, bool with_lse = true) {
  const Tensor out = c.out.view(), lse = c.lse.view();
  return merge_partials(c.out_pointers(), c.lse_pointers(), out, with_lse ? &lse : nullptr);
}

TEST(MergePartials, MatchesFloat64ForEveryCountLayoutAndDtype) {
  for (const MergeShape& shape : {kFixed, kVarlen})
    for (int n = 1; n <= 8; ++n)
      for (DType out_dtype : {DType::f32, DType::bf16, DType::f16})
        for (int64_t padding : {0, 3}) {
          MergeCase c(shape, n, out_dtype, kMixed, 10 * n + int(out_dtype), padding);
          ASSERT_TRUE(merge(c).is_ok());
          expect_merged(c.reference(), c.out, &c.lse, n, label(shape, n, out_dtype, padding));
        }
}

TEST(MergePartials, TakesTheMostPartials) {
  MergeCase c(kFixed, HFA_MAX_MERGE_PARTIALS, DType::f32, kMixed, 5);
  ASSERT_TRUE(merge(c).is_ok());
  expect_merged(c.reference(), c.out, &c.lse, HFA_MAX_MERGE_PARTIALS, "16 partials");
}

TEST(MergePartials, RowsNoPartialSeesAreZeroAndMinusInfinity) {
  MergeCase c(kFixed, 3, DType::bf16, kMixed, 2);
  ASSERT_TRUE(merge(c).is_ok());
  EXPECT_EQ(c.lse.get(c.shape().lse_index(0)), -MergeCase::kInf);
  for (int64_t col = 0; col < kFixed.hdim; ++col) {
    const double v = c.out.get(kFixed.out_index(0, col));
    EXPECT_EQ(v, 0.0) << col;
    EXPECT_FALSE(std::signbit(v)) << col;
  }
}

TEST(MergePartials, OnePartialIsItselfBitForBit) {
  MergeCase c(kFixed, 1, DType::f32, {DType::f32}, 9);
  ASSERT_TRUE(merge(c).is_ok());
  for (int64_t r = 0; r < kFixed.rows(); ++r) {
    const double l = c.lses[0].get(kFixed.lse_index(r));
    EXPECT_EQ(c.lse.get(kFixed.lse_index(r)), l) << r;
    for (int64_t col = 0; col < kFixed.hdim; ++col) {
      const double want = l == -MergeCase::kInf ? 0.0 : c.outs[0].get(kFixed.out_index(r, col));
      EXPECT_EQ(c.out.get(kFixed.out_index(r, col)), want) << r << ", " << col;
    }
  }
}

TEST(MergePartials, ANanLsePoisonsItsRowOnly) {
  MergeCase c(kVarlen, 4, DType::f32, kMixed, 3, 0, /*nan_lse=*/true);
  ASSERT_TRUE(merge(c).is_ok());
  expect_merged(c.reference(), c.out, &c.lse, 4, "NaN LSE");
  EXPECT_TRUE(std::isnan(c.lse.get(kVarlen.lse_index(3))));
  EXPECT_TRUE(std::isnan(c.out.get(kVarlen.out_index(3, 0))));
}

TEST(MergePartials, LseIsOptional) {
  MergeCase c(kVarlen, 2, DType::f16, kMixed, 4);
  ASSERT_TRUE(merge(c, /*with_lse=*/false).is_ok());
  expect_merged(c.reference(), c.out, nullptr, 2, "no lse");
  for (int64_t r = 0; r < c.lse.numel(); ++r) ASSERT_TRUE(std::isnan(c.lse.get(r))) << "written";
}

// A ring step: the fp32 accumulator (outs[0], lses[0]) merges the next partials into itself.
TEST(MergePartials, InPlaceIntoTheFirstPartial) {
  for (int n : {2, 5}) {
    MergeCase c(kFixed, n, DType::f32, {DType::f32, DType::bf16}, 20 + n, /*padding=*/2);
    const MergeReference want = c.reference();
    const Tensor out = c.out_views[0], lse = c.lse_views[0];
    ASSERT_TRUE(merge_partials(c.out_pointers(), c.lse_pointers(), out, &lse).is_ok());
    expect_merged(want, c.outs[0], &c.lses[0], n, "in place n=" + std::to_string(n));
  }
  // Into a later partial too: every output element is read before it is written.
  MergeCase c(kVarlen, 3, DType::f32, {DType::f32}, 31);
  const MergeReference want = c.reference();
  ASSERT_TRUE(
      merge_partials(c.out_pointers(), c.lse_pointers(), c.out_views[2], &c.lse_views[1]).is_ok());
  expect_merged(want, c.outs[2], &c.lses[1], 3, "in place into outs[2], lses[1]");
}

// The ring's views (ring.py: out[:, rows], lse[:, :, rows]): the accumulator is a window of
// longer tensors, not contiguous, merged in place; nothing outside the window is written.
TEST(MergePartials, InPlaceIntoAWindowOfLongerTensors) {
  for (const MergeShape& shape : {kFixed, kVarlen})
    for (int n : {2, 4}) {
      MergeCase c(shape, n, DType::f32, {DType::f32, DType::bf16}, 40 + n);
      RingWindow ring(c, shape.seqlen + 6, 4, 3 * n);
      const MergeReference want = c.reference();
      std::vector<Tensor> outs = c.out_views, lses = c.lse_views;
      outs[0] = ring.out_window(ring.out.view());
      lses[0] = ring.lse_window(ring.lse.view());
      std::vector<const Tensor*> out_ptrs, lse_ptrs;
      for (int k = 0; k < n; ++k) out_ptrs.push_back(&outs[k]), lse_ptrs.push_back(&lses[k]);
      ASSERT_TRUE(merge_partials(out_ptrs, lse_ptrs, outs[0], &lses[0]).is_ok());
      ring.expect_merged_in_place(want, ring.out, ring.lse, n,
                                  label(shape, n, DType::f32, 0) + " window");
    }
}

TEST(MergePartials, NoRowsIsANoOpAndNoColumnsStillWritesTheLse) {
  MergeShape empty = kFixed;
  empty.seqlen = 0;
  MergeCase none(empty, 2, DType::f32, kMixed, 6);
  EXPECT_TRUE(merge(none).is_ok());
  MergeShape narrow = kFixed;
  narrow.hdim = 0;
  MergeCase c(narrow, 3, DType::bf16, kMixed, 7);
  ASSERT_TRUE(merge(c).is_ok());
  expect_merged(c.reference(), c.out, &c.lse, 3, "hdim 0");
}

TEST(MergePartials, CAbiEqualsCpp) {
  MergeCase cpp(kFixed, 3, DType::bf16, kMixed, 8), c(kFixed, 3, DType::bf16, kMixed, 8);
  ASSERT_TRUE(merge(cpp).is_ok());
  const auto outs = c.out_pointers(), lses = c.lse_pointers();
  const Tensor out = c.out.view(), lse = c.lse.view();
  ASSERT_EQ(hfa_merge_partials(outs.data(), lses.data(), 3, &out, &lse, nullptr), HFA_SUCCESS);
  EXPECT_STREQ(hfa_last_error(), "");
  EXPECT_EQ(0, std::memcmp(c.out.data(), cpp.out.data(), c.out.storage_bytes()));
  EXPECT_EQ(0, std::memcmp(c.lse.data(), cpp.lse.data(), c.lse.storage_bytes()));
}

// --- rejections ---------------------------------------------------------------------------------

// A well-formed call to break one argument at a time; outputs keep their NaN until written.
struct Call {
  MergeCase c{kFixed, 2, DType::bf16, kMixed, 11};
  std::vector<Tensor> outs = c.out_views, lses = c.lse_views;
  Tensor out = c.out.view(), lse = c.lse.view();
  std::vector<const Tensor*> out_ptrs, lse_ptrs;
  const Tensor* lse_arg = &lse;

  void point() {
    out_ptrs.clear(), lse_ptrs.clear();
    for (const Tensor& t : outs) out_ptrs.push_back(&t);
    for (const Tensor& t : lses) lse_ptrs.push_back(&t);
  }
  Status run() {
    point();
    return merge_partials(out_ptrs, lse_ptrs, out, lse_arg);
  }
  bool untouched() const {
    for (const HostTensor* t : {&c.out, &c.lse})
      for (int64_t e = 0; e < t->numel(); ++e)
        if (!std::isnan(t->get(e))) return false;
    return true;
  }
};

void expect_rejected(const std::function<void(Call&)>& breaks, Code code,
                     const std::string& message) {
  Call call;
  breaks(call);
  const Status s = call.run();
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_EQ(s.message().rfind(message, 0), 0u) << "want: " << message << "\ngot:  " << s.message();
  EXPECT_TRUE(call.untouched()) << message;
}

TEST(MergePartialsArgs, TheWellFormedCallRuns) {
  Call call;
  EXPECT_TRUE(call.run().is_ok());
  EXPECT_FALSE(call.untouched());
}

TEST(MergePartialsArgs, EachBadArgumentIsNamed) {
  const Code bad = Code::invalid_argument;
  expect_rejected([](Call& c) { c.outs.clear(), c.lses.clear(); }, bad,
                  "outs: expected 1 to 16 partial outputs (HFA_MAX_MERGE_PARTIALS), got 0");
  expect_rejected(
      [](Call& c) {
        c.outs.resize(17, c.outs[0]);
        c.lses.resize(17, c.lses[0]);
      },
      bad, "outs: expected 1 to 16 partial outputs (HFA_MAX_MERGE_PARTIALS), got 17");
  expect_rejected([](Call& c) { c.lses.pop_back(); }, bad,
                  "lses: expected 2 LSEs (one per partial output), got 1");
  expect_rejected([](Call& c) { c.out.rank = 2; }, bad,
                  "out: expected rank 4 (batch, seqlen_q, heads, hdim_v) or 3 (total_q, heads, "
                  "hdim_v), got 2");
  expect_rejected([](Call& c) { c.out.dtype = HFA_E4M3; }, bad,
                  "out: expected dtype f32, bf16 or f16, got e4m3");
  expect_rejected([](Call& c) { c.out.stride[3] = 2; }, bad,
                  "out: the last dim must have unit stride");
  expect_rejected([](Call& c) { c.out.stride[1] = 0; }, bad, "out: zero stride in dim 1");
  expect_rejected([](Call& c) { c.out.data = nullptr; }, bad, "out: data is null");
  expect_rejected([](Call& c) { c.out.shape[2] = -1; }, bad, "out: negative extent");
  expect_rejected([](Call& c) { c.lse.dtype = HFA_BF16; }, bad,
                  "lse: expected dtype f32, got bf16");
  expect_rejected([](Call& c) { c.lse.stride[2] = 0; }, bad, "lse: zero stride in dim 2");
  expect_rejected([](Call& c) { c.lse.rank = 4; }, bad,
                  "lse: expected rank 3 (batch, heads, seqlen_q)");
  expect_rejected([](Call& c) { std::swap(c.lse.shape[1], c.lse.shape[2]); }, bad,
                  "lse: expected shape (2, 3, 5) (batch, heads, seqlen_q) of out's (2, 5, 3, 37), "
                  "got (2, 5, 3)");
  expect_rejected([](Call& c) { c.outs[1].dtype = HFA_I32; }, bad,
                  "outs[1]: expected dtype f32, bf16 or f16, got i32");
  expect_rejected([](Call& c) { c.outs[1].rank = 3; }, bad,
                  "outs[1]: expected rank 4 (batch, seqlen_q, heads, hdim_v)");
  expect_rejected([](Call& c) { c.outs[0].shape[3] = 36; }, bad,
                  "outs[0]: expected shape (2, 5, 3, 37) (as out), got (2, 5, 3, 36)");
  expect_rejected([](Call& c) { c.outs[1].device = HFA_CUDA; }, bad,
                  "outs[1]: on cuda:0, expected cpu (as out)");
  expect_rejected([](Call& c) { c.outs[1].stride[3] = 0; }, bad,
                  "outs[1]: the last dim must have unit stride");
  expect_rejected([](Call& c) { c.lses[0].dtype = HFA_F16; }, bad,
                  "lses[0]: expected dtype f32, got f16");
  expect_rejected([](Call& c) { c.lses[1].shape[0] = 1; }, bad,
                  "lses[1]: expected shape (2, 3, 5) (batch, heads, seqlen_q)");
  expect_rejected([](Call& c) { c.lses[1].device = HFA_CUDA; }, bad,
                  "lses[1]: on cuda:0, expected cpu (as out)");
  expect_rejected([](Call& c) { c.lses[1].stride[0] = -1; }, bad, "lses[1]: negative stride");
}

TEST(MergePartialsArgs, NullTensorsAreNamed) {
  const Code bad = Code::invalid_argument;
  Call call;
  call.point();
  auto outs = call.out_ptrs, lses = call.lse_ptrs;
  outs[1] = nullptr;
  EXPECT_EQ(merge_partials(outs, call.lse_ptrs, call.out, &call.lse).message(), "outs[1]: is null");
  lses[0] = nullptr;
  EXPECT_EQ(merge_partials(call.out_ptrs, lses, call.out, &call.lse).code(), bad);
  EXPECT_EQ(merge_partials(call.out_ptrs, lses, call.out, &call.lse).message(), "lses[0]: is null");
  EXPECT_TRUE(call.untouched());
}

// An output shares memory with no input but as the very same view (in place).
TEST(MergePartialsArgs, OverlapsAreRejected) {
  const Code bad = Code::invalid_argument;
  const std::string why =
      " (an output may be an input only as the very same view: same data, dtype, shape and "
      "strides)";
  expect_rejected(
      [](Call& c) {
        c.out = c.outs[1];  // bf16, as out
        c.out.data = static_cast<char*>(c.out.data) + 2;
      },
      bad, "out: overlaps outs[1]" + why);
  expect_rejected(
      [](Call& c) {
        c.out = c.outs[1];
        c.out.stride[0] += 1;
      },
      bad, "out: overlaps outs[1]");
  expect_rejected(
      [](Call& c) {
        c.out = c.outs[0];  // its fp32 bytes read as bf16
        c.out.dtype = HFA_BF16;
      },
      bad, "out: overlaps outs[0]");
  expect_rejected(
      [](Call& c) {
        c.lse = c.lses[1];
        c.lse.data = static_cast<float*>(c.lse.data) + 1;
      },
      bad, "lse: overlaps lses[1]");
  expect_rejected(
      [](Call& c) {
        // One row of one value each, out on the first bytes of lses[0]'s storage.
        for (Tensor* t : {&c.out, &c.outs[0], &c.outs[1]})
          t->shape[0] = t->shape[1] = t->shape[2] = t->shape[3] = 1;
        for (Tensor* t : {&c.lse, &c.lses[0], &c.lses[1]})
          t->shape[0] = t->shape[1] = t->shape[2] = 1;
        c.out.data = c.lses[0].data;
      },
      bad, "out: overlaps lses[0]");
  expect_rejected([](Call& c) { c.lse.data = c.out.data; }, bad, "lse: overlaps out");
}

TEST(MergePartialsArgs, DeviceOfOut) {
  Call call;
  for (Tensor& t : call.outs) t.device = HFA_CUDA, t.device_index = 7;
  for (Tensor& t : call.lses) t.device = HFA_CUDA, t.device_index = 7;
  call.out.device = call.lse.device = HFA_CUDA;
  call.out.device_index = call.lse.device_index = 7;
  const Status s = call.run();
  // Not supported without a GPU (or CUDA in the build); an index this process lacks otherwise.
  EXPECT_TRUE(s.code() == Code::not_supported || s.code() == Code::invalid_argument) << s.message();
  EXPECT_EQ(s.message().rfind("out: on cuda:7", 0), 0u) << s.message();
}

TEST(MergePartialsArgs, CAbiNamesItsArguments) {
  Call call;
  call.point();
  const hfa_tensor* const* outs = call.out_ptrs.data();
  const hfa_tensor* const* lses = call.lse_ptrs.data();
  EXPECT_EQ(hfa_merge_partials(nullptr, lses, 2, &call.out, &call.lse, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "outs: is null");
  EXPECT_EQ(hfa_merge_partials(outs, nullptr, 2, &call.out, &call.lse, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "lses: is null");
  for (int32_t n : {0, -1, 17}) {
    EXPECT_EQ(hfa_merge_partials(outs, lses, n, &call.out, &call.lse, nullptr),
              HFA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(hfa_last_error()),
              "num_partials: expected 1 to 16 (HFA_MAX_MERGE_PARTIALS), got " + std::to_string(n));
  }
  EXPECT_EQ(hfa_merge_partials(outs, lses, 2, nullptr, &call.lse, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "out: is null");
  EXPECT_EQ(hfa_merge_partials(outs, lses, 1, &call.out, &call.lse, nullptr), HFA_SUCCESS);
}

}  // namespace
}  // namespace hfa::test
