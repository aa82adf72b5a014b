// Host entry of the forward kernels: one function per (head dim, element type), instantiated
// in its own translation unit (instantiations/) so the build compiles them in parallel.
#pragma once

#include "common/problem.hpp"

namespace hfa::sm90::fwd {

struct LaunchContext {
  int sm_count;
  std::size_t l2_bytes;
};

// The caller's workspace: a tile counter for the causal (dynamic) schedule. 16 bytes keeps any
// caller's sub-allocation aligned.
inline constexpr std::size_t kTileCounterBytes = 16;

inline std::size_t workspace_bytes(const detail::ForwardProblem& problem) {
  return problem.causal ? kTileCounterBytes : 0;
}

template <int kHeadDim, typename Element>
Status run_forward(const detail::ForwardProblem& problem, const LaunchContext& context);

}  // namespace hfa::sm90::fwd
