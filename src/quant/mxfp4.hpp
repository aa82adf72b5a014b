// MXFP4 (OCP Microscaling v1.0): E2M1 elements with one UE8M0 scale per block of 32.
//
// Row layout for d elements (d a multiple of 32):
//   packed[d / 2]   E2M1 codes, element 2i in the low nibble of byte i (see e2m1.hpp)
//   scales[d / 32]  UE8M0, scales[j] for elements [32j, 32j + 32)
// value = e2m1 · 2^(scale − 127). The scale is chosen from the block's amax by the spec's rule
// (ue8m0.hpp). Scaling by a power of two is done on the exponent bits, so it is exact and the
// same on host and device; results below the fp32 normal range become zero.
// A block holding inf or NaN gets the NaN scale and decodes to NaN throughout.
#pragma once

#include "quant/e2m1.hpp"
#include "quant/ue8m0.hpp"

namespace hfa::quant {

inline constexpr int kMxfp4BlockSize = 32;

HFA_HD constexpr uint8_t mxfp4_block_scale(float amax_block) {
  return mx_shared_scale(amax_block, E2M1::kEmax);
}

HFA_HD constexpr uint8_t mxfp4_encode(float x, uint8_t scale) {
  if (scale == kUe8m0NaN) return e2m1_encode(from_bits(fp32::kCanonicalNaN));
  return e2m1_encode(scale_pow2(x, kUe8m0Bias - scale));
}

HFA_HD constexpr float mxfp4_decode(uint8_t code, uint8_t scale) {
  if (scale == kUe8m0NaN) return from_bits(fp32::kCanonicalNaN);
  return scale_pow2(e2m1_decode(code), scale - kUe8m0Bias);
}

HFA_HD constexpr void mxfp4_quantize_row(const float* x, int d, uint8_t* packed, uint8_t* scales) {
  for (int block = 0; block < d / kMxfp4BlockSize; ++block) {
    const float* xb = x + block * kMxfp4BlockSize;
    const uint8_t scale = mxfp4_block_scale(amax_abs(xb, kMxfp4BlockSize));
    scales[block] = scale;
    uint8_t* pb = packed + block * kMxfp4BlockSize / 2;
    for (int i = 0; i < kMxfp4BlockSize; i += 2) {
      pb[i / 2] = e2m1_pack(mxfp4_encode(xb[i], scale), mxfp4_encode(xb[i + 1], scale));
    }
  }
}

HFA_HD constexpr void mxfp4_dequantize_row(const uint8_t* packed, const uint8_t* scales, int d,
                                           float* out) {
  for (int i = 0; i < d; ++i) {
    out[i] = mxfp4_decode(e2m1_unpack(packed[i / 2], i % 2), scales[i / kMxfp4BlockSize]);
  }
}

// Cache bytes per element, scales included.
constexpr double mxfp4_bytes_per_element() { return 0.5 + 1.0 / kMxfp4BlockSize; }

}  // namespace hfa::quant
