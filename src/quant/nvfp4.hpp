// NVFP4: E2M1 elements, one E4M3 scale per block of 16, one fp32 scale per tensor.
//
// Row layout for d elements (d a multiple of 16):
//   packed[d / 2]   E2M1 codes, element 2i in the low nibble of byte i (see e2m1.hpp)
//   scales[d / 16]  E4M3, scales[j] for elements [16j, 16j + 16)
// value = e2m1 · (e4m3(scale) · global).
// Global-scale convention: global = amax_tensor / (448 · 6) (a dequantization multiplier, not
// its inverse), so that the largest block scale lands on E4M3's max. Block scale =
// e4m3(amax_block / 6 / global), rounded to nearest even. Elements are x / (e4m3(scale) · global)
// with that one product (the multiplier) computed once and used on both sides; a decoded element
// is the fp32 product e2m1 · multiplier. A zero multiplier (all-zero block, or a block scale
// below E4M3's smallest subnormal) encodes every element as a signed zero: no 0/0. A block
// holding inf or NaN gets the E4M3 NaN scale and decodes to NaN throughout.
#pragma once

#include "quant/e2m1.hpp"
#include "quant/e4m3.hpp"

namespace hfa::quant {

inline constexpr int kNvfp4BlockSize = 16;
inline constexpr float kNvfp4GlobalDivisor = E4M3::kMax * E2M1::kMax;  // 2688

// A zero or non-finite tensor amax gives 1: any positive value works for a zero tensor, and the
// non-finite blocks are marked NaN by their own scale while the finite ones stay usable.
HFA_HD inline float nvfp4_global_scale(float amax_tensor) {
  const float global = div_rn(amax_tensor, kNvfp4GlobalDivisor);
  if (!is_finite(amax_tensor) || global == 0.0f) return 1.0f;
  return global;
}

HFA_HD inline uint8_t nvfp4_block_scale(float amax_block, float global_scale) {
  if (!is_finite(amax_block)) return static_cast<uint8_t>(E4M3::kNanCode);
  return e4m3_encode(div_rn(div_rn(amax_block, E2M1::kMax), global_scale));
}

HFA_HD inline float nvfp4_multiplier(uint8_t block_scale, float global_scale) {
  return mul_rn(e4m3_decode(block_scale), global_scale);
}

HFA_HD inline uint8_t nvfp4_encode(float x, float multiplier) {
  constexpr int kSignShift = 31 - (E2M1::kExpBits + E2M1::kManBits);
  if ((bits_of(multiplier) & fp32::kAbsMask) == 0) {
    return static_cast<uint8_t>((bits_of(x) & fp32::kSignMask) >> kSignShift);
  }
  return e2m1_encode(div_rn(x, multiplier));
}

HFA_HD inline float nvfp4_decode(uint8_t code, float multiplier) {
  return mul_rn(e2m1_decode(code), multiplier);
}

HFA_HD inline void nvfp4_quantize_row(const float* x, int d, float global_scale, uint8_t* packed,
                                      uint8_t* scales) {
  for (int block = 0; block < d / kNvfp4BlockSize; ++block) {
    const float* xb = x + block * kNvfp4BlockSize;
    const uint8_t scale = nvfp4_block_scale(amax_abs(xb, kNvfp4BlockSize), global_scale);
    scales[block] = scale;
    const float multiplier = nvfp4_multiplier(scale, global_scale);
    uint8_t* pb = packed + block * kNvfp4BlockSize / 2;
    for (int i = 0; i < kNvfp4BlockSize; i += 2) {
      pb[i / 2] = e2m1_pack(nvfp4_encode(xb[i], multiplier), nvfp4_encode(xb[i + 1], multiplier));
    }
  }
}

HFA_HD inline void nvfp4_dequantize_row(const uint8_t* packed, const uint8_t* scales, int d,
                                        float global_scale, float* out) {
  for (int i = 0; i < d; ++i) {
    const float multiplier = nvfp4_multiplier(scales[i / kNvfp4BlockSize], global_scale);
    out[i] = nvfp4_decode(e2m1_unpack(packed[i / 2], i % 2), multiplier);
  }
}

// Cache bytes per element, block scales included; the one fp32 per tensor is left out.
constexpr double nvfp4_bytes_per_element() { return 0.5 + 1.0 / kNvfp4BlockSize; }

}  // namespace hfa::quant
