// FP8 E4M3 attention inputs (q, k, v for the FP8 forward) with one fp32 descale per group of
// rows (a tensor, a (sequence, head), or a block of a sequence's rows of one head):
// value = e4m3 · scale, scale = amax / 448 so that the group's largest element lands on E4M3's
// max. Unlike a KV cache's (fp8_kv.hpp), the scale of an all-zero group is 1, never 0: the
// forward multiplies by it, and a zero descale would turn any value into 0 and hide an error.
#pragma once

#include <cstdint>

#include "quant/e4m3.hpp"

namespace hfa::quant {

// amax: the group's amax_abs. NaN when the group holds inf or NaN (it decodes to NaN
// throughout); at least 2^-126, since an fp32 subnormal scale would read back as 0.
HFA_HD inline float fp8_input_scale(float amax) {
  if (!is_finite(amax)) return from_bits(fp32::kCanonicalNaN);
  if (amax == 0.0f) return 1.0f;
  const float scale = div_rn(amax, E4M3::kMax);
  return bits_of(scale) < fp32::kMinNormalBits ? from_bits(fp32::kMinNormalBits) : scale;
}

HFA_HD inline uint8_t fp8_input_encode(float y, float scale) {
  return e4m3_encode(ftz<FtzOp::div>(y, scale));
}

// The codes of two fp32 values, q0's in the low byte. The device converts with PTX
// cvt.rn.satfinite.e4m3x2.f32, which e4m3_encode matches on every fp32 input (src/quant/README.md).
HFA_HD inline uint16_t e4m3_encode_pair(float q0, float q1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t codes;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(codes) : "f"(q1), "f"(q0));
  return codes;
#else
  return static_cast<uint16_t>(e4m3_encode(q0) | e4m3_encode(q1) << 8);
#endif
}

// Two codes, y0's in the low byte.
HFA_HD inline uint16_t fp8_input_encode_pair(float y0, float y1, float scale) {
  return e4m3_encode_pair(ftz<FtzOp::div>(y0, scale), ftz<FtzOp::div>(y1, scale));
}

// A group's codes without a quotient per value (the GPU's fast path; the bytes stay
// fp8_input_encode's). The value to encode is y = v · norm (norm: the rotation's last step,
// hadamard_norm, or 1), and its code e4m3(fp32(y / scale)). Instead the two products
// v · below and v · above are encoded, with below and above norm / scale made a relative
// kFp8BracketWidth smaller and larger: each product carries at most four roundings (1/scale, the
// widening, the norm, v's) and the quotient two (y's, y / scale), each a relative 2^-24 at most,
// so |v · below| ≤ |fp32(y / scale)| ≤ |v · above| with a relative 10 · 2^-24 to spare; all
// three have v's sign, and rounding to e4m3 (saturating) is monotone, so when both products give
// one code the quotient gives it too. Where they differ (a rounding boundary of e4m3 within the
// bracket: about one value in 2^15) the caller encodes by the quotient. below and above stay
// normal: scales reach FLT_MAX / 448 < 2^120 at most, and norms are at least 2^-4.
// Flushing: y flushes to zero below 2^-126, v · below does not, so a flushed y has
// |v · below| < 2^-126 / scale. For a scale of at least 2^-116 that is under 2^-10, which encodes
// to zero: both codes are y's zero, or they differ. Smaller scales are encoded by quotients
// throughout.
inline constexpr float kFp8BracketWidth = 0x1p-20f;
inline constexpr uint32_t kFp8MinBracketedScaleBits = 0x05800000u;  // 2^-116

struct Fp8InputDivisor {
  float scale;     // the group's (fp8_input_scale)
  float norm;      // y = v · norm
  float below;     // ≈ norm / scale · (1 − kFp8BracketWidth)
  float above;     // ≈ norm / scale · (1 + kFp8BracketWidth)
  bool bracketed;  // false: every code by the quotient
};

HFA_HD inline Fp8InputDivisor fp8_input_divisor(float scale, float norm) {
  const float reciprocal = ftz<FtzOp::div>(1.0f, scale);
  return {scale, norm, ftz<FtzOp::mul>(ftz<FtzOp::mul>(reciprocal, 1.0f - kFp8BracketWidth), norm),
          ftz<FtzOp::mul>(ftz<FtzOp::mul>(reciprocal, 1.0f + kFp8BracketWidth), norm),
          bits_of(scale) >= kFp8MinBracketedScaleBits};  // a NaN scale too: every code is 0x7F
}

// The codes of v0 · multiplier and v1 · multiplier (multiplier: a divisor's below or above).
HFA_HD inline uint16_t fp8_input_encode_bracket(float v0, float v1, float multiplier) {
  return e4m3_encode_pair(ftz<FtzOp::mul>(v0, multiplier), ftz<FtzOp::mul>(v1, multiplier));
}

// The codes of y0 = v0 · norm and y1 = v1 · norm by their quotients: fp8_input_encode's.
HFA_HD inline uint16_t fp8_input_encode_exact(float v0, float v1, const Fp8InputDivisor& d) {
  return fp8_input_encode_pair(ftz<FtzOp::mul>(v0, d.norm), ftz<FtzOp::mul>(v1, d.norm), d.scale);
}

}  // namespace hfa::quant
