// exp2 on the FMA units (FlashAttention-4's trick, usable on Hopper in scalar form).
//
// MUFU.EX2 issues 16 exponentials per clock per SM; at small head dims that is as slow as the
// tensor cores, so the softmax waits on it. Computing a fraction of the exponentials with a
// polynomial moves that work to the otherwise idle FMA and ALU pipes.
#pragma once

#include <cstdint>

namespace hfa::sm90::fwd {

// 2^x for x <= 0 (x >= -127 after clamping; below that 2^-127 stands in for 0, so callers must
// not feed masked −inf scores). Split x = j + f with j = floor(x), f in [0, 1); 2^f by a
// degree-3 minimax polynomial (relative error < 9e-5, far below bf16's 4e-3); 2^j by adding j
// to the exponent bits.
__device__ __forceinline__ float exp2_polynomial(float x) {
  constexpr float kRoundingShift = 12582912.0f;  // 1.5·2^23: adding it leaves floor(x) in the low mantissa bits
  constexpr float kC1 = 0.6951461434f, kC2 = 0.2275643945f, kC3 = 0.0771190897f;
  x = fmaxf(x, -127.0f);
  const float shifted = __fadd_rd(x, kRoundingShift);  // round down: floor
  const float j = shifted - kRoundingShift;
  const float f = x - j;
  const float p = fmaf(fmaf(fmaf(kC3, f, kC2), f, kC1), f, 1.0f);
  // The low bits of `shifted` hold j in two's complement; shifting by 23 drops the rest.
  const uint32_t bits = __float_as_uint(p) + (__float_as_uint(shifted) << 23);
  return __uint_as_float(bits);
}

}  // namespace hfa::sm90::fwd
