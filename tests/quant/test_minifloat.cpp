// E4M3, E5M2, E2M1 and UE8M0: every bit pattern, every rounding midpoint, the special values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>

#include "quant/e2m1.hpp"
#include "quant/e4m3.hpp"
#include "quant/e5m2.hpp"
#include "quant/reference.hpp"
#include "quant/ue8m0.hpp"

namespace hfa::quant {
namespace {

using test::FormatSpec;

struct Codec {
  FormatSpec spec;
  float (*decode)(uint8_t);
  uint8_t (*encode)(float);
};

float dec_e4m3(uint8_t c) { return e4m3_decode(c); }
float dec_e5m2(uint8_t c) { return e5m2_decode(c); }
float dec_e2m1(uint8_t c) { return e2m1_decode(c); }
uint8_t enc_e4m3(float x) { return e4m3_encode(x); }
uint8_t enc_e5m2(float x) { return e5m2_encode(x); }
uint8_t enc_e2m1(float x) { return e2m1_encode(x); }

void PrintTo(const Codec& c, std::ostream* os) { *os << c.spec.name; }

const Codec kCodecs[] = {
    {test::kE4M3Spec, dec_e4m3, enc_e4m3},
    {test::kE5M2Spec, dec_e5m2, enc_e5m2},
    {test::kE2M1Spec, dec_e2m1, enc_e2m1},
};

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool same_value(double expected, float got) {
  if (std::isnan(expected)) return std::isnan(got);
  return expected == static_cast<double>(got) && std::signbit(expected) == std::signbit(got);
}

class MiniFloat : public ::testing::TestWithParam<Codec> {};

TEST_P(MiniFloat, DecodesEveryPatternLikeItsFields) {
  const Codec& c = GetParam();
  for (int code = 0; code < test::code_count(c.spec); ++code) {
    const double expected = test::reference_decode(c.spec, code);
    const float got = c.decode(static_cast<uint8_t>(code));
    EXPECT_TRUE(same_value(expected, got))
        << c.spec.name << " code " << code << ": " << got << " vs " << expected;
  }
}

TEST_P(MiniFloat, EncodeOfDecodeIsIdentityForEveryFinitePattern) {
  const Codec& c = GetParam();
  for (int code = 0; code < test::code_count(c.spec); ++code) {
    const float v = c.decode(static_cast<uint8_t>(code));
    if (!std::isfinite(v)) continue;
    EXPECT_EQ(c.encode(v), code) << c.spec.name << " value " << v;
  }
}

TEST_P(MiniFloat, MidpointsRoundToEvenAndNeighboursToTheNearerSide) {
  const Codec& c = GetParam();
  const auto mags = test::finite_magnitudes(c.spec);
  const unsigned sign = 1u << test::width(c.spec);
  for (unsigned lo = 0; lo + 1 < mags.size(); ++lo) {
    const unsigned hi = lo + 1;
    const float mid = static_cast<float>((mags[lo] + mags[hi]) / 2);
    ASSERT_EQ(static_cast<double>(mid), (mags[lo] + mags[hi]) / 2) << "midpoint not exact in fp32";
    const unsigned even = lo % 2 == 0 ? lo : hi;
    for (unsigned s : {0u, sign}) {
      const float m = s ? -mid : mid;
      EXPECT_EQ(c.encode(m), s | even) << c.spec.name << " tie at " << m;
      EXPECT_EQ(c.encode(std::nextafter(m, 0.0f)), s | lo) << c.spec.name << " just inside " << m;
      EXPECT_EQ(c.encode(std::nextafter(m, s ? -kInf : kInf)), s | hi)
          << c.spec.name << " just outside " << m;
    }
  }
}

TEST_P(MiniFloat, SaturatesFiniteOverflowAndInfinity) {
  const Codec& c = GetParam();
  const auto mags = test::finite_magnitudes(c.spec);
  const unsigned sign = 1u << test::width(c.spec);
  const float max = static_cast<float>(mags.back());
  const float ulp_at_max = static_cast<float>(mags.back() - mags[mags.size() - 2]);
  for (float x : {max, max + ulp_at_max / 2, max + ulp_at_max, 2 * max, 1e30f,
                  std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(c.encode(x), c.spec.max_finite) << c.spec.name << " " << x;
    EXPECT_EQ(c.encode(-x), sign | c.spec.max_finite) << c.spec.name << " " << -x;
  }
}

TEST_P(MiniFloat, NaNEncodesToTheDocumentedCode) {
  const Codec& c = GetParam();
  const float negative_nan = std::bit_cast<float>(0xffc00000u);
  const float signalling_payload = std::bit_cast<float>(0x7f800001u);
  for (float x : {kNaN, negative_nan, signalling_payload})
    EXPECT_EQ(c.encode(x), c.spec.nan_encoding);
}

TEST_P(MiniFloat, ZerosKeepTheirSignAndTinyValuesFlushToSignedZero) {
  const Codec& c = GetParam();
  const uint8_t sign = static_cast<uint8_t>(1u << test::width(c.spec));
  const float smallest = static_cast<float>(test::finite_magnitudes(c.spec)[1]);
  EXPECT_EQ(c.encode(0.0f), 0);
  EXPECT_EQ(c.encode(-0.0f), sign);
  EXPECT_TRUE(std::signbit(c.decode(sign)) && c.decode(sign) == 0.0f);
  for (float tiny : {smallest / 2, smallest / 4, 1e-30f, std::numeric_limits<float>::denorm_min(),
                     std::numeric_limits<float>::min()}) {
    EXPECT_EQ(c.encode(tiny), 0) << tiny;
    EXPECT_EQ(c.encode(-tiny), sign) << -tiny;
  }
  EXPECT_EQ(c.encode(std::nextafter(smallest / 2, kInf)), 1);
}

// Sweeps all fp32 patterns with a stride (NaNs, infs, subnormals, both signs) and, densely, the
// range where the format's rounding happens.
TEST_P(MiniFloat, EncodeMatchesNearestSearch) {
  const Codec& c = GetParam();
  const auto mags = test::finite_magnitudes(c.spec);
  constexpr uint64_t kSweepStride = 9973;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += kSweepStride) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(b));
    ASSERT_EQ(c.encode(x), test::reference_encode(c.spec, mags, x)) << c.spec.name << " " << x;
  }
  const uint32_t first = std::bit_cast<uint32_t>(static_cast<float>(mags[1] / 4));
  const uint32_t last = std::bit_cast<uint32_t>(static_cast<float>(mags.back() * 2));
  constexpr uint32_t kDenseStride = 7;
  for (uint32_t b = first; b <= last; b += kDenseStride) {
    const float x = std::bit_cast<float>(b);
    ASSERT_EQ(c.encode(x), test::reference_encode(c.spec, mags, x)) << c.spec.name << " " << x;
    ASSERT_EQ(c.encode(-x), test::reference_encode(c.spec, mags, -x)) << c.spec.name << " " << -x;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, MiniFloat, ::testing::ValuesIn(kCodecs),
                         [](const auto& info) { return std::string(info.param.spec.name); });

TEST(E4M3, KnownValues) {
  EXPECT_EQ(e4m3_decode(0x7e), 448.0f);
  EXPECT_EQ(e4m3_decode(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_decode(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_decode(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_decode(0x38), 1.0f);
  EXPECT_EQ(e4m3_decode(0x78), 256.0f);  // exponent 15 is a normal binade in E4M3
  EXPECT_TRUE(std::isnan(e4m3_decode(0x7f)) && std::isnan(e4m3_decode(0xff)));
  EXPECT_EQ(e4m3_encode(464.0f), 0x7e);  // tie between 448 and the NaN slot: stays finite
  EXPECT_EQ(e4m3_encode(-kInf), 0xfe);
}

TEST(E5M2, KnownValues) {
  EXPECT_EQ(e5m2_decode(0x7b), 57344.0f);
  EXPECT_EQ(e5m2_decode(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(e5m2_decode(0x3c), 1.0f);
  EXPECT_EQ(e5m2_decode(0x7c), kInf);
  EXPECT_EQ(e5m2_decode(0xfc), -kInf);
  for (int code : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}) EXPECT_TRUE(std::isnan(e5m2_decode(code)));
  EXPECT_EQ(e5m2_encode(kInf), 0x7b);  // satfinite, like cvt.rn.satfinite
}

TEST(E2M1, AllSixteenValues) {
  const float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int code = 0; code < 8; ++code) {
    EXPECT_EQ(e2m1_decode(code), kValues[code]);
    EXPECT_EQ(e2m1_decode(code | 8), -kValues[code]);
    EXPECT_TRUE(std::signbit(e2m1_decode(code | 8)));
  }
  EXPECT_EQ(e2m1_encode(5.0f), 0x6);    // tie 4 | 6 → 4 (mantissa 0)
  EXPECT_EQ(e2m1_encode(2.5f), 0x4);    // tie 2 | 3 → 2
  EXPECT_EQ(e2m1_encode(3.5f), 0x6);    // tie 3 | 4 → 4
  EXPECT_EQ(e2m1_encode(0.25f), 0x0);   // tie 0 | 0.5 → 0
  EXPECT_EQ(e2m1_encode(0.75f), 0x2);   // tie 0.5 | 1 → 1
  EXPECT_EQ(e2m1_encode(-1.25f), 0xa);  // tie 1 | 1.5 → 1
  EXPECT_EQ(e2m1_encode(kNaN), 0x7);    // no NaN in E2M1: +6, as the CUDA fp4 conversions do
}

TEST(E2M1, PacksEvenElementInTheLowNibble) {
  EXPECT_EQ(e2m1_pack(0x1, 0xe), 0xe1);
  EXPECT_EQ(e2m1_pack(0xf1, 0x2), 0x21);  // stray high bits of an input are dropped
  EXPECT_EQ(e2m1_unpack(0xe1, 0), 0x1);
  EXPECT_EQ(e2m1_unpack(0xe1, 1), 0xe);
  EXPECT_EQ(e2m1_decode(0xe1), 0.5f);  // decode looks at the low nibble only
}

TEST(UE8M0, DecodesEveryPatternAsAPowerOfTwo) {
  for (int code = 0; code < 255; ++code) {
    const float expected = static_cast<float>(std::ldexp(1.0, code - 127));
    EXPECT_EQ(std::bit_cast<uint32_t>(ue8m0_decode(code)), std::bit_cast<uint32_t>(expected))
        << code;
    EXPECT_EQ(ue8m0_encode_floor(ue8m0_decode(code)), code);
  }
  EXPECT_TRUE(std::isnan(ue8m0_decode(0xff)));
}

TEST(UE8M0, EncodeFloorRoundsTowardZeroAndClamps) {
  EXPECT_EQ(ue8m0_encode_floor(3.0f), 128);
  EXPECT_EQ(ue8m0_encode_floor(std::nextafter(2.0f, 0.0f)), 127);
  EXPECT_EQ(ue8m0_encode_floor(0.75f), 126);
  EXPECT_EQ(ue8m0_encode_floor(-3.0f), 128);  // magnitude
  EXPECT_EQ(ue8m0_encode_floor(std::numeric_limits<float>::max()), 254);
  EXPECT_EQ(ue8m0_encode_floor(0.0f), 0);
  EXPECT_EQ(ue8m0_encode_floor(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(ue8m0_encode_floor(kInf), kUe8m0NaN);
  EXPECT_EQ(ue8m0_encode_floor(kNaN), kUe8m0NaN);
}

TEST(UE8M0, MxSharedScaleFollowsTheOcpRule) {
  // X = 2^(floor(log2 amax) − 2) for E2M1, checked against ilogb.
  for (float amax : {1.0f, 6.0f, 7.99f, 8.0f, 0.3f, 1e-20f, 3e30f}) {
    const int expected = std::ilogb(amax) - E2M1::kEmax + 127;
    EXPECT_EQ(mx_shared_scale(amax, E2M1::kEmax), expected) << amax;
  }
  EXPECT_EQ(mx_shared_scale(0.0f, E2M1::kEmax), 0);                    // all-zero block
  EXPECT_EQ(mx_shared_scale(std::ldexp(1.0f, -126), E2M1::kEmax), 0);  // would be 2^-128: clamped
  EXPECT_EQ(mx_shared_scale(kInf, E2M1::kEmax), kUe8m0NaN);
  EXPECT_EQ(mx_shared_scale(kNaN, E2M1::kEmax), kUe8m0NaN);
}

}  // namespace
}  // namespace hfa::quant
