// The score policy's modifiers (src/common/score_policy.hpp) applied to a tile in registers. The
// kernels' tile configurations name the modifiers (TileConfig::Mods, from the kernel list's
// softcap switch), the per-problem values come from the kernel's parameters, and each kernel
// transforms its scores in one place: the forward in fwd/mainloop.cuh's softmax_step, the
// backward in bwd/mainloop.cuh's probabilities (its factor in score_gradients); decode
// (decode/kernel.cuh, stream_kernel.cuh) calls the policy's SoftcapLog2 in its uniform branch.
#pragma once

#include <type_traits>

#include "common/score_policy.hpp"

namespace hfa::sm90 {

// The modifiers' values: a softcap's from its prescale (softmax_scale / c, folded with FP8's q·k
// scale in the forward). Built where the tile is transformed, so that nothing stays live between.
template <typename Mods>
__device__ __forceinline__ Mods score_mods(float softcap_prescale) {
  Mods mods{};
  if constexpr (std::is_same_v<decltype(mods.cap), policy::Softcap>) {
    mods.cap = policy::Softcap::from_prescale(softcap_prescale);
  }
  return mods;
}

// Transforms one thread's accumulator of a tile. Position-free modifiers only. A positional one
// (ALiBi) takes an overload with the fragment's coordinates: register i holds the query of row
// half fragment_row_half(i) (per half, since PackGQA's rows map to queries and heads through
// query_of_row, the heads giving each half its slope) and the key first_key +
// fragment_column(i, 0), as fwd/mask.cuh computes them (bwd/mask.cuh transposed).
template <typename Mods, int kAcc>
__device__ __forceinline__ void apply_score_mods(float (&s)[kAcc], const Mods& mods) {
  static_assert(!Mods::kPositional, "positional modifiers: not instantiated on the GPU yet");
  if constexpr (!Mods::kIdentity) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) s[i] = mods.score(s[i]);
  }
}

// The same, keeping the backward's dS factor of each score (softcap: 1 − tanh²). Two passes, the
// scores first, as the kernels had them.
template <typename Mods, int kAcc, int kFactorAcc>
__device__ __forceinline__ void apply_score_mods(float (&s)[kAcc], float (&factor)[kFactorAcc],
                                                 const Mods& mods) {
  apply_score_mods(s, mods);
  if constexpr (Mods::kScalesGrad) {
    static_assert(kFactorAcc == kAcc);
#pragma unroll
    for (int i = 0; i < kAcc; ++i) factor[i] = mods.cap.derivative(s[i]);
  }
}

}  // namespace hfa::sm90
