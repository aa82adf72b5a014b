// Quantized cache codes to the mma element type (bf16 or fp16), in registers, on the way from
// the code tile to the dequantized tile in shared memory.
//
// E2M1 (FP4) without a lookup table: a table in shared memory costs one LDS per two values and
// bank conflicts (random indices), which is more than the whole budget. Instead the nibble's
// three magnitude bits are moved into the low exponent and top mantissa bits of a 16-bit float
// whose other exponent bits are zero. The float's own subnormals then give E2M1's subnormal
// (e = 0) for free: the result is exactly e2m1 · 2^-14 in fp16 (e2m1 · 2^-126 in bf16). The sign
// bit is moved separately. Nibbles i and i + 4 of a 32-bit word sit 16 bits apart, as the two
// halves of a register, so one shift and mask serves both: a word of 8 values gives the pairs
// (0, 4), (1, 5), (2, 6), (3, 7). The kernel stores them in that order and permutes q's columns
// (and un-permutes the output's) to match, which costs nothing per cache element.
// Per 8 values: 7 shifts, 8 logic ops, 4 multiplies by the block scale (HMUL2): about 2.4
// instructions per value, plus 1/8 of a 16-byte shared store.
//
// The block scale multiplies in the element type, exactly: e2m1 has 2 significant bits, an E4M3
// scale 4, so a product has at most 6, and the constant exponents below keep every product of
// the formats' ranges inside the normal range (the rest of the true multiplier, a power of two,
// is applied in fp32 to the scores or the output).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "sm90/decode/params.hpp"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::decode {

template <typename Element>
inline constexpr bool kIsBf16 = std::is_same_v<Element, __nv_bfloat16>;

// What the E2M1 bit placement multiplies a value by: 2^-14 (fp16) or 2^-126 (bf16).
template <typename Element>
inline constexpr int kE2m1PlacementExponent = kIsBf16<Element> ? -126 : -14;

// Products are value · 2^-kProductShift; the scores and outputs get 2^kProductShift back in fp32.
// NVFP4: value = e2m1 · e4m3 ≤ 6 · 448; 2^-7 keeps 448 · 2^7 (the fp16 multiplier) below 65504.
inline constexpr int kNvfp4ProductShift = 7;
// MXFP4 (a power-of-two scale): bf16 covers block scales up to 2^65 with a shift of 64; fp16,
// whose range is narrow, is exact for block scales 2^-11 … 2^13 with a shift of 12.
template <typename Element>
inline constexpr int kMxfp4ProductShift = kIsBf16<Element> ? 64 : 12;

template <int kShift>
__device__ __forceinline__ uint32_t shift_left(uint32_t x) {
  if constexpr (kShift >= 0) return x << kShift;
  else return x >> -kShift;
}

// Values i and i + 4 of the word (nibble i = value i) as a pair of Elements, times the
// placement factor. Both halves move together: their nibbles are 16 bits apart.
template <typename Element, int kPair>
__device__ __forceinline__ uint32_t e2m1_pair(uint32_t word) {
  constexpr int kNibble = 4 * kPair;
  constexpr int kSignBit = 3;
  constexpr int kMagnitudeTarget = kIsBf16<Element> ? 6 : 9;  // exponent low bits + mantissa top
  constexpr uint32_t kMagnitudeMask = kIsBf16<Element> ? 0x01C001C0u : 0x0E000E00u;
  constexpr uint32_t kSignMask = 0x80008000u;
  const uint32_t magnitude = shift_left<kMagnitudeTarget - kNibble>(word) & kMagnitudeMask;
  const uint32_t sign = shift_left<15 - kSignBit - kNibble>(word) & kSignMask;
  return magnitude | sign;
}

template <typename Element>
__device__ __forceinline__ uint32_t multiply_pairs(uint32_t a, uint32_t b) {
  if constexpr (kIsBf16<Element>) {
    const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                     *reinterpret_cast<const __nv_bfloat162*>(&b));
    return *reinterpret_cast<const uint32_t*>(&r);
  } else {
    const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a),
                              *reinterpret_cast<const __half2*>(&b));
    return *reinterpret_cast<const uint32_t*>(&r);
  }
}

// A float multiplier as a pair register (both halves equal). Powers of two and E4M3 values
// times powers of two in range convert exactly.
template <typename Element>
__device__ __forceinline__ uint32_t broadcast_pair(float multiplier) {
  if constexpr (kIsBf16<Element>) {
    const __nv_bfloat162 r = __float2bfloat162_rn(multiplier);
    return *reinterpret_cast<const uint32_t*>(&r);
  } else {
    const __half2 r = __float2half2_rn(multiplier);
    return *reinterpret_cast<const uint32_t*>(&r);
  }
}

__device__ __forceinline__ float power_of_two(int exponent) {
  if (exponent > 127) return __int_as_float(0x7f800000);  // inf: the range ends here, loudly
  if (exponent < -126) return 0.0f;
  return __int_as_float((exponent + 127) << 23);
}

