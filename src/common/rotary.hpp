// Rotary position embedding (RoPE) as the KV-cache append applies it, shared by the CPU append
// and the GPU one: which columns rotate together, which position a query row rotates by, and
// the rotation of one pair. Written once so both sides give the same bits.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"
#include "quant/float_bits.hpp"

namespace hfa::detail {

// The two columns frequency j (of rotary_dim / 2) turns: (2j, 2j + 1) interleaved (GPT-J), else
// (j, j + rotary_dim / 2) (GPT-NeoX). Columns from rotary_dim on are not rotated.
struct RotaryPair {
  int first;
  int second;
};

HFA_HD constexpr RotaryPair rotary_pair(int j, int rotary_dim, bool interleaved) {
  return interleaved ? RotaryPair{2 * j, 2 * j + 1} : RotaryPair{j, j + rotary_dim / 2};
}

// The frequency whose pair holds `column` (< rotary_dim): rotary_pair's inverse, for code that
// produces one column at a time.
HFA_HD constexpr int rotary_frequency(int column, int rotary_dim, bool interleaved) {
  return interleaved ? column / 2 : column % (rotary_dim / 2);
}

// The position query row i of a sequence with `cache_length` cached tokens rotates by:
// cache_length + i when a mask (causal or a window) tells the rows apart, else cache_length
// (FlashAttention's rule: without a mask every query is "now"). New key i sits at cache_length + i.
HFA_HD constexpr int64_t rotary_query_position(int64_t cache_length, int64_t i, int32_t window_left,
                                               int32_t window_right) {
  const bool masked = window_left >= 0 || window_right >= 0;  // causal is window_right = 0
  return cache_length + (masked ? i : 0);
}

struct RotatedPair {
  float first;
  float second;
};

// IEEE fp32 product, sum and difference, rounded once each. On the device an explicit .rn keeps
// ptxas from fusing them into an FMA, and inline PTX keeps --use_fast_math's -ftz away (even a
// negation would flush), so subnormals survive as on the host (whose ISO C++ build does not
// contract either).
HFA_HD inline float rotary_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a * b;
#endif
}

HFA_HD inline float rotary_add(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a + b;
#endif
}

HFA_HD inline float rotary_sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a - b;
#endif
}

// NaN payloads differ between a CPU and a GPU: every NaN leaves as the codecs' canonical one.
HFA_HD constexpr float rotary_canonical_nan(float x) {
  return quant::is_nan(x) ? quant::from_bits(quant::fp32::kCanonicalNaN) : x;
}

// (a, b) turned by the angle whose cosine and sine are (c, s): (a·c − b·s, a·s + b·c).
HFA_HD inline RotatedPair rotate_pair(float a, float b, float c, float s) {
  const float first = rotary_sub(rotary_mul(a, c), rotary_mul(b, s));
  const float second = rotary_add(rotary_mul(a, s), rotary_mul(b, c));
  return {rotary_canonical_nan(first), rotary_canonical_nan(second)};
}

}  // namespace hfa::detail
