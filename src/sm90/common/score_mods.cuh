// The score policy's modifiers (src/common/score_policy.hpp) applied to a tile in registers. The
// kernels' tile configurations name the modifiers (TileConfig::Mods: none, softcap or ALiBi, from
// their launch's switches), the per-problem values come from the kernel's parameters, and each
// kernel transforms its scores in one place: the forward in fwd/mainloop.cuh's softmax_step, the
// backward in bwd/mainloop.cuh's probabilities (its factor in score_gradients); decode
// (decode/tile_consumer.cuh, stream_consumer.cuh) calls the policy's SoftcapLog2 in its uniform branch.
#pragma once

#include <type_traits>

#include "common/score_policy.hpp"
#include "sm90/ptx/fragment.cuh"

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

// The modifiers of the rows of one (sequence, query head) where they depend on it (ALiBi's
// slope): loaded once a tile (the forward) or a head (the backward) and kept while its key
// blocks pass. Without a softcap: the GPU compiles no policy of both (ListedMods).
template <typename Mods>
__device__ __forceinline__ Mods row_score_mods(const policy::AlibiSlopes& alibi, int batch,
                                               int head) {
  static_assert(std::is_same_v<decltype(Mods{}.cap), policy::NoScoreMod>);
  Mods mods{};
  if constexpr (std::is_same_v<decltype(mods.bias), policy::Alibi>) {
    mods.bias = alibi.of(batch, head);
  }
  return mods;
}

// Transforms one thread's accumulator of a tile. Position-free modifiers; the positional ones
// take the overload below.
template <typename Mods, int kAcc>
__device__ __forceinline__ void apply_score_mods(float (&s)[kAcc], const Mods& mods) {
  static_assert(!Mods::kPositional, "positional modifiers take the fragment's diagonal");
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

// The same for a positional policy (ALiBi). Each row half of the thread's fragment has its own
// modifiers (the forward's PackGQA rows of one tile belong to several heads, so each half may
// have its own slope) and the column of its diagonal, counted from the thread's first column
// (fragment_column(i, 0) = 0): where the row's query faces the key, i + seqlen_k − seqlen_q = j.
// A score's distance is then |diagonal_column − fragment_column(i, 0)|, which fwd/mask.cuh's and
// bwd/mask.cuh's fragment_diagonal compute from the rule the masks use. A float, so that a score
// costs one FADD (its immediate column) and one FMA.
template <typename Mods, int kAcc>
__device__ __forceinline__ void apply_score_mods(float (&s)[kAcc], const Mods (&row_mods)[2],
                                                 const float (&diagonal_column)[2]) {
  static_assert(Mods::kPositional && !Mods::kScalesGrad, "an additive positional policy");
#pragma unroll
  for (int i = 0; i < kAcc; ++i) {
    const int half = ptx::fragment_row_half(i);
    const float offset = diagonal_column[half] - float(ptx::fragment_column(i, 0));
    s[i] = row_mods[half].score_at_offset(s[i], offset);
  }
}

}  // namespace hfa::sm90
