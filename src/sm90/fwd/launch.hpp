// Host entry of the forward kernels: one function per (head dim, element type), instantiated
// in its own translation unit (instantiations/) so the build compiles them in parallel.
#pragma once

#include "common/problem.hpp"

namespace hfa::sm90::fwd {

struct LaunchContext {
  int sm_count;
  std::size_t l2_bytes;
};

template <int kHeadDim, typename Element>
Status run_forward(const detail::ForwardProblem& problem, const LaunchContext& context);

}  // namespace hfa::sm90::fwd
