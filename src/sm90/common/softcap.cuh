// Softcap (Gemma 2, Grok): scores pass through c·tanh(s/c) before the softmax. The factor c is
// folded into scale_log2 (fwd/params.hpp, bwd/params.hpp), so here a score only becomes
// tanh(s·softmax_scale/c). The backward also needs the derivative, 1 − tanh².
#pragma once

namespace hfa::sm90 {

// tanh(x) = 1 − 2/(2^(2·log2(e)·x) + 1): one MUFU exp2 and one reciprocal, each within a few
// ulp. tanh.approx.f32 would be one instruction but errs by up to 2^-11, which the factor c
// (30-50 in practice) turns into ~2 % error on a probability. Saturates to ±1 for large |x|.
// Measured and rejected (docs/decisions/021): the reciprocal by Newton steps on the FMA
// pipes instead of MUFU.RCP was 5-12 % slower and made more kernels spill.
template <int kAcc>
__device__ __forceinline__ void apply_softcap(float (&s)[kAcc], float prescale) {
  constexpr float kTwoLog2e = 2.8853900817779268f;
  const float to_exponent = prescale * kTwoLog2e;
#pragma unroll
  for (int i = 0; i < kAcc; ++i) {
    s[i] = 1.0f - __fdividef(2.0f, exp2f(s[i] * to_exponent) + 1.0f);
  }
}

}  // namespace hfa::sm90
