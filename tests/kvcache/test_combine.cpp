// combine_splits on its own: the LSE-weighted merge of partial (O, LSE) pairs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/combine_splits.hpp"

namespace hfa::detail {
namespace {

constexpr float kInf = INFINITY;

TEST(CombineSplits, MergesByLse) {
  // Two splits of a row: split 0 has weight e^1 / (e^1 + e^2), split 1 the rest.
  const float lse[] = {1.0f, 2.0f};
  const float partial[] = {1.0f, 10.0f,   // split 0, d = 2
                           3.0f, -2.0f};  // split 1
  float out[2];
  const float merged = combine_splits(lse, partial, 2, 2, 2, out);
  const double w0 = std::exp(1.0) / (std::exp(1.0) + std::exp(2.0));
  EXPECT_NEAR(merged, std::log(std::exp(1.0) + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(out[0], w0 * 1.0 + (1 - w0) * 3.0, 1e-6);
  EXPECT_NEAR(out[1], w0 * 10.0 + (1 - w0) * -2.0, 1e-5);
}

TEST(CombineSplits, EmptySplitsAreSkippedEvenWhenTheirOutputIsGarbage) {
  const float lse[] = {-kInf, 0.5f, -kInf};
  const float partial[] = {NAN, NAN, 4.0f, 5.0f, kInf, -kInf};
  float out[2];
  EXPECT_FLOAT_EQ(combine_splits(lse, partial, 2, 3, 2, out), 0.5f);
  EXPECT_FLOAT_EQ(out[0], 4.0f);
  EXPECT_FLOAT_EQ(out[1], 5.0f);
}

TEST(CombineSplits, AllEmptyGivesZeroAndMinusInfinity) {
  const float lse[] = {-kInf, -kInf};
  const float partial[] = {NAN, 1.0f, 2.0f, NAN};
  float out[2] = {7.0f, 7.0f};
  EXPECT_EQ(combine_splits(lse, partial, 2, 2, 2, out), -kInf);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
}

TEST(CombineSplits, LargeLsesDoNotOverflow) {
  const float lse[] = {1000.0f, 1000.0f};
  const float partial[] = {1.0f, 3.0f};
  float out[1];
  EXPECT_NEAR(combine_splits(lse, partial, 1, 2, 1, out), 1000.0f + std::log(2.0f), 1e-3);
  EXPECT_NEAR(out[0], 2.0f, 1e-6);
}

TEST(CombineSplits, NanSplitPoisonsTheRow) {
  const float lse[] = {-kInf, NAN, 1.0f};
  const float partial[] = {0.0f, 1.0f, 2.0f};
  float out[1];
  EXPECT_TRUE(std::isnan(combine_splits(lse, partial, 1, 3, 1, out)));
  EXPECT_TRUE(std::isnan(out[0]));
}

TEST(CombineSplits, OneSplitIsItself) {
  const float lse[] = {-3.25f};
  const float partial[] = {0.5f, -0.25f, 8.0f};
  float out[3];
  EXPECT_EQ(combine_splits(lse, partial, 3, 1, 3, out), -3.25f);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(out[c], partial[c]);
}

}  // namespace
}  // namespace hfa::detail
