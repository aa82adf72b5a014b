// FP8 E4M3 KV cache with an fp32 scale per kv-head or per (token, kv-head).
//
// Layout: codes[token][kv_head][d] (one byte each); scales[kv_head] (per kv-head, usually
// calibrated ahead of time, since a growing cache cannot rescale its past) or
// scales[token][kv_head] (per token, computed from the row as it is written).
// scale = amax / 448, so the row's largest element lands on E4M3's max; value = e4m3 · scale.
// An all-zero row gets scale 0 and codes that are signed zeros (no 0/0); a row holding inf or NaN
// gets a NaN scale and decodes to NaN throughout. Values beyond 448 · scale (a calibrated scale
// that turned out too small) saturate, see e4m3.hpp.
#pragma once

#include "quant/e4m3.hpp"

namespace hfa::quant {

enum class Fp8ScaleGranularity { per_kv_head, per_token_kv_head };

HFA_HD inline float fp8_kv_scale(float amax) {
  if (!is_finite(amax)) return from_bits(fp32::kCanonicalNaN);
  return div_rn(amax, E4M3::kMax);
}

HFA_HD inline uint8_t fp8_kv_encode(float x, float scale) {
  constexpr int kSignShift = 31 - (E4M3::kExpBits + E4M3::kManBits);
  if ((bits_of(scale) & fp32::kAbsMask) == 0) {
    return static_cast<uint8_t>((bits_of(x) & fp32::kSignMask) >> kSignShift);
  }
  return e4m3_encode(div_rn(x, scale));
}

HFA_HD inline float fp8_kv_decode(uint8_t code, float scale) {
  return mul_rn(e4m3_decode(code), scale);
}

HFA_HD inline void fp8_kv_quantize_row(const float* x, int d, float scale, uint8_t* codes) {
  for (int i = 0; i < d; ++i) codes[i] = fp8_kv_encode(x[i], scale);
}

// Per (token, kv-head): computes the row's scale, writes the codes, returns the scale.
HFA_HD inline float fp8_kv_quantize_row_per_token(const float* x, int d, uint8_t* codes) {
  const float scale = fp8_kv_scale(amax_abs(x, d));
  fp8_kv_quantize_row(x, d, scale, codes);
  return scale;
}

HFA_HD inline void fp8_kv_dequantize_row(const uint8_t* codes, int d, float scale, float* out) {
  for (int i = 0; i < d; ++i) out[i] = fp8_kv_decode(codes[i], scale);
}

// Cache bytes per element, scales included (a per-kv-head scale is amortized over all tokens).
constexpr double fp8_kv_bytes_per_element(int head_dim, Fp8ScaleGranularity granularity) {
  constexpr double kScaleBytes = sizeof(float);
  return granularity == Fp8ScaleGranularity::per_token_kv_head ? 1.0 + kScaleBytes / head_dim : 1.0;
}

}  // namespace hfa::quant
