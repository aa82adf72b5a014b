// OCP FP8 E4M3 (bias 7, no inf, max ±448, NaN = S.1111.111).
//
// Encoding saturates: finite overflow and ±inf become ±448, NaN becomes 0x7F. A KV cache would
// rather clip an outlier than poison every attention row that reads it with NaN; the choice is
// the one PTX cvt.rn.satfinite.e4m3x2.f32 makes, so a later GPU fast path can use that cvt.
#pragma once

#include "quant/minifloat.hpp"

namespace hfa::quant {

struct E4M3 {
  static constexpr int kExpBits = 4;
  static constexpr int kManBits = 3;
  static constexpr int kBias = 7;
  static constexpr uint32_t kMaxFinite = 0x7e;  // 0.1111.110 = 448
  static constexpr uint32_t kInfCode = 0;       // none
  static constexpr uint32_t kNanCode = 0x7f;
  static constexpr float kMax = 448.0f;
};

HFA_HD constexpr float e4m3_decode(uint8_t code) { return minifloat_decode<E4M3>(code); }
HFA_HD constexpr uint8_t e4m3_encode(float x) { return minifloat_encode<E4M3>(x); }

}  // namespace hfa::quant
