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

// Query heads a CTA walks (Params::heads_per_tile): the whole GQA group, whose dK and dV then
// never leave the CTA's registers, or one (FlashAttention-3's grid), which adds them in fp32 into
// the workspace's key accumulators for the key postprocess to round. One a CTA multiplies the grid
// by the group size and pays for those adds: 5-9 % slower where whole groups already fill the SMs
// evenly, 2-80 % faster under a causal mask, where the first key blocks see the most queries and
// a short grid of long CTAs ends on a tail (docs/decisions/035). So split under a window, or where
// whole groups leave a tenth of the grid's waves idle.
inline int heads_per_tile(const detail::BackwardProblem& problem, int n_blocks,
                          const LaunchContext& context) {
  const detail::ForwardProblem& f = problem.fwd;
  const int group = f.heads_q / f.heads_kv;
  if (!has_key_accumulators(problem)) return group;
  if (f.has_window()) return 1;
  const int64_t tiles = int64_t(n_blocks) * f.heads_kv * f.batch;
  const int64_t wave = context.sm_count;
  const int64_t slots = (tiles + wave - 1) / wave * wave;
  return 10 * tiles < 9 * slots ? 1 : group;
}

// The tile configuration a problem runs on. Windows, softcap and the deterministic mode select
// kernels; the tiles' query rows, and so the workspace's shape, depend on the head dims and,
// at hdim 128, on the window and softcap (TileConfig::kDqTransposed), never on the mode. The
// key blocks, which size the key accumulators, depend on the mode at 192 and 256 (80 keys
// where the gradients are transposed), but the deterministic mode has no key accumulators.
template <int kHeadDimQK, int kHeadDimV, bool kWindowed = false, bool kSoftcap = false,
          bool kDeterministic = false>
using Config = TileConfig<kHeadDimQK, kHeadDimV, kWindowed, kSoftcap, kDeterministic>;
static_assert(Config<128, 128, true, true>::kBlockN == Config<128, 128>::kBlockN);
static_assert(Config<256, 256, false, false, true>::kBlockM == Config<256, 256>::kBlockM &&
                  Config<192, 192, false, false, true>::kBlockM == Config<192, 192>::kBlockM,
              "the deterministic configuration keeps the workspace's shape");

// The block-sparse configuration of head dims (kernel_list.def's block-sparse list):
// BlockSparseTileConfig over the windowed one.
template <int kHeadDimQK, int kHeadDimV>
using BlockSparseConfig = BlockSparseTileConfig<Config<kHeadDimQK, kHeadDimV, true>>;

// The head dims whose compiled configuration runs a problem: its own, except that a softcapped
// problem of head dim 64 runs on the 128 configuration (zero-padded). At 64 the tile takes 128
// queries, and S, dP and tanh's derivative (64 registers each) beside dK and dV spilled 0.8 KB.
inline detail::HeadDims head_dims_to_run(const detail::ForwardProblem& p) {
  if (p.softcap > 0.0f && p.hdim_qk <= 64 && p.hdim_v <= 128) return {128, 128};
  return {p.hdim_qk, p.hdim_v};
}

// Bytes of workspace the call needs (workspace.hpp's layout for the configuration it runs on:
// launch.cuh's choice by window and softcap; ALiBi's layer and the deterministic configuration
// keep their plain configuration's rows).
template <int kHeadDimQK, int kHeadDimV>
std::size_t workspace_bytes(const detail::BackwardProblem& problem) {
  if (problem.fwd.has_window()) {
    return workspace_layout<Config<kHeadDimQK, kHeadDimV, true>>(problem).bytes;
  }
  if (problem.fwd.softcap > 0.0f) {
    return workspace_layout<Config<kHeadDimQK, kHeadDimV, false, true>>(problem).bytes;
  }
  return workspace_layout<Config<kHeadDimQK, kHeadDimV>>(problem).bytes;
}

// The same under a block-sparse mask, on the head dims of kernel_list.def's block-sparse list:
// its configuration's rows, and the mask's lists transposed (workspace.hpp).
template <int kHeadDimQK, int kHeadDimV>
std::size_t block_sparse_workspace_bytes(const detail::BackwardProblem& problem) {
  return workspace_layout<BlockSparseConfig<kHeadDimQK, kHeadDimV>>(problem).bytes;
}

// Preprocess, main kernel, postprocess (and the sinks' gradient) on the problem's stream: no
// allocation and no host synchronization, so the call can be captured in a CUDA graph.
template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_backward(const detail::BackwardProblem& problem, const LaunchContext& context);
// The same with ALiBi (hfa_options.alibi_slopes; no softcap, the backend checks): its own
// translation units, so that the kernels without it are compiled as before.
template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_backward_alibi(const detail::BackwardProblem& problem, const LaunchContext& context);
// The same under a block-sparse mask (common/block_sparse.hpp): the head dims of
// kernel_list.def's HFA_KERNEL_BLOCK_SPARSE_HEAD_DIMS, 16-bit, no softcap, no ALiBi, fixed
// length, not deterministic (the backend checks). Its workspace (workspace_bytes) holds the
// mask's lists transposed, which its preprocess builds.
template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_backward_block_sparse(const detail::BackwardProblem& problem,
                                 const LaunchContext& context);

}  // namespace hfa::sm90::bwd
