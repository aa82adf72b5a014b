// Encode / decode of small IEEE-like formats (E4M3, E5M2, E2M1) with integer arithmetic only.
//
// A format is a traits struct: kExpBits, kManBits, kBias, kMaxFinite (largest finite magnitude
// code), kInfCode (magnitude code of inf, 0 when the format has none) and kNanCode (what a NaN
// input encodes to). Magnitude codes above kMaxFinite other than kInfCode decode to NaN.
//
// Encoding rounds to nearest, ties to even, and saturates ("satfinite", as PTX cvt.rn.satfinite
// does): a finite value that rounds above the largest finite value, and ±inf, become ±max.
// Values that round to zero keep their sign (-tiny → -0).
#pragma once

#include "quant/float_bits.hpp"

namespace hfa::quant {

template <class F>
HFA_HD constexpr float minifloat_decode(uint32_t code) {
  constexpr int kWidth = F::kExpBits + F::kManBits;
  constexpr uint32_t kManMask = (1u << F::kManBits) - 1u;
  // Subnormal unit 2^(1 - bias - mantissa bits), built from its bits (it is a normal fp32).
  constexpr float kSubnormalUnit = from_bits(
      static_cast<uint32_t>(1 - F::kBias - F::kManBits + fp32::kBias) << fp32::kMantissaBits);
  const uint32_t sign = ((code >> kWidth) & 1u) << 31;
  const uint32_t mag = code & ((1u << kWidth) - 1u);
  if (mag > F::kMaxFinite) {
    if (F::kInfCode != 0 && mag == F::kInfCode) return from_bits(sign | fp32::kInfBits);
    return from_bits(fp32::kCanonicalNaN);
  }
  const uint32_t e = mag >> F::kManBits;
  const uint32_t m = mag & kManMask;
  if (e == 0) {  // subnormal or zero: m units, exact in fp32
    return from_bits(sign | bits_of(static_cast<float>(m) * kSubnormalUnit));
  }
  const uint32_t fe = e - F::kBias + fp32::kBias;
  return from_bits(sign | (fe << fp32::kMantissaBits) | (m << (fp32::kMantissaBits - F::kManBits)));
}

template <class F>
HFA_HD constexpr uint8_t minifloat_encode(float x) {
  constexpr int kWidth = F::kExpBits + F::kManBits;
  constexpr int kMinExponent = 1 - F::kBias;  // of the smallest normal
  // A shift past this leaves a 24-bit significand below half a unit: it rounds to zero.
  constexpr int kMaxUsefulShift = fp32::kMantissaBits + 1;
  const uint32_t b = bits_of(x);
  const uint32_t sign = (b >> 31) << kWidth;
  const uint32_t a = b & fp32::kAbsMask;
  if (a > fp32::kInfBits) return static_cast<uint8_t>(F::kNanCode);
  if (a == fp32::kInfBits) return static_cast<uint8_t>(sign | F::kMaxFinite);
  // fp32 subnormals are far below half the smallest subnormal of every format here.
  if (a < fp32::kMinNormalBits) return static_cast<uint8_t>(sign);

  const int exponent = static_cast<int>(a >> fp32::kMantissaBits) - fp32::kBias;
  const uint32_t significand = (a & fp32::kMantissaMask) | fp32::kMinNormalBits;  // 1.m · 2^23
  // Count units of the target's spacing at this exponent (subnormal spacing below the normals).
  const int unit_exponent = exponent > kMinExponent ? exponent : kMinExponent;
  const int shift = fp32::kMantissaBits - F::kManBits + (unit_exponent - exponent);
  uint32_t units = 0;
  if (shift <= kMaxUsefulShift) {
    units = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (units & 1u))) ++units;
  }
  // Exponent field and mantissa add up: a carry out of the mantissa bumps the exponent, and a
  // subnormal that rounds up to 2^kMinExponent becomes the smallest normal.
  uint32_t mag = (static_cast<uint32_t>(unit_exponent - kMinExponent) << F::kManBits) + units;
  if (mag > F::kMaxFinite) mag = F::kMaxFinite;
  return static_cast<uint8_t>(sign | mag);
}

}  // namespace hfa::quant
