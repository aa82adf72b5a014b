// Host side of the GPU append (k_new / v_new, rotary): what it supports, the workspace it takes
// for the rotated queries, and its launch before the attention (append_kernel.cuh).
#pragma once

#include <cstddef>

#include "common/kvcache_problem.hpp"

namespace hfa::sm90::decode {

// ok without k_new; else ok, or not_supported naming the argument the GPU append cannot take.
Status check_append_support(const detail::KVCacheProblem& problem);

// Workspace bytes of the rotated queries (0 without rotary): the front of the caller's
// workspace, a multiple of kAppendWorkspaceAlignment so that what follows stays aligned.
inline constexpr std::size_t kAppendWorkspaceAlignment = 256;
std::size_t rotated_q_bytes(const detail::KVCacheProblem& problem);

// Launches the append on the problem's stream (no allocation, no host synchronization) and
// returns in *attention the problem the attention runs on after it: q pointing at the rotated
// queries, the workspace past them. Without k_new, *attention is the problem itself.
Status append_new_tokens(const detail::KVCacheProblem& problem, detail::KVCacheProblem* attention);

}  // namespace hfa::sm90::decode
