// 2^x on the FMA pipes, for a phase that waits on MUFU.EX2 (16 exponentials a clock an SM)
// while the FMA pipes have room: the backward's P at head dim 64, where the two consumer
// warpgroups' exponentials coincide and the tensor pipe idles under them (docs/decisions/041,
// 042).
#pragma once

namespace hfa::sm90 {

// 2^round(x) goes straight into the exponent; 2^r for the rest (|r| ≤ 1/2) is a cubic fitted
// for relative error: 7.5e-5 at most, below bf16's 2^-9, which P is rounded to before its GEMMs.
// x is clamped at -126 first, so that -inf (a masked score) gives a subnormal below 2^-126 (0
// after any flushing op) rather than an exponent that wrapped.
__device__ __forceinline__ float exp2_on_fma_pipes(float x) {
  constexpr float kRoundingShift = 12582912.0f;  // 1.5 · 2^23: x + it rounds x to an integer
  x = fmaxf(x, -126.0f);
  const float shifted = x + kRoundingShift;
  const float r = x - (shifted - kRoundingShift);
  float poly = fmaf(0.055171336978673935f, r, 0.24261032044887543f);
  poly = fmaf(poly, r, 0.6932609677314758f);
  poly = fmaf(poly, r, 0.9999281167984009f);
  // round(x) sits in shifted's low mantissa bits: << 23 moves it into the exponent (mod 2^32).
  return __int_as_float(__float_as_int(poly) + (__float_as_int(shifted) << 23));
}

}  // namespace hfa::sm90
