// fp32 bit helpers shared by the quantization codecs.
//
// Host and device must produce the same bytes, so every step is either integer arithmetic on the
// float's bits or one correctly rounded fp32 operation. Two things differ between a CPU and a GPU
// built with --use_fast_math: subnormal handling (-ftz) and the bits of a NaN. So the helpers
// read and write fp32 subnormals as signed zero and return a single canonical NaN; the result is
// then the same whether or not the device code was built with -ftz.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

namespace hfa::quant {

namespace fp32 {
inline constexpr uint32_t kSignMask = 0x80000000u;
inline constexpr uint32_t kAbsMask = 0x7fffffffu;
inline constexpr uint32_t kInfBits = 0x7f800000u;        // also the exponent-field mask
inline constexpr uint32_t kMinNormalBits = 0x00800000u;  // 2^-126
inline constexpr uint32_t kCanonicalNaN = 0x7fc00000u;   // the only NaN the codecs produce
inline constexpr uint32_t kMantissaMask = 0x007fffffu;
inline constexpr int kMantissaBits = 23;
inline constexpr int kBias = 127;
inline constexpr int kMaxBiasedExponent = 254;  // finite numbers
}  // namespace fp32

HFA_HD constexpr uint32_t bits_of(float x) { return __builtin_bit_cast(uint32_t, x); }
HFA_HD constexpr float from_bits(uint32_t b) { return __builtin_bit_cast(float, b); }

HFA_HD constexpr bool is_nan(float x) { return (bits_of(x) & fp32::kAbsMask) > fp32::kInfBits; }
HFA_HD constexpr bool is_finite(float x) { return (bits_of(x) & fp32::kAbsMask) < fp32::kInfBits; }

// Subnormal → signed zero, any NaN → the canonical NaN; everything else unchanged.
HFA_HD constexpr float canonical(float x) {
  const uint32_t b = bits_of(x);
  const uint32_t a = b & fp32::kAbsMask;
  if (a > fp32::kInfBits) return from_bits(fp32::kCanonicalNaN);
  if (a < fp32::kMinNormalBits) return from_bits(b & fp32::kSignMask);
  return x;
}

// One correctly rounded product / quotient. Explicit intrinsics on the device: --use_fast_math
// would otherwise turn `/` into an approximate reciprocal and a*b+c into an FMA.
HFA_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return canonical(__fmul_rn(canonical(a), canonical(b)));
#else
  return canonical(canonical(a) * canonical(b));
#endif
}

HFA_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return canonical(__fdiv_rn(canonical(a), canonical(b)));
#else
  return canonical(canonical(a) / canonical(b));
#endif
}

// +, -, ·, / correctly rounded for a hot loop: never fused into an FMA (explicit rounding on
// the device; a host compiler contracts only a product into a sum), subnormal inputs and
// results as signed zero. One .ftz instruction on the device, whatever the build's -ftz. Unlike
// the _rn helpers, a NaN result may have any bits (the device's differ from the host's):
// callers only compare it or encode it, and the encoders map every NaN to one code.
enum class FtzOp { add, sub, mul, div };

template <FtzOp op>
HFA_HD inline float ftz(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  if constexpr (op == FtzOp::add) asm("add.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  if constexpr (op == FtzOp::sub) asm("sub.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  if constexpr (op == FtzOp::mul) asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  if constexpr (op == FtzOp::div) asm("div.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  a = canonical(a);
  b = canonical(b);
  if constexpr (op == FtzOp::add) return canonical(a + b);
  if constexpr (op == FtzOp::sub) return canonical(a - b);
  if constexpr (op == FtzOp::mul) return canonical(a * b);
  return canonical(a / b);
#endif
}

// x · 2^k, exact unless it leaves the normal range: overflow gives ±inf, underflow ±0.
HFA_HD constexpr float scale_pow2(float x, int k) {
  const uint32_t b = bits_of(canonical(x));
  const uint32_t a = b & fp32::kAbsMask;
  if (a == 0 || a >= fp32::kInfBits) return from_bits(b);
  const int e = static_cast<int>(a >> fp32::kMantissaBits) + k;
  const uint32_t sign = b & fp32::kSignMask;
  if (e > fp32::kMaxBiasedExponent) return from_bits(sign | fp32::kInfBits);
  if (e <= 0) return from_bits(sign);
  return from_bits(sign | (static_cast<uint32_t>(e) << fp32::kMantissaBits) |
                   (a & fp32::kMantissaMask));
}

// max |x[i]|: NaN if any element is NaN, else inf if any is infinite. Integer compare of the
// magnitude bits orders finite values, inf and NaN in exactly that way. A max of integers, so
// the GPU append may take it across lanes in any order: the largest abs_bits, then
// amax_from_abs_bits, is amax_abs.
HFA_HD constexpr uint32_t abs_bits(float x) { return bits_of(x) & fp32::kAbsMask; }
HFA_HD constexpr float amax_from_abs_bits(uint32_t largest) { return canonical(from_bits(largest)); }

HFA_HD constexpr float amax_abs(const float* x, int n) {
  uint32_t m = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t a = abs_bits(x[i]);
    m = a > m ? a : m;
  }
  return amax_from_abs_bits(m);
}

}  // namespace hfa::quant
