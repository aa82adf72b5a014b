// FP8 E4M3 KV rows with an fp32 scale per kv-head or per (token, kv-head).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "quant/fp8_kv.hpp"
#include "quant/reference.hpp"

namespace hfa::quant {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Decoding rounds e4m3 · scale to fp32 (relative 2^-24) and the quotient x / scale was rounded
// before encoding: allow a little more than half a grid step.
constexpr double kSlack = 1e-6;

TEST(Fp8Kv, BytesPerElement) {
  EXPECT_EQ(fp8_kv_bytes_per_element(128, Fp8ScaleGranularity::per_token_kv_head), 1.03125);
  EXPECT_EQ(fp8_kv_bytes_per_element(64, Fp8ScaleGranularity::per_token_kv_head), 1.0625);
  EXPECT_EQ(fp8_kv_bytes_per_element(128, Fp8ScaleGranularity::per_kv_head), 1.0);
}

TEST(Fp8Kv, PerTokenRoundTripWithinHalfAGridStep) {
  constexpr int kD = 128;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const auto mags = test::finite_magnitudes(test::kE4M3Spec);
  for (float magnitude : {1e-30f, 1e-4f, 1.0f, 300.0f, 1e30f}) {
    std::vector<float> x(kD), y(kD);
    std::vector<uint8_t> codes(kD);
    float amax = 0;
    for (float& v : x) {
      v = magnitude * normal(rng);
      amax = std::max(amax, std::fabs(v));
    }
    const float scale = fp8_kv_quantize_row_per_token(x.data(), kD, codes.data());
    EXPECT_EQ(scale, amax / 448.0f);
    fp8_kv_dequantize_row(codes.data(), kD, scale, y.data());
    for (int i = 0; i < kD; ++i) {
      EXPECT_EQ(codes[i], test::reference_encode(test::kE4M3Spec, mags, x[i] / scale)) << x[i];
      const double ratio = static_cast<double>(x[i]) / scale;
      ASSERT_LE(std::fabs(ratio), 448 * (1 + kSlack));
      EXPECT_LE(std::fabs(static_cast<double>(x[i]) - y[i]),
                test::e4m3_half_gap(ratio) * scale * (1 + kSlack) + std::fabs(y[i]) * 0x1p-24)
          << x[i] << " → " << y[i];
    }
  }
}

TEST(Fp8Kv, PerKvHeadScaleSaturatesValuesBeyondIt) {
  const float scale = fp8_kv_scale(10.0f);  // calibrated for |x| ≤ 10
  const float x[4] = {5.0f, 10.0f, 11.0f, -1e9f};
  uint8_t codes[4];
  float y[4];
  fp8_kv_quantize_row(x, 4, scale, codes);
  fp8_kv_dequantize_row(codes, 4, scale, y);
  EXPECT_EQ(codes[1], E4M3::kMaxFinite);
  EXPECT_EQ(codes[2], E4M3::kMaxFinite);
  EXPECT_EQ(codes[3], 0x80 | E4M3::kMaxFinite);
  EXPECT_EQ(y[2], 448.0f * scale);
  EXPECT_EQ(y[3], -448.0f * scale);
  EXPECT_NEAR(y[0], 5.0f, 5.0f / 16);
}

TEST(Fp8Kv, AllZeroRowHasZeroScaleAndNoNaN) {
  float x[8] = {0, -0.0f, 0, 0, 0, 0, 0, 0};
  uint8_t codes[8];
  float y[8];
  const float scale = fp8_kv_quantize_row_per_token(x, 8, codes);
  fp8_kv_dequantize_row(codes, 8, scale, y);
  EXPECT_EQ(scale, 0.0f);
  EXPECT_EQ(codes[0], 0x00);
  EXPECT_EQ(codes[1], 0x80);
  for (float v : y) EXPECT_EQ(v, 0.0f);
  EXPECT_TRUE(std::signbit(y[1]));
}

TEST(Fp8Kv, NonFiniteRowGetsNaNScaleAndDecodesToNaN) {
  for (float bad : {kNaN, kInf, -kInf}) {
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    x[2] = bad;
    uint8_t codes[8];
    float y[8];
    const float scale = fp8_kv_quantize_row_per_token(x, 8, codes);
    fp8_kv_dequantize_row(codes, 8, scale, y);
    EXPECT_TRUE(std::isnan(scale));
    for (float v : y) EXPECT_TRUE(std::isnan(v));
  }
}

TEST(Fp8Kv, SubnormalInputsAreZeros) {
  // fp32 subnormals read as zero on both sides (a device built with -ftz would flush them).
  const float tiny = std::numeric_limits<float>::denorm_min() * 1000;
  float x[2] = {tiny, -tiny};
  uint8_t codes[2];
  const float scale = fp8_kv_quantize_row_per_token(x, 2, codes);
  EXPECT_EQ(scale, 0.0f);
  EXPECT_EQ(codes[0], 0x00);
  EXPECT_EQ(codes[1], 0x80);
}

}  // namespace
}  // namespace hfa::quant
