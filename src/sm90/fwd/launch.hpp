// Host entry of the forward kernels: one function per (head dims, element type), instantiated
// in its own translation unit (instantiations/) so the build compiles them in parallel.
#pragma once

#include <cstddef>

#include "common/environment.hpp"
#include "common/problem.hpp"
#include "sm90/fwd/transposed_v_layout.hpp"

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
// caller's sub-allocation aligned. FP8 then the transposed copy of v (transposed_v_layout.hpp),
// from a TMA-friendly 256-byte offset.
inline constexpr std::size_t kTileCounterBytes = 16;
inline constexpr std::size_t kVtOffset = 256;  // past the tile counter, TMA-aligned
static_assert(kVtOffset >= kTileCounterBytes && kVtOffset % 16 == 0);

inline bool is_fp8(const detail::ForwardProblem& problem) { return problem.dtype == DType::e4m3; }

// Keys of a transposed row of v: room for every sequence's (transposed_v_layout.hpp).
inline int64_t fp8_vt_row_keys(const detail::ForwardProblem& problem) {
  const int64_t keys =
      problem.is_varlen() ? problem.total_k : int64_t(problem.batch) * problem.seqlen_k;
  return vt_row_keys(keys, problem.batch);
}

inline std::size_t fp8_vt_bytes(const detail::ForwardProblem& problem) {
  return std::size_t(problem.heads_kv) * problem.hdim_v * fp8_vt_row_keys(problem);
}

// Block-sparse tiles cost what their lists hold: they take the dynamic schedule too.
inline std::size_t workspace_bytes(const detail::ForwardProblem& problem) {
  if (is_fp8(problem)) return kVtOffset + fp8_vt_bytes(problem);
  return uses_window(problem) || problem.block_sparse ? kTileCounterBytes : 0;
}

// One per compiled configuration (common/kernel_list.def; the build writes a translation unit
// for each). A problem runs on the smallest that holds it (kernel_list.hpp), padded with zeros.
template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_forward(const detail::ForwardProblem& problem, const LaunchContext& context);
// The same with ALiBi (hfa_options.alibi_slopes; no softcap, the backend checks): its own
// translation units, so that the kernels without it are compiled as before.
template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_forward_alibi(const detail::ForwardProblem& problem, const LaunchContext& context);
// The same under a block-sparse mask (common/block_sparse.hpp): the head dims of
// kernel_list.def's HFA_KERNEL_BLOCK_SPARSE_HEAD_DIMS, 16-bit in and out, no softcap, no ALiBi,
// fixed length (the backend checks).
template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_forward_block_sparse(const detail::ForwardProblem& problem,
                                const LaunchContext& context);
// The 16-bit forward writing out as Out, a partial result (common/kernel_list.def's
// HFA_KERNEL_PARTIAL_OUT): the standard tiles, no softcap (the backend checks).
template <int kHeadDimQK, int kHeadDimV, typename Element, typename Out>
Status run_forward_partial(const detail::ForwardProblem& problem, const LaunchContext& context);
// The FP8 forward (e4m3 q, k, v) writing out as Out: common/kernel_list.def's FP8 lists.
template <int kHeadDimQK, int kHeadDimV, typename Out>
Status run_forward_fp8(const detail::ForwardProblem& problem, const LaunchContext& context);

}  // namespace hfa::sm90::fwd
