// Host entry of the backward kernels: one function per compiled configuration (common/
// kernel_list.def; the build writes a translation unit for each).
#pragma once

#include <cstddef>

#include "common/head_dims.hpp"
#include "common/problem.hpp"
#include "sm90/bwd/tile_config.hpp"
#include "sm90/bwd/workspace.hpp"

namespace hfa::sm90::bwd {

inline constexpr const char* kFamily = "sm90 backward";  // names the kernels in messages

struct LaunchContext {
  int sm_count;
  std::size_t l2_bytes;
};

// The tile configuration a problem runs on. Windows, softcap and the deterministic mode select
// kernels, not tiles: the workspace's shape depends on the head dims alone.
template <int kHeadDimQK, int kHeadDimV, bool kWindowed = false, bool kSoftcap = false,
          bool kDeterministic = false>
using Config = TileConfig<kHeadDimQK, kHeadDimV, kWindowed, kSoftcap, kDeterministic>;
static_assert(Config<128, 128, true, true>::kBlockM == Config<128, 128>::kBlockM &&
              Config<128, 128, true, true>::kBlockN == Config<128, 128>::kBlockN);

// The head dims whose compiled configuration runs a problem: its own, except that a softcapped
// problem of head dim 64 runs on the 128 configuration (zero-padded). At 64 the tile takes 128
// queries, and S, dP and tanh's derivative (64 registers each) beside dK and dV spilled 0.8 KB.
inline detail::HeadDims head_dims_to_run(const detail::ForwardProblem& p) {
  if (p.softcap > 0.0f && p.hdim_qk <= 64 && p.hdim_v <= 128) return {128, 128};
  return {p.hdim_qk, p.hdim_v};
}

// Bytes of workspace the call needs (workspace.hpp's layout for the configuration it runs on).
template <int kHeadDimQK, int kHeadDimV>
std::size_t workspace_bytes(const detail::BackwardProblem& problem) {
  return workspace_layout<Config<kHeadDimQK, kHeadDimV>::kBlockM, kHeadDimQK>(problem).bytes;
}

// Preprocess, main kernel, postprocess (and the sinks' gradient) on the problem's stream: no
// allocation and no host synchronization, so the call can be captured in a CUDA graph.
template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_backward(const detail::BackwardProblem& problem, const LaunchContext& context);

}  // namespace hfa::sm90::bwd