// Two NVFP4 blocks' multipliers (their scale bytes, the first in the low byte): the E4M3 values,
// decoded by the hardware (NaN stays NaN), times 2^(-placement - shift) in fp32: exact.
template <typename Element>
__device__ __forceinline__ float2 nvfp4_block_scales(uint16_t scale_codes) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(scale_codes, __NV_E4M3);
  const float2 scales = __half22float2(__half2(raw));
  const float shift = power_of_two(-kE2m1PlacementExponent<Element> - kNvfp4ProductShift);
  return make_float2(scales.x * shift, scales.y * shift);
}

// Two adjacent blocks of one row: each multiplier as a pair register (both halves equal).
template <typename Element>
__device__ __forceinline__ void nvfp4_block_multipliers(uint16_t scale_codes, uint32_t& first,
                                                        uint32_t& second) {
  const float2 scales = nvfp4_block_scales<Element>(scale_codes);
  first = broadcast_pair<Element>(scales.x);
  second = broadcast_pair<Element>(scales.y);
}

template <typename Element>
__device__ __forceinline__ uint32_t mxfp4_block_multiplier(uint8_t scale_code) {
  constexpr uint8_t kNaNCode = 0xff;
  constexpr int kBias = 127;
  if (scale_code == kNaNCode) return broadcast_pair<Element>(__int_as_float(0x7fc00000));
  return broadcast_pair<Element>(power_of_two(int(scale_code) - kBias -
                                              kE2m1PlacementExponent<Element> -
                                              kMxfp4ProductShift<Element>));
}

// 8 E2M1 values (one word) times one block multiplier: 4 pair registers in the order
// (0, 4), (1, 5), (2, 6), (3, 7).
template <typename Element>
__device__ __forceinline__ uint4 e2m1x8_scaled(uint32_t word, uint32_t multiplier) {
  uint4 r;
  r.x = multiply_pairs<Element>(e2m1_pair<Element, 0>(word), multiplier);
  r.y = multiply_pairs<Element>(e2m1_pair<Element, 1>(word), multiplier);
  r.z = multiply_pairs<Element>(e2m1_pair<Element, 2>(word), multiplier);
  r.w = multiply_pairs<Element>(e2m1_pair<Element, 3>(word), multiplier);
  return r;
}

// The stored position of column c within its group of 8 for FP4 tiles, and back: stored order
// 0, 4, 1, 5, 2, 6, 3, 7.
__host__ __device__ constexpr int fp4_stored_to_column(int stored) {
  return (stored & ~7) | ((stored & 1) ? 4 + ((stored & 7) >> 1) : ((stored & 7) >> 1));
}

// 4 E4M3 codes (one word) as 4 Elements, times row_scale (1 when the scale is folded elsewhere).
template <typename Element, bool kScaled>
__device__ __forceinline__ uint2 e4m3x4_to(uint32_t word, float row_scale) {
  const __half2_raw lo_raw = __nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(word & 0xffffu), __NV_E4M3);
  const __half2_raw hi_raw = __nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(word >> 16), __NV_E4M3);
  uint2 r;
  if constexpr (!kIsBf16<Element> && !kScaled) {
    r.x = *reinterpret_cast<const uint32_t*>(&lo_raw);
    r.y = *reinterpret_cast<const uint32_t*>(&hi_raw);
  } else {
    const float2 lo = __half22float2(__half2(lo_raw));
    const float2 hi = __half22float2(__half2(hi_raw));
    const float s = kScaled ? row_scale : 1.0f;
    r.x = ptx::pack_pair<Element>(lo.x * s, lo.y * s);
    r.y = ptx::pack_pair<Element>(hi.x * s, hi.y * s);
  }
  return r;
}

// 16 E4M3 codes (a 16-byte chunk) as 16 Elements, the first 8 in lo, times row_scale.
template <typename Element, bool kScaled>
__device__ __forceinline__ void e4m3x16_to(uint4 codes, float row_scale, uint4& lo, uint4& hi) {
  const uint2 a = e4m3x4_to<Element, kScaled>(codes.x, row_scale);
  const uint2 b = e4m3x4_to<Element, kScaled>(codes.y, row_scale);
  const uint2 c = e4m3x4_to<Element, kScaled>(codes.z, row_scale);
  const uint2 d = e4m3x4_to<Element, kScaled>(codes.w, row_scale);
  lo = make_uint4(a.x, a.y, b.x, b.y);
  hi = make_uint4(c.x, c.y, d.x, d.y);
}

// The constant a side's codes are multiplied by, beyond what the tile holds: the FP8 per-head
// scale, NVFP4's global scale, the FP4 product shifts (above).
template <typename Element>
__device__ __forceinline__ float side_multiplier(const Params& p, const CacheView& side,
                                                 int kv_head) {
  switch (p.scale_kind) {
    case ScaleKind::fp8_per_head: return side.head_scale[kv_head * side.head_scale_stride];
    case ScaleKind::nvfp4: return *side.global_scale * power_of_two(kNvfp4ProductShift);
    case ScaleKind::mxfp4: return power_of_two(kMxfp4ProductShift<Element>);
    default: return 1.0f;
  }
}

}  // namespace hfa::sm90::decode
