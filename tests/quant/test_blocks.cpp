// NVFP4 and MXFP4 rows: layout, error bounds, scale choice and edge cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "quant/mxfp4.hpp"
#include "quant/nvfp4.hpp"
#include "quant/reference.hpp"

namespace hfa::quant {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// fp32 rounding of the quotient x / scale can move a value by one fp32 ulp around a midpoint.
constexpr double kQuotientSlack = 1e-6;

// Rows of normal noise at magnitudes far apart, with a few outliers per row.
std::vector<float> make_rows(int rows, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> pick(0, d - 1);
  std::vector<float> x(static_cast<size_t>(rows) * d);
  const float kMagnitudes[] = {1e-3f, 0.1f, 1.0f, 30.0f, 1e3f};
  for (int r = 0; r < rows; ++r) {
    const float magnitude = kMagnitudes[r % 5];
    for (int i = 0; i < d; ++i) x[r * d + i] = magnitude * normal(rng);
    x[r * d + pick(rng)] *= 20.0f;
  }
  return x;
}

uint8_t element_code(const std::vector<uint8_t>& packed, int i) {
  return e2m1_unpack(packed[i / 2], i % 2);
}

TEST(Bytes, FourBitFormatsStayUnderTheBudgetVsBf16) {
  EXPECT_EQ(nvfp4_bytes_per_element(), 0.5625);
  EXPECT_EQ(mxfp4_bytes_per_element(), 0.53125);
  EXPECT_LE(nvfp4_bytes_per_element() / 2.0, 0.29);
  EXPECT_LE(mxfp4_bytes_per_element() / 2.0, 0.29);
}

// Each row is its own tensor here (one global scale per row); the mixed-range case follows.
TEST(NVFP4, RoundTripWithinHalfAGridStep) {
  const int kRows = 40, kD = 128;
  const auto x = make_rows(kRows, kD, 1);
  const auto e2m1_mags = test::finite_magnitudes(test::kE2M1Spec);
  int checked_blocks = 0;
  for (int r = 0; r < kRows; ++r) {
    const float* row = &x[r * kD];
    float amax = 0;
    for (int i = 0; i < kD; ++i) amax = std::max(amax, std::fabs(row[i]));
    const float global = nvfp4_global_scale(amax);
    EXPECT_EQ(global, amax / 2688.0f);
    std::vector<uint8_t> packed(kD / 2), scales(kD / kNvfp4BlockSize);
    std::vector<float> y(kD);
    nvfp4_quantize_row(row, kD, global, packed.data(), scales.data());
    nvfp4_dequantize_row(packed.data(), scales.data(), kD, global, y.data());
    for (int b = 0; b < kD / kNvfp4BlockSize; ++b) {
      double block_amax = 0;
      for (int i = b * kNvfp4BlockSize; i < (b + 1) * kNvfp4BlockSize; ++i)
        block_amax = std::max(block_amax, std::fabs(static_cast<double>(row[i])));
      // The scale is the E4M3 nearest to amax / 6 / global (relative error ≤ 2^-4 when normal).
      const double target = block_amax / 6 / global;
      const double scale = e4m3_decode(scales[b]);
      const bool normal_scale = scales[b] >= 0x08;
      if (normal_scale) {
        ++checked_blocks;
        EXPECT_LE(std::fabs(scale - target), target / 16 * (1 + kQuotientSlack)) << r << "/" << b;
      }
      const float multiplier_f = e4m3_decode(scales[b]) * global;  // one fp32 product, as the codec
      const double multiplier = multiplier_f;
      ASSERT_GT(multiplier, 0);
      for (int i = b * kNvfp4BlockSize; i < (b + 1) * kNvfp4BlockSize; ++i) {
        const double xi = row[i];
        const double ratio = xi / multiplier;
        const uint8_t code = element_code(packed, i);
        EXPECT_EQ(code, test::reference_encode(test::kE2M1Spec, e2m1_mags, row[i] / multiplier_f));
        EXPECT_EQ(y[i], static_cast<float>(e2m1_decode(code) * multiplier));  // one rounding
        if (std::fabs(ratio) <= 6) {
          EXPECT_LE(std::fabs(xi - y[i]),
                    test::e2m1_half_gap(ratio) * multiplier * (1 + kQuotientSlack) +
                        std::fabs(y[i]) * 0x1p-24)
              << xi;
        } else {
          // Only a block scale rounded down can push a ratio past 6, and by at most 1/(1 − 2^-4).
          EXPECT_TRUE(normal_scale && std::fabs(ratio) <= 6.0 * 16 / 15 * (1 + kQuotientSlack))
              << ratio;
          EXPECT_EQ(std::fabs(y[i]), static_cast<float>(6 * multiplier));
        }
      }
    }
  }
  EXPECT_EQ(checked_blocks, kRows * kD / kNvfp4BlockSize);
}

// One global scale over rows 10^6 apart: the quiet rows' block scales fall below E4M3's range.
// Those blocks must decode to zeros (error ≤ their amax), never NaN; the loud rows stay accurate.
TEST(NVFP4, BlocksFarBelowTheGlobalScaleDecodeToZero) {
  const int kRows = 5, kD = 64;
  const auto x = make_rows(kRows, kD, 4);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float global = nvfp4_global_scale(amax);
  int zero_blocks = 0;
  for (int r = 0; r < kRows; ++r) {
    std::vector<uint8_t> packed(kD / 2), scales(kD / kNvfp4BlockSize);
    std::vector<float> y(kD);
    nvfp4_quantize_row(&x[r * kD], kD, global, packed.data(), scales.data());
    nvfp4_dequantize_row(packed.data(), scales.data(), kD, global, y.data());
    for (int i = 0; i < kD; ++i) {
      ASSERT_TRUE(std::isfinite(y[i]));
      if (scales[i / kNvfp4BlockSize] != 0) continue;
      zero_blocks += i % kNvfp4BlockSize == 0;
      EXPECT_EQ(y[i], 0.0f);
      EXPECT_EQ(element_code(packed, i), std::signbit(x[r * kD + i]) ? 0x8 : 0x0);
    }
  }
  EXPECT_GT(zero_blocks, 0);
}

TEST(NVFP4, ByteLayout) {
  // global 2^-8 and a block amax of 6 give block scale 256 (exact in E4M3): multiplier 1.
  const float global = 1.0f / 256;
  float x[16] = {0.5f, 1.0f,  1.5f,  2.0f, 3.0f, 4.0f, 6.0f, -0.5f,
                 0.0f, -0.0f, -6.0f, 0.5f, 0,    0,    0,    0};
  uint8_t packed[8], scales[1];
  nvfp4_quantize_row(x, 16, global, packed, scales);
  EXPECT_EQ(scales[0], 0x78);
  const uint8_t kExpected[8] = {0x21, 0x43, 0x65, 0x97, 0x80, 0x1f, 0x00, 0x00};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(packed[i], kExpected[i]) << i;
}

TEST(NVFP4, AllZeroBlockHasAZeroScaleAndDecodesToZero) {
  float x[32] = {};
  x[3] = -0.0f;
  x[20] = 1.0f;  // second block is not zero
  uint8_t packed[16], scales[2];
  float y[32];
  nvfp4_quantize_row(x, 32, nvfp4_global_scale(1.0f), packed, scales);
  nvfp4_dequantize_row(packed, scales, 32, nvfp4_global_scale(1.0f), y);
  EXPECT_EQ(scales[0], 0x00);
  EXPECT_EQ(e4m3_decode(scales[0]), 0.0f);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], 0.0f) << i;
  EXPECT_TRUE(std::signbit(y[3]));
  EXPECT_NEAR(y[20], 1.0f, 1e-6f);
}

