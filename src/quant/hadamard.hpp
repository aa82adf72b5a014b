// The randomized Walsh–Hadamard rotation of a row (incoherent processing, FlashAttention-3
// §3.3): y = H_d · diag(signs) · x / sqrt(d), orthogonal, so rotating q and k with the same signs
// leaves q·kᵀ unchanged while an outlier spreads over the whole row.
//
// The CPU and a GPU must write the same FP8 bytes, so the order of operations is fixed here:
//   1. x[i] gets signs[i]'s sign bit xor-ed into its own (exact).
//   2. Stages h = 1, 2, 4, ..., d/2 in that order; in stage h every pair (i, i + h) with bit h of
//      i clear becomes (x[i] + x[i + h], x[i] − x[i + h]). This is H_d in Sylvester order,
//      H[i][j] = (−1)^popcount(i & j), unnormalized.
//   3. Every element times hadamard_norm(d) = fp32(1/sqrt(d)) (exact for d = 64 and 256).
// Only sums and differences, then one product: nothing that could be fused into an FMA. The
// pairs of a stage are independent, so any schedule of them (a GPU's lanes and shuffles) gives
// the same bits. Subnormal values become signed zero on the way (float_bits.hpp's ftz ops).
#pragma once

#include <cstdint>

#include "quant/float_bits.hpp"

namespace hfa::quant {

// The head dims the rotation is offered for: the FP8 forward's (64 runs padded to 128 there).
HFA_HD constexpr bool hadamard_supports(int64_t d) { return d == 64 || d == 128 || d == 256; }

HFA_HD constexpr float hadamard_norm(int d) {
  return d == 64 ? 0.125f : d == 128 ? 0.0883883476483184405501f : 0.0625f;
}

// Sign i of the signs made from `seed`: the i-th output of splitmix64 started at seed (each
// computable alone, so a GPU fills them in parallel), negative when its top bit is set.
HFA_HD constexpr float hadamard_sign(uint64_t seed, int64_t i) {
  uint64_t z = seed + (static_cast<uint64_t>(i) + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (z >> 63) != 0 ? -1.0f : 1.0f;
}

// x with the sign of `sign` applied (multiplication by ±1, done on the bits).
HFA_HD constexpr float apply_sign(float x, float sign) {
  return from_bits(bits_of(x) ^ (bits_of(sign) & fp32::kSignMask));
}

HFA_HD inline void butterfly(float& low, float& high) {
  const float sum = ftz<FtzOp::add>(low, high);
  high = ftz<FtzOp::sub>(low, high);
  low = sum;
}

// The rotation in place, in the order above; d a power of two.
HFA_HD inline void hadamard_rotate(float* x, int d, const float* signs) {
  for (int i = 0; i < d; ++i) x[i] = apply_sign(x[i], signs[i]);
  for (int h = 1; h < d; h *= 2)
    for (int i = 0; i < d; ++i)
      if ((i & h) == 0) butterfly(x[i], x[i + h]);
  const float norm = hadamard_norm(d);
  for (int i = 0; i < d; ++i) x[i] = ftz<FtzOp::mul>(x[i], norm);
}

}  // namespace hfa::quant
