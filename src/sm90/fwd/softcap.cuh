// Softcap (Gemma 2, Grok): scores pass through c·tanh(s/c) before the softmax. The factor c is
// folded into scale_log2 (params.hpp), so here a score only becomes tanh(s·softmax_scale/c).
#pragma once

#include <cstdint>

// Lever (measured in bench/results): the reciprocal of tanh's formula by Newton steps on the
// FMA pipes instead of MUFU.RCP, leaving the MUFU unit two operations per score instead of three.
#ifndef HFA_SM90_SOFTCAP_RCP_ON_FMA
#define HFA_SM90_SOFTCAP_RCP_ON_FMA 0
#endif

namespace hfa::sm90::fwd {

// 1/x for x in [1, 2^64]: a bit-pattern first guess (~3.5 bits) and three Newton steps, each
// squaring the relative error (→ ~2^-24).
__device__ __forceinline__ float reciprocal_on_fma(float x) {
  constexpr uint32_t kMagic = 0x7EF311C3u;  // reciprocal's exponent and a minimax mantissa guess
  float r = __uint_as_float(kMagic - __float_as_uint(x));
#pragma unroll
  for (int step = 0; step < 3; ++step) r *= fmaf(-x, r, 2.0f);
  return r;
}

// tanh(x) = 1 − 2/(2^(2·log2(e)·x) + 1): one MUFU exp2 and one reciprocal, each within a few
// ulp. tanh.approx.f32 would be one instruction but errs by up to 2^-11, which the factor c
// (30-50 in practice) turns into ~2 % error on a probability. Saturates to ±1 for large |x|.
template <int kAcc>
__device__ __forceinline__ void apply_softcap(float (&s)[kAcc], float prescale) {
  constexpr float kTwoLog2e = 2.8853900817779268f;
  // 2^64 + 1 keeps the reciprocal's argument finite; tanh is 1 to fp32 long before.
  constexpr float kMaxExponent = 64.0f;
  const float to_exponent = prescale * kTwoLog2e;
#pragma unroll
  for (int i = 0; i < kAcc; ++i) {
    if constexpr (HFA_SM90_SOFTCAP_RCP_ON_FMA) {
      const float exponent = s[i] * to_exponent;
      // Written so that a NaN score stays NaN (fminf would return the bound).
      const float e = exp2f(exponent > kMaxExponent ? kMaxExponent : exponent);
      s[i] = fmaf(-2.0f, reciprocal_on_fma(e + 1.0f), 1.0f);
    } else {
      s[i] = 1.0f - __fdividef(2.0f, exp2f(s[i] * to_exponent) + 1.0f);
    }
  }
}

}  // namespace hfa::sm90::fwd
