// OCP FP8 E5M2 (bias 15, IEEE-like: inf = S.11111.00, NaN = S.11111.xx with xx ≠ 0, max ±57344).
//
// Encoding follows the same satfinite convention as E4M3 (see e4m3.hpp): finite overflow and ±inf
// become ±57344, NaN becomes 0x7F. inf still decodes to inf.
#pragma once

#include "quant/minifloat.hpp"

namespace hfa::quant {

struct E5M2 {
  static constexpr int kExpBits = 5;
  static constexpr int kManBits = 2;
  static constexpr int kBias = 15;
  static constexpr uint32_t kMaxFinite = 0x7b;  // 0.11110.11 = 57344
  static constexpr uint32_t kInfCode = 0x7c;
  static constexpr uint32_t kNanCode = 0x7f;
  static constexpr float kMax = 57344.0f;
};

HFA_HD constexpr float e5m2_decode(uint8_t code) { return minifloat_decode<E5M2>(code); }
HFA_HD constexpr uint8_t e5m2_encode(float x) { return minifloat_encode<E5M2>(x); }

}  // namespace hfa::quant
