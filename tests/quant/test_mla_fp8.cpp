// FlashMLA's FP8 MLA record (quant/mla_fp8.hpp): the encoder's scales and codes, the decoder's
// values, the bytes where FlashMLA puts them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/half_float.hpp"
#include "quant/mla_fp8.hpp"

namespace hfa::quant {
namespace {

// The FP8 record: FlashMLA's rule for the scales (the smallest power of two >= amax / 448, at
// least 1e-4), latent values within E4M3's half step, rotary values exactly bf16.
TEST(MlaFp8Record, QuantizerFollowsFlashMlaRule) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kMlaHeadDim), back(kMlaHeadDim);
  std::vector<uint8_t> record(kMlaRecordBytes);
  for (int trial = 0; trial < 50; ++trial) {
    const float gain = trial == 0 ? 0.0f : std::exp(3.0f * normal(rng));
    for (float& value : x) value = normal(rng) * gain;
    mla_fp8_quantize_row(x.data(), record.data());
    mla_fp8_decode_columns(record.data(), 0, kMlaHeadDim, back.data());
    for (int t = 0; t < kMlaTiles; ++t) {
      float amax = 0.0f;
      for (int c = t * 128; c < (t + 1) * 128; ++c) amax = std::max(amax, std::abs(x[c]));
      float scale;
      std::memcpy(&scale, record.data() + 512 + 4 * t, 4);
      const float floor = std::max(amax / 448.0f, 1e-4f);
      int exponent = 0;
      EXPECT_EQ(std::frexp(scale, &exponent), 0.5f) << "scale " << scale << " is a power of two";
      EXPECT_GE(scale, floor);
      EXPECT_LT(scale, 2.0f * floor);
      for (int c = t * 128; c < (t + 1) * 128; ++c)
        EXPECT_LE(std::abs(back[c] - x[c]), std::max(std::abs(x[c]) / 16.0f, scale * 0x1p-9f)) << c;
    }
    for (int c = 512; c < 576; ++c) {
      uint16_t bits;
      std::memcpy(&bits, record.data() + 528 + 2 * (c - 512), 2);
      EXPECT_EQ(bits, detail::float_to_bf16(x[c]));
      EXPECT_EQ(back[c], detail::bf16_to_float(bits));
    }
  }
}

// A tile holding NaN or inf gets a NaN scale and decodes to NaN throughout; the other tiles and
// the rotary values are unaffected.
TEST(MlaFp8Record, NonFiniteTilesDecodeToNan) {
  std::vector<float> x(kMlaHeadDim, 1.0f), back(kMlaHeadDim);
  std::vector<uint8_t> record(kMlaRecordBytes);
  x[130] = std::numeric_limits<float>::quiet_NaN();
  x[400] = std::numeric_limits<float>::infinity();
  mla_fp8_quantize_row(x.data(), record.data());
  mla_fp8_decode_columns(record.data(), 0, kMlaHeadDim, back.data());
  for (int c = 0; c < kMlaHeadDim; ++c) {
    const bool poisoned = (c >= 128 && c < 256) || (c >= 384 && c < 512);
    EXPECT_EQ(std::isnan(back[c]), poisoned) << c;
    if (!poisoned) {
      EXPECT_EQ(back[c], 1.0f) << c;
    }
  }
}

}  // namespace
}  // namespace hfa::quant
