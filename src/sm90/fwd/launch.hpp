// Host entry of the forward kernels: one function per (head dims, element type), instantiated
// in its own translation unit (instantiations/) so the build compiles them in parallel.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

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

// The query rows that read a row of v, on average over the keys: the (query, key) pairs the
// window leaves, over the keys, times the query heads of a kv head (varlen: as if every
// sequence were the longest).
inline double query_rows_per_key(const detail::ForwardProblem& problem) {
  const int64_t sq = problem.seqlen_q, sk = problem.seqlen_k;
  if (sq <= 0 || sk <= 0 || problem.heads_kv <= 0) return 0.0;
  // Σ over the rows i of clamp(first + i, 0, sk): query i's keys below a bound of the window.
  auto keys_below = [&](int64_t first) {
    auto ramp = [&](int64_t y) {  // Σ_{x = 0}^{y − 1} clamp(x, 0, sk)
      if (y <= 0) return 0.0;
      const double rising = double(std::min(y, sk + 1));
      return rising * (rising - 1) / 2 + double(std::max<int64_t>(y - sk - 1, 0)) * double(sk);
    };
    return ramp(first + sq) - ramp(first);
  };
  // Bottom-right aligned: query i sees keys [i + d − left, i + d + right] (problem.hpp).
  const int64_t d = sk - sq;
  const double below_end = problem.window_right < 0 ? double(sq) * double(sk)
                                                    : keys_below(d + problem.window_right + 1);
  const double below_start = problem.window_left < 0 ? 0.0 : keys_below(d - problem.window_left);
  const double group = double(problem.heads_q) / problem.heads_kv;
  return group * (below_end - below_start) / double(sk);
}

// FP8: V transposed in the kernel (VTransposingTileConfig) rather than by the pass before it,
// where few query rows read each row of v: the pass's cost goes with v's size and the transpose
// in the kernel's with the blocks the consumers walk, so the pass pays off where each row of v
// serves many query rows. The bound on those rows a key, measured on an H100 against the pass
// (docs/decisions/037; 16k-token grid, one head per kv head, so 2k tokens are 2048 rows a key
// without a mask and 1024 causal, 4k causal 2048):
// - hdim_v 128 (224-key blocks, two Q buffers): 2k +0.6 % non-causal, +8.3 % causal, 4k causal
//   +2.9 %; at 4k non-causal and beyond the kernel lost (−3 … −9 %, r20b). 2560.
// - other head dims: hdim 256 (one staging stage and one Q buffer in its 217 KB) +5.0 % at 2k
//   causal but −5.2 % at 2k non-causal and −3.0 % at 4k causal; hdim 64 +2 % at 2k causal, −2 %
//   at 4k causal (r20b). 1280: only the causal 2k kind of problem.
// Softcapped problems keep the pass (no kernel compiled for them).
inline double fp8_in_kernel_transpose_max_rows_per_key(int hdim_v) {
  return hdim_v == 128 ? 2560.0 : 1280.0;
}

inline bool fp8_transposes_v_in_kernel(const detail::ForwardProblem& problem) {
  return is_fp8(problem) && problem.softcap <= 0.0f &&
         query_rows_per_key(problem) <= fp8_in_kernel_transpose_max_rows_per_key(problem.hdim_v);
}

// Where the FP8 forward gets its K-major V from: the pass into the workspace (transpose_v.cuh)
// or the kernel's own warps. The API's calls take fp8_v_transpose's; the tests name both.
enum class Fp8VTranspose { pass, in_kernel };
inline Fp8VTranspose fp8_v_transpose(const detail::ForwardProblem& problem) {
  return fp8_transposes_v_in_kernel(problem) ? Fp8VTranspose::in_kernel : Fp8VTranspose::pass;
}

// Block-sparse tiles cost what their lists hold: they take the dynamic schedule too.
inline std::size_t workspace_bytes(const detail::ForwardProblem& problem, Fp8VTranspose fp8) {
  if (is_fp8(problem) && fp8 == Fp8VTranspose::pass) return kVtOffset + fp8_vt_bytes(problem);
  return uses_window(problem) || problem.block_sparse ? kTileCounterBytes : 0;
}
inline std::size_t workspace_bytes(const detail::ForwardProblem& problem) {
  return workspace_bytes(problem, fp8_v_transpose(problem));
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
// The FP8 forward (e4m3 q, k, v) writing out as Out: common/kernel_list.def's FP8 lists, V
// transposed the way `v_transpose` says (in_kernel: not with softcap, refused as internal).
template <int kHeadDimQK, int kHeadDimV, typename Out>
Status run_forward_fp8(const detail::ForwardProblem& problem, const LaunchContext& context,
                       Fp8VTranspose v_transpose);

}  // namespace hfa::sm90::fwd
