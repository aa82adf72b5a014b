// FP4 E2M1 (bias 1, values ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}, no inf, no NaN).
//
// Encoding rounds to nearest even and saturates to ±6. E2M1 has no NaN: a NaN input encodes to
// +6 (0x7), as the CUDA fp4 conversions do. The block formats (nvfp4.hpp, mxfp4.hpp) carry NaN
// in the block scale instead, so a NaN in a block still decodes to NaN.
//
// Two values per byte, element 2i in the low nibble and 2i+1 in the high one (NVFP4 and MXFP4
// both store them so).
#pragma once

#include "quant/minifloat.hpp"

namespace hfa::quant {

struct E2M1 {
  static constexpr int kExpBits = 2;
  static constexpr int kManBits = 1;
  static constexpr int kBias = 1;
  static constexpr uint32_t kMaxFinite = 0x7;  // 0.11.1 = 6
  static constexpr uint32_t kInfCode = 0;      // none
  static constexpr uint32_t kNanCode = 0x7;    // +6
  static constexpr float kMax = 6.0f;
  static constexpr int kEmax = 2;  // exponent of the largest normal, used by the MX scale rule
};

inline constexpr uint8_t kNibbleMask = 0xf;
inline constexpr int kNibbleBits = 4;

HFA_HD constexpr float e2m1_decode(uint8_t code) {
  return minifloat_decode<E2M1>(code & kNibbleMask);
}
HFA_HD constexpr uint8_t e2m1_encode(float x) { return minifloat_encode<E2M1>(x); }

HFA_HD constexpr uint8_t e2m1_pack(uint8_t even, uint8_t odd) {
  return static_cast<uint8_t>((even & kNibbleMask) | ((odd & kNibbleMask) << kNibbleBits));
}
HFA_HD constexpr uint8_t e2m1_unpack(uint8_t byte, int index) {  // index 0: even, 1: odd element
  return static_cast<uint8_t>((byte >> (index * kNibbleBits)) & kNibbleMask);
}

}  // namespace hfa::quant
