// Independent references for the codec tests: values from the bit fields with std::ldexp in
// double, and rounding by searching the sorted list of representable values. Nothing here shares
// code with src/quant.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace hfa::quant::test {

struct FormatSpec {
  const char* name;
  int exp_bits;
  int man_bits;
  int bias;
  uint8_t max_finite;    // largest finite magnitude code
  bool ieee_specials;    // all-ones exponent is inf / NaN (E5M2)
  bool top_code_nan;     // the all-ones magnitude code is NaN (E4M3)
  uint8_t nan_encoding;  // what a NaN input must encode to
};

inline constexpr FormatSpec kE4M3Spec{"e4m3", 4, 3, 7, 0x7e, false, true, 0x7f};
inline constexpr FormatSpec kE5M2Spec{"e5m2", 5, 2, 15, 0x7b, true, false, 0x7f};
inline constexpr FormatSpec kE2M1Spec{"e2m1", 2, 1, 1, 0x7, false, false, 0x7};

inline int width(const FormatSpec& f) { return f.exp_bits + f.man_bits; }
inline int code_count(const FormatSpec& f) { return 1 << (width(f) + 1); }

// The value of a code from its sign, exponent and mantissa fields.
inline double reference_decode(const FormatSpec& f, unsigned code) {
  const unsigned mag = code & ((1u << width(f)) - 1u);
  const bool negative = (code >> width(f)) & 1u;
  const unsigned e = mag >> f.man_bits;
  const unsigned m = mag & ((1u << f.man_bits) - 1u);
  const unsigned all_ones = (1u << f.exp_bits) - 1u;
  double v;
  if (f.ieee_specials && e == all_ones) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (f.top_code_nan && mag == (1u << width(f)) - 1u) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.bias - f.man_bits);
  } else {
    v = std::ldexp(static_cast<double>((1u << f.man_bits) + m),
                   static_cast<int>(e) - f.bias - f.man_bits);
  }
  return negative ? -v : v;
}

// Non-negative finite values in code order (which is increasing order).
inline std::vector<double> finite_magnitudes(const FormatSpec& f) {
  std::vector<double> v;
  for (unsigned c = 0; c <= f.max_finite; ++c) v.push_back(reference_decode(f, c));
  return v;
}

// Nearest representable value, ties to the even code, saturating, signed zero kept.
inline uint8_t reference_encode(const FormatSpec& f, const std::vector<double>& mags, float x) {
  if (std::isnan(x)) return f.nan_encoding;
  const unsigned sign = std::signbit(x) ? 1u << width(f) : 0u;
  const double ax = std::fabs(static_cast<double>(x));
  if (ax >= mags.back()) return static_cast<uint8_t>(sign | f.max_finite);
  const auto above = std::upper_bound(mags.begin(), mags.end(), ax);
  const unsigned hi = static_cast<unsigned>(above - mags.begin());
  const unsigned lo = hi - 1;
  const double d_lo = ax - mags[lo], d_hi = mags[hi] - ax;
  unsigned code;
  if (d_lo < d_hi)
    code = lo;
  else if (d_hi < d_lo)
    code = hi;
  else
    code = (lo % 2 == 0) ? lo : hi;
  return static_cast<uint8_t>(sign | code);
}

// Half the distance between neighbours of the E2M1 grid around |r| (r ≤ 6).
inline double e2m1_half_gap(double r) {
  r = std::fabs(r);
  return r < 2 ? 0.25 : r < 4 ? 0.5 : 1.0;
}

// Half the distance between neighbours of the E4M3 grid around |r| (r ≤ 448).
inline double e4m3_half_gap(double r) {
  r = std::fabs(r);
  const int kMinNormalExp = -6;
  const int exponent = r < std::ldexp(1.0, kMinNormalExp) ? kMinNormalExp : std::ilogb(r);
  return std::ldexp(1.0, exponent - 3) / 2;
}

}  // namespace hfa::quant::test
