// Conversions between float and the 16-bit formats, round to nearest even. Bit-level so they
// behave the same on every compiler and CPU (no F16C assumed) and on the GPU, where the KV-cache
// append writes with them the bytes the CPU append writes.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

namespace hfa::detail {

HFA_HD inline float bf16_to_float(uint16_t bits) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(bits) << 16);
}

HFA_HD inline uint16_t float_to_bf16(float value) {
  uint32_t bits = __builtin_bit_cast(uint32_t, value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

HFA_HD inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return __builtin_bit_cast(float, sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return __builtin_bit_cast(float, sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Subnormal (or zero): mantissa · 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

HFA_HD inline uint16_t float_to_fp16(float value) {
  const uint32_t bits = __builtin_bit_cast(uint32_t, value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // below the smallest normal (2^-14): subnormal or zero
    // Scale so the fp16 subnormal unit (2^-24) becomes 1, then round to nearest even. The scaling
    // is exact; an fp32 subnormal (flushed by the GPU's -ftz) rounds to zero either way.
    const float scaled = __builtin_bit_cast(float, abs) * 0x1p24f;
    uint32_t q = static_cast<uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(q);
    if (rest > 0.5f || (rest == 0.5f && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round the 13 dropped bits to even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

}  // namespace hfa::detail
