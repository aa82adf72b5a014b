// Host entry of the forward kernels: one function per (head dims, element type), instantiated
// in its own translation unit (instantiations/) so the build compiles them in parallel.
#pragma once

#include <cstddef>

#include "common/environment.hpp"
#include "common/problem.hpp"

namespace hfa::sm90::fwd {

inline constexpr const char* kFamily = "sm90 forward";  // names the kernels in messages

struct LaunchContext {
  int sm_count;
  std::size_t l2_bytes;
};

// Whether PackGQA may be used (HFA_SM90_PACK_GQA=0 turns it off).
inline bool pack_gqa_enabled() { return detail::environment().sm90_pack_gqa; }

// Whether keys are limited by a window (causal or sliding): the kernels with masked diagonals
// and the dynamic schedule.
inline bool uses_window(const detail::ForwardProblem& problem) { return problem.has_window(); }

// The caller's workspace: a tile counter for the windowed (dynamic) schedule. 16 bytes keeps any
// caller's sub-allocation aligned.
inline constexpr std::size_t kTileCounterBytes = 16;

inline std::size_t workspace_bytes(const detail::ForwardProblem& problem) {
  return uses_window(problem) ? kTileCounterBytes : 0;
}

// One per compiled configuration (common/kernel_list.def; the build writes a translation unit
// for each). A problem runs on the smallest that holds it (kernel_list.hpp), padded with zeros.
template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_forward(const detail::ForwardProblem& problem, const LaunchContext& context);

}  // namespace hfa::sm90::fwd
