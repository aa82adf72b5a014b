// The score policy's modifiers (common/score_policy.hpp) as the CPU's scalar paths apply them,
// one score at a time: the float64 oracle, its fp32 peer (reference.cpp, reference_kvcache.cpp)
// and the KV-cache forward (kvcache.cpp). The tiled kernels apply the same modifiers a tile at a
// time (tiled_common.hpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/score_policy.hpp"

namespace hfa::cpu {

// ALiBi's slope of (sequence b, query head h) as given (problem.vectors.alibi_slopes), 0 without
// ALiBi. Problem: a ForwardProblem or a KVCacheProblem.
template <class Problem>
float alibi_slope(const Problem& p, int64_t b, int64_t h) {
  return p.vectors.alibi_slopes ? p.vectors.alibi_slopes.template at<float>(b, h) : 0.0f;
}

// The softcap on a logit, s → c·tanh(s/c), in the score's own precision: the policy's Softcap is
// the kernels' form (tanh of the prescaled score through exp2, its factor a float, ~1e-8
// relative), which the float64 oracle's checks would see. Its derivative, the policy's 1 − tanh²,
// is taken at tanh = output / c.
struct LogitSoftcap {
  static constexpr bool kPositional = false;
  static constexpr bool kScalesGrad = true;

  float cap;

  template <class Real>
  Real score(Real s, const policy::ScorePosition& = {}) const {
    return Real(cap) * std::tanh(s / Real(cap));
  }
  template <class Real>
  Real derivative(Real capped) const {
    return policy::Softcap{}.derivative(capped / Real(cap));
  }
};

// policy::ScoreMods (a softcap, then ALiBi) on a logit s = softmax_scale·q·k: the modifiers in
// the units of logits, ALiBi's slope as given.
class LogitMods {
 public:
  LogitMods(float softcap, float alibi_slope)
      : softcapped_(softcap > 0.0f),
        capped_{{softcap}, policy::Alibi::in_units(alibi_slope, 1.0f)},
        uncapped_{{}, capped_.bias} {}
  // The modifiers of (sequence b, query head h) of a problem: its softcap and ALiBi slope.
  template <class Problem>
  LogitMods(const Problem& p, int64_t b, int64_t h) : LogitMods(p.softcap, alibi_slope(p, b, h)) {}

  // The logit of s, the score of the pair `at`.
  template <class Real>
  Real logit(Real s, const policy::ScorePosition& at) const {
    return softcapped_ ? capped_.score(s, at) : uncapped_.score(s, at);
  }
  // The same; factor gets the backward's dS factor (1 − tanh² under a softcap, else 1).
  template <class Real>
  Real logit(Real s, const policy::ScorePosition& at, Real& factor) const {
    return softcapped_ ? capped_.score(s, at, factor) : uncapped_.score(s, at, factor);
  }

 private:
  bool softcapped_;
  policy::ScoreMods<LogitSoftcap, policy::Alibi> capped_;
  policy::ScoreMods<policy::NoScoreMod, policy::Alibi> uncapped_;
};

}  // namespace hfa::cpu
