// FlashMLA's FP8 MLA cache token (DeepSeek-V3.2's "FP8 with scale" layout): one 656-byte record
// per token holding the 576-wide absorbed-MLA key [latent (512) ; rotary (64)], whose first 512
// values are also the token's value.
//
// Record layout (bytes):
//   [0, 512)    the latent values, E4M3 codes, in 4 tiles of 128
//   [512, 528)  4 fp32 scales, little-endian, scales[t] for latent values [128t, 128t + 128)
//   [528, 656)  the 64 rotary values, bf16, not quantized (positions are precision sensitive)
// value = e4m3 · scales[c / 128] for c < 512, the bf16 value for c >= 512.
//
// The encoder is FlashMLA's reference quantizer's rule: scale = the smallest power of two >=
// max(amax_tile / 448, 1e-4), so the tile's largest element lands in E4M3's top binade and the
// scale is exact in UE8M0 too. A tile holding inf or NaN gets a NaN scale and decodes to NaN.
// The decoder takes any fp32 scale (the record stores fp32; other writers may choose others).
#pragma once

#include <cstdint>

#include "common/half_float.hpp"
#include "quant/fp8_kv.hpp"

namespace hfa::quant {

inline constexpr int kMlaLatentDim = 512;  // values per record that are also V
inline constexpr int kMlaRopeDim = 64;
inline constexpr int kMlaHeadDim = kMlaLatentDim + kMlaRopeDim;  // 576: K's values per record
inline constexpr int kMlaTile = 128;                             // latent values per scale
inline constexpr int kMlaTiles = kMlaLatentDim / kMlaTile;
inline constexpr int kMlaScaleOffset = kMlaLatentDim;                     // 512
inline constexpr int kMlaRopeOffset = kMlaScaleOffset + kMlaTiles * 4;    // 528
inline constexpr int kMlaRecordBytes = kMlaRopeOffset + kMlaRopeDim * 2;  // 656
static_assert(kMlaRecordBytes == 656, "FlashMLA's V3.2 FP8 token is 656 bytes");

// FlashMLA's floor on amax / 448 before rounding up to a power of two.
inline constexpr float kMlaMinScale = 1e-4f;

// The smallest power of two >= max(amax / 448, 1e-4); NaN for an inf or NaN amax.
HFA_HD inline float mla_fp8_scale(float amax) {
  if (!is_finite(amax)) return from_bits(fp32::kCanonicalNaN);
  float s = div_rn(amax, E4M3::kMax);
  if (s < kMlaMinScale) s = kMlaMinScale;
  const uint32_t b = bits_of(s);
  if ((b & fp32::kMantissaMask) == 0) return s;  // a power of two already
  // Drop the mantissa and step the exponent: the next power of two up (s is normal, >= 1e-4).
  return from_bits(((b >> fp32::kMantissaBits) + 1) << fp32::kMantissaBits);
}

// The 4 scales of a record (unaligned reads: a record need not start at a 4-byte boundary).
HFA_HD inline float mla_fp8_tile_scale(const uint8_t* record, int tile) {
  const uint8_t* at = record + kMlaScaleOffset + 4 * tile;
  const uint32_t bits =
      uint32_t{at[0]} | uint32_t{at[1]} << 8 | uint32_t{at[2]} << 16 | uint32_t{at[3]} << 24;
  return from_bits(bits);
}

// Values [first, first + count) of a record into out[0, count); count <= 576 - first.
HFA_HD inline void mla_fp8_decode_columns(const uint8_t* record, int first, int count, float* out) {
  for (int i = 0; i < count; ++i) {
    const int c = first + i;
    if (c < kMlaLatentDim) {
      out[i] = fp8_kv_decode(record[c], mla_fp8_tile_scale(record, c / kMlaTile));
    } else {
      const uint8_t* at = record + kMlaRopeOffset + 2 * (c - kMlaLatentDim);
      out[i] = detail::bf16_to_float(static_cast<uint16_t>(at[0] | at[1] << 8));
    }
  }
}

// The 576 values x of a token written as its record.
HFA_HD inline void mla_fp8_quantize_row(const float* x, uint8_t* record) {
  for (int t = 0; t < kMlaTiles; ++t) {
    const float scale = mla_fp8_scale(amax_abs(x + t * kMlaTile, kMlaTile));
    for (int c = t * kMlaTile; c < (t + 1) * kMlaTile; ++c)
      record[c] = e4m3_encode(div_rn(x[c], scale));
    const uint32_t bits = bits_of(scale);
    for (int k = 0; k < 4; ++k)
      record[kMlaScaleOffset + 4 * t + k] = static_cast<uint8_t>(bits >> (8 * k));
  }
  for (int c = 0; c < kMlaRopeDim; ++c) {
    const uint16_t bits = detail::float_to_bf16(x[kMlaLatentDim + c]);
    record[kMlaRopeOffset + 2 * c] = static_cast<uint8_t>(bits);
    record[kMlaRopeOffset + 2 * c + 1] = static_cast<uint8_t>(bits >> 8);
  }
}

}  // namespace hfa::quant
