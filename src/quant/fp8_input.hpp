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

// Two codes, y0's in the low byte. The device converts with PTX cvt.rn.satfinite.e4m3x2.f32,
// which e4m3_encode matches on every fp32 input (src/quant/README.md).
HFA_HD inline uint16_t fp8_input_encode_pair(float y0, float y1, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t codes;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
      : "=h"(codes)
      : "f"(ftz<FtzOp::div>(y1, scale)), "f"(ftz<FtzOp::div>(y0, scale)));
  return codes;
#else
  return static_cast<uint16_t>(fp8_input_encode(y0, scale) | fp8_input_encode(y1, scale) << 8);
#endif
}

}  // namespace hfa::quant