TEST(NVFP4, TinyBlockWhoseScaleUnderflowsDecodesToZeroNotNaN) {
  float x[16] = {};
  x[0] = 1e-9f;
  uint8_t packed[8], scales[1];
  float y[16];
  const float global = nvfp4_global_scale(1000.0f);
  nvfp4_quantize_row(x, 16, global, packed, scales);
  nvfp4_dequantize_row(packed, scales, 16, global, y);
  EXPECT_EQ(scales[0], 0x00);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(NVFP4, NonFiniteBlockDecodesToNaNAndLeavesOthersAlone) {
  for (float bad : {kNaN, kInf, -kInf}) {
    float x[32];
    for (int i = 0; i < 32; ++i) x[i] = 0.25f * (i + 1);
    x[5] = bad;
    uint8_t packed[16], scales[2];
    float y[32];
    const float global = nvfp4_global_scale(8.0f);
    nvfp4_quantize_row(x, 32, global, packed, scales);
    nvfp4_dequantize_row(packed, scales, 32, global, y);
    EXPECT_EQ(scales[0], E4M3::kNanCode);
    for (int i = 0; i < 16; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
    // Block amax 8: multiplier 8 / 6, so the error is at most one multiplier.
    for (int i = 16; i < 32; ++i)
      EXPECT_TRUE(std::isfinite(y[i]) && std::fabs(y[i] - x[i]) <= 1.5f) << i;
  }
}

TEST(NVFP4, GlobalScaleEdgeCases) {
  EXPECT_EQ(nvfp4_global_scale(0.0f), 1.0f);
  EXPECT_EQ(nvfp4_global_scale(kInf), 1.0f);
  EXPECT_EQ(nvfp4_global_scale(kNaN), 1.0f);
  EXPECT_EQ(nvfp4_global_scale(2688.0f), 1.0f);
}

TEST(NVFP4, StaleGlobalScaleSaturatesInsteadOfOverflowing) {
  float x[16] = {};
  x[0] = 1e6f;
  x[1] = -3.0f;
  uint8_t packed[8], scales[1];
  float y[16];
  const float global = nvfp4_global_scale(1.0f);  // far too small for this block
  nvfp4_quantize_row(x, 16, global, packed, scales);
  nvfp4_dequantize_row(packed, scales, 16, global, y);
  EXPECT_EQ(scales[0], E4M3::kMaxFinite);
  EXPECT_EQ(y[0], 6.0f * (448.0f * global));
  EXPECT_EQ(y[1], -6.0f * (448.0f * global));
}

TEST(MXFP4, RoundTripWithinHalfAGridStepOrTheSpecsSaturation) {
  const int kRows = 40, kD = 128;
  const auto x = make_rows(kRows, kD, 2);
  const auto e2m1_mags = test::finite_magnitudes(test::kE2M1Spec);
  int saturated = 0;
  for (int r = 0; r < kRows; ++r) {
    std::vector<uint8_t> packed(kD / 2), scales(kD / kMxfp4BlockSize);
    std::vector<float> y(kD);
    mxfp4_quantize_row(&x[r * kD], kD, packed.data(), scales.data());
    mxfp4_dequantize_row(packed.data(), scales.data(), kD, y.data());
    for (int b = 0; b < kD / kMxfp4BlockSize; ++b) {
      double block_amax = 0;
      for (int i = b * kMxfp4BlockSize; i < (b + 1) * kMxfp4BlockSize; ++i)
        block_amax = std::max(block_amax, std::fabs(static_cast<double>(x[r * kD + i])));
      EXPECT_EQ(scales[b], std::ilogb(block_amax) - 2 + 127);
      const double unit = std::ldexp(1.0, scales[b] - 127);
      for (int i = b * kMxfp4BlockSize; i < (b + 1) * kMxfp4BlockSize; ++i) {
        const double xi = x[r * kD + i];
        const double ratio = xi / unit;  // exact: unit is a power of two
        const uint8_t code = element_code(packed, i);
        EXPECT_EQ(code,
                  test::reference_encode(test::kE2M1Spec, e2m1_mags, static_cast<float>(ratio)));
        EXPECT_EQ(static_cast<double>(y[i]), e2m1_decode(code) * unit);
        if (std::fabs(ratio) <= 6) {
          EXPECT_LE(std::fabs(xi - y[i]), test::e2m1_half_gap(ratio) * unit) << xi;
        } else {
          ++saturated;
          EXPECT_LT(std::fabs(ratio), 8.0);
          EXPECT_EQ(std::fabs(static_cast<double>(y[i])), 6 * unit);
        }
      }
    }
  }
  EXPECT_GT(saturated, 0) << "the sample should reach the spec's 6..8 saturation band";
}

TEST(MXFP4, ByteLayoutAndScale) {
  float x[32] = {};
  const float kValues[8] = {0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.5f};
  for (int i = 0; i < 8; ++i) x[i] = kValues[i] * 4;  // amax 24: scale 2^(4 − 2) = 4
  uint8_t packed[16], scales[1];
  mxfp4_quantize_row(x, 32, packed, scales);
  EXPECT_EQ(scales[0], 129);
  const uint8_t kExpected[4] = {0x21, 0x43, 0x65, 0x97};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(packed[i], kExpected[i]) << i;
  for (int i = 4; i < 16; ++i) EXPECT_EQ(packed[i], 0) << i;
}

TEST(MXFP4, AllZeroBlockDecodesToZero) {
  float x[32] = {};
  x[7] = -0.0f;
  uint8_t packed[16], scales[1];
  float y[32];
  mxfp4_quantize_row(x, 32, packed, scales);
  mxfp4_dequantize_row(packed, scales, 32, y);
  EXPECT_EQ(scales[0], 0);
  for (float v : y) EXPECT_EQ(v, 0.0f);
  EXPECT_TRUE(std::signbit(y[7]));
}

TEST(MXFP4, NonFiniteBlockDecodesToNaNAndLeavesOthersAlone) {
  for (float bad : {kNaN, kInf, -kInf}) {
    float x[64];
    for (int i = 0; i < 64; ++i) x[i] = 0.25f * (i % 16 + 1);
    x[40] = bad;
    uint8_t packed[32], scales[2];
    float y[64];
    mxfp4_quantize_row(x, 64, packed, scales);
    mxfp4_dequantize_row(packed, scales, 64, y);
    EXPECT_EQ(scales[1], kUe8m0NaN);
    for (int i = 32; i < 64; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
    // Block amax 4: scale 1, so the error is at most half the top grid step, 1.
    for (int i = 0; i < 32; ++i)
      EXPECT_TRUE(std::isfinite(y[i]) && std::fabs(y[i] - x[i]) <= 1.0f) << i;
  }
}

TEST(MXFP4, ScaleNearTheEndsOfTheFp32Range) {
  float big[32] = {}, small[32] = {};
  big[0] = std::numeric_limits<float>::max();
  small[0] = std::ldexp(1.0f, -125);
  small[1] = std::ldexp(1.0f, -126);
  uint8_t packed[16], scales[1];
  float y[32];
  mxfp4_quantize_row(big, 32, packed, scales);
  mxfp4_dequantize_row(packed, scales, 32, y);
  EXPECT_EQ(scales[0], 252);
  EXPECT_EQ(y[0], std::ldexp(6.0f, 125));  // the 6..8 band saturates, as in the spec
  mxfp4_quantize_row(small, 32, packed, scales);
  mxfp4_dequantize_row(packed, scales, 32, y);
  EXPECT_EQ(scales[0], 0);
  EXPECT_EQ(e2m1_unpack(packed[0], 0), 0x6);  // 2^-125 / 2^-127 = 4
  EXPECT_EQ(e2m1_unpack(packed[0], 1), 0x4);  // 2
  EXPECT_EQ(y[0], std::ldexp(1.0f, -125));
  EXPECT_EQ(y[1], std::ldexp(1.0f, -126));
}

}  // namespace
}  // namespace hfa::quant
