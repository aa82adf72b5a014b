// UE8M0: an unsigned power of two 2^(e − 127), e = 0..254; 0xFF is NaN. No zero, no sign.
//
// The MX block scale (OCP Microscaling Formats (MX) v1.0) is
// X = 2^(floor(log2(amax)) − emax_elem), emax_elem being the exponent of the element format's
// largest normal (2 for E2M1). Elements are then x / X rounded into the element format, so
// |x| / X lies in [0, 2^(emax_elem+1)) and the part above the element max (6 to 8 for E2M1)
// saturates: that is the spec's rule, kept as is.
// Edge cases chosen here: an amax of 0 (or an fp32 subnormal) gives e = 0, the smallest scale;
// a shared exponent that would fall below 2^-127 is clamped to it; inf or NaN amax gives NaN.
#pragma once

#include "quant/float_bits.hpp"

namespace hfa::quant {

inline constexpr uint8_t kUe8m0NaN = 0xff;
inline constexpr int kUe8m0Bias = 127;
static_assert(kUe8m0Bias == fp32::kBias,
              "ue8m0_encode_floor reads the fp32 exponent field as the code");

HFA_HD constexpr float ue8m0_decode(uint8_t code) {
  // Code 0 is 2^-127, the fp32 subnormal with only the top mantissa bit set.
  constexpr uint32_t kTwoToMinus127 = 1u << (fp32::kMantissaBits - 1);
  if (code == kUe8m0NaN) return from_bits(fp32::kCanonicalNaN);
  if (code == 0) return from_bits(kTwoToMinus127);
  return from_bits(static_cast<uint32_t>(code) << fp32::kMantissaBits);
}

// 2^floor(log2|x|) as a code: exact for powers of two, clamped to 2^-127 below, NaN for inf/NaN.
HFA_HD constexpr uint8_t ue8m0_encode_floor(float x) {
  const uint32_t a = bits_of(x) & fp32::kAbsMask;
  if (a >= fp32::kInfBits) return kUe8m0NaN;
  // The fp32 and UE8M0 biases are equal, so a normal's exponent field is the code; every
  // subnormal is below 2^-126 and clamps to code 0.
  return static_cast<uint8_t>(a >> fp32::kMantissaBits);
}

HFA_HD constexpr uint8_t mx_shared_scale(float amax, int emax_elem) {
  const uint8_t floor_code = ue8m0_encode_floor(amax);
  if (floor_code == kUe8m0NaN) return kUe8m0NaN;
  const int e = floor_code - emax_elem;
  return static_cast<uint8_t>(e > 0 ? e : 0);
}

}  // namespace hfa::quant
