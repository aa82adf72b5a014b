// Builds the backward's Params from a BackwardProblem and launches its kernels on the problem's
// stream: preprocess, main kernel, postprocess, and the sinks' gradient when asked for.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "common/errors.hpp"
#include "sm90/bwd/kernel.cuh"
#include "sm90/bwd/launch.hpp"
#include "sm90/bwd/postprocess.cuh"
#include "sm90/bwd/preprocess.cuh"
#include "sm90/bwd/sparse_preprocess.cuh"
#include "sm90/common/launch.hpp"

namespace hfa::sm90::bwd {

inline RowStrides row_strides(const detail::Strides& s) { return {s.batch, s.row, s.head}; }

// The tensors read or written with 16-byte vector accesses (out, dout, dq, dk, dv): their bases
// and row and head strides must allow it.
inline Status check_alignment(const char* name, const void* data, const detail::Strides& s,
                              std::size_t element, std::size_t alignment) {
  const auto bytes = [&](int64_t stride) { return uint64_t(stride) * element; };
  if (reinterpret_cast<uintptr_t>(data) % alignment != 0 || bytes(s.row) % alignment != 0 ||
      bytes(s.head) % alignment != 0 || bytes(s.batch) % alignment != 0) {
    return detail::not_supported(kFamily, ": ", name, " must be ", alignment,
                         "-byte aligned, with row, head and batch strides in multiples of ",
                         alignment, " bytes");
  }
  return Status::ok();
}

// Backward tiles are ordered within sections of (batch, head group) pairs (tile_sections)
// whose Q, dO and dQ accumulator share the L2.
inline TileSections head_group_sections(const detail::ForwardProblem& p, int heads_per_tile,
                                        int n_blocks, const LaunchContext& context) {
  const std::size_t per_group = std::size_t(p.seqlen_q) * heads_per_tile *
                                ((p.hdim_qk + p.hdim_v) * 2 + p.hdim_qk * sizeof(float));
  return tile_sections(p.heads_q / heads_per_tile * p.batch, n_blocks, per_group,
                       context.l2_bytes, context.sm_count);
}

// The steps a CTA walks on average, for TileConfig::kTurnsFromSteps: its heads times the query
// blocks that see one key block. Every one of them without a window; with one, the rows it spans
// beside the key block, where an unbounded side counts half the queries (a causal triangle's
// mean walk is half the longest). varlen: seqlen_q is the longest sequence's.
template <typename Config>
int mean_walk_steps(const detail::ForwardProblem& f, int heads_per_tile) {
  int64_t rows = f.seqlen_q;
  if (f.has_window()) {
    const int64_t half = rows / 2;
    const int64_t left = f.window_left < 0 ? half : f.window_left;
    const int64_t right = f.window_right < 0 ? half : f.window_right;
    rows = std::min<int64_t>(rows, left + right + Config::kBlockN);
  }
  return int(int64_t(heads_per_tile) * ((rows + Config::kBlockM - 1) / Config::kBlockM));
}

// The main kernel of KernelConfig (a configuration, or its TakingTurnsTileConfig).
template <typename KernelConfig, typename Element>
Status launch_main_kernel(const Params& params, int device, cudaStream_t stream) {
  constexpr auto kKernel = backward_kernel<KernelConfig, Element>;
  constexpr int kSmem = kSharedBytes<SharedStorage<KernelConfig, Element>>;
  HFA_RETURN_IF_ERROR(reserve_shared_memory<kKernel>(kFamily, kSmem, device));
  kKernel<<<params.num_tiles, KernelConfig::kThreads, kSmem, stream>>>(params);
  return launch_status(kFamily);
}

template <typename Config, typename Element>
Status launch(const detail::BackwardProblem& problem, const LaunchContext& context) {
  const detail::ForwardProblem& f = problem.fwd;
  constexpr std::size_t kElement = sizeof(Element);
  HFA_RETURN_IF_ERROR(check_alignment("out", f.out, f.out_stride, kElement, 16));
  HFA_RETURN_IF_ERROR(check_alignment("dout", problem.dout, problem.dout_stride, kElement, 16));
  HFA_RETURN_IF_ERROR(check_alignment("dq", problem.dq, problem.dq_stride, kElement, 16));
  HFA_RETURN_IF_ERROR(check_alignment("dk", problem.dk, problem.dk_stride, kElement, 16));
  HFA_RETURN_IF_ERROR(check_alignment("dv", problem.dv, problem.dv_stride, kElement, 16));
  if (f.batch > 65535) return detail::not_supported(kFamily, ": batch ", f.batch, " (up to 65535 is)");

  Params params{};
  const bool varlen = f.is_varlen();
  const int map_batches = varlen ? 1 : f.batch;
  const int q_rows = varlen ? int(f.total_q) : f.seqlen_q;
  const int k_rows = varlen ? int(f.total_k) : f.seqlen_k;
  constexpr auto kDtype = tma_dtype<Element>();
  const TileMapShape maps[4] = {
      tile_map_shape<Element>(f.q, f.hdim_qk, q_rows, f.heads_q, map_batches, f.q_stride, varlen,
                              Config::kBlockM),
      tile_map_shape<Element>(f.k, f.hdim_qk, k_rows, f.heads_kv, map_batches, f.k_stride, varlen,
                              Config::kBlockN),
      tile_map_shape<Element>(f.v, f.hdim_v, k_rows, f.heads_kv, map_batches, f.v_stride, varlen,
                              Config::kBlockN),
      tile_map_shape<Element>(problem.dout, f.hdim_v, q_rows, f.heads_q, map_batches,
                              problem.dout_stride, varlen, Config::kBlockM),
  };
  CUtensorMap* targets[4] = {&params.q_map, &params.k_map, &params.v_map, &params.do_map};
  for (int i = 0; i < 4; ++i) HFA_RETURN_IF_ERROR(make_tile_map(targets[i], maps[i], kDtype));

  params.out = f.out;
  params.dout = problem.dout;
  params.lse = f.lse;
  params.out_stride = row_strides(f.out_stride);
  params.dout_stride = row_strides(problem.dout_stride);
  params.lse_batch_stride = f.lse_batch_stride;
  params.lse_head_stride = f.lse_head_stride;
  params.softmax_d = problem.softmax_d;
  params.softmax_d_batch_stride = problem.softmax_d_batch_stride;
  params.softmax_d_head_stride = problem.softmax_d_head_stride;
  params.dq = problem.dq;
  params.dk = problem.dk;
  params.dv = problem.dv;
  params.dq_stride = row_strides(problem.dq_stride);
  params.dk_stride = row_strides(problem.dk_stride);
  params.dv_stride = row_strides(problem.dv_stride);

  const WorkspaceLayout layout = workspace_layout<Config>(problem);
  auto* workspace = static_cast<uint8_t*>(f.workspace);
  if (layout.bytes > 0 && (workspace == nullptr || f.workspace_bytes < layout.bytes ||
                           reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlignment != 0)) {
    return {Code::invalid_argument,
            std::string("workspace: the GPU backward needs ") + std::to_string(layout.bytes) +
                " bytes, " + std::to_string(kWorkspaceAlignment) + "-byte aligned"};
  }
  params.ws.lse_log2 = reinterpret_cast<float*>(workspace + layout.lse_offset);
  params.ws.dpsum = reinterpret_cast<float*>(workspace + layout.dpsum_offset);
  params.ws.dq_accum = reinterpret_cast<float*>(workspace + layout.dq_offset);
  params.ws.dq_turns =
      problem.fwd.deterministic ? reinterpret_cast<int32_t*>(workspace + layout.turns_offset) : nullptr;
  params.ws.padded_rows = layout.padded_rows;
  params.heads_per_kv = f.heads_q / f.heads_kv;
  params.num_m_blocks = (f.seqlen_q + Config::kBlockM - 1) / Config::kBlockM;
  params.num_n_blocks = (f.seqlen_k + Config::kBlockN - 1) / Config::kBlockN;
  params.heads_per_tile = heads_per_tile(problem, params.num_n_blocks, context);
  const bool split_groups = params.heads_per_tile < params.heads_per_kv;
  if (split_groups) {
    params.ws.dk_accum = reinterpret_cast<float*>(workspace + layout.dk_offset);
    params.ws.dv_accum = reinterpret_cast<float*>(workspace + layout.dv_offset);
    params.ws.padded_keys = layout.padded_keys;
  }

  params.batch = f.batch;
  params.heads_q = f.heads_q;
  params.heads_kv = f.heads_kv;
  params.hdim_qk = f.hdim_qk;
  params.hdim_v = f.hdim_v;
  fill_shared_fields(params, f);
  params.softmax_scale = f.softmax_scale;
  params.sinks = f.sinks;
  params.dsinks = problem.dsinks;
  params.alibi = alibi_slopes(f);
  params.num_tiles = params.num_n_blocks * (f.heads_q / params.heads_per_tile) * f.batch;
  params.sections = head_group_sections(f, params.heads_per_tile, params.num_n_blocks, context);

  const auto stream = static_cast<cudaStream_t>(f.stream);
  if constexpr (Config::kBlockSparse) {
    HFA_RETURN_IF_ERROR(build_query_lists<Config>(params, f, layout, workspace, stream, kFamily));
  }
  const dim3 row_grid(params.num_m_blocks, f.heads_q, f.batch);
  if (params.num_m_blocks > 0) {
    if (params.softmax_d != nullptr) {
      preprocess_kernel<Config, Element, true><<<row_grid, kPrePostThreads, 0, stream>>>(params);
    } else {
      preprocess_kernel<Config, Element, false><<<row_grid, kPrePostThreads, 0, stream>>>(params);
    }
    HFA_RETURN_IF_ERROR(launch_status(kFamily));
  }
  // The key accumulators run to the end, or to a block-sparse mask's lists (built above).
  const std::size_t keys_end = Config::kBlockSparse ? layout.sparse_offset : layout.bytes;
  if (split_groups && keys_end > layout.dk_offset) {
    if (cudaError_t error = cudaMemsetAsync(workspace + layout.dk_offset, 0,
                                            keys_end - layout.dk_offset, stream);
        error != cudaSuccess) {
      return cuda_status(kFamily, "cannot clear the key accumulators", error);
    }
  }
  if (params.num_tiles > 0) {
    // Long walks take turns at the exponentials (TileConfig::kTurnsFromSteps), but not in the
    // deterministic mode, where the writer's turns order dQ and speed comes second (the lagged
    // dQ was not measured there).
    bool take_turns = false;
    if constexpr (Config::kTurnsFromSteps > 0) {
      take_turns = !f.deterministic &&
                   mean_walk_steps<Config>(f, params.heads_per_tile) >= Config::kTurnsFromSteps;
    }
    if (take_turns) {
      if constexpr (Config::kTurnsFromSteps > 0) {
        HFA_RETURN_IF_ERROR((launch_main_kernel<TakingTurnsTileConfig<Config>, Element>(
            params, f.device.index, stream)));
      }
    } else {
      HFA_RETURN_IF_ERROR((launch_main_kernel<Config, Element>(params, f.device.index, stream)));
    }
  }
  if (params.num_m_blocks > 0) {
    postprocess_kernel<Config, Element><<<row_grid, kPrePostThreads, 0, stream>>>(params);
    HFA_RETURN_IF_ERROR(launch_status(kFamily));
  }
  if (split_groups && params.num_n_blocks > 0) {
    const dim3 key_grid(params.num_n_blocks, f.heads_kv, f.batch);
    key_postprocess_kernel<Config, Element><<<key_grid, kPrePostThreads, 0, stream>>>(params);
    HFA_RETURN_IF_ERROR(launch_status(kFamily));
  }
  if (problem.dsinks != nullptr) {
    sink_gradient_kernel<Config><<<f.heads_q, kPrePostThreads, 0, stream>>>(params);
    HFA_RETURN_IF_ERROR(launch_status(kFamily));
  }
  return Status::ok();
}

// The configuration under the launch's policy switch: ALiBi's layer (AlibiTileConfig) or none.
template <typename Plain, bool kAlibi>
using WithPolicy = std::conditional_t<kAlibi, AlibiTileConfig<Plain>, Plain>;

// The deterministic mode's own configuration where it has one (TileConfig::kDeterministic).
template <int kHeadDimQK, int kHeadDimV, bool kWindowed, bool kSoftcap, typename Element,
          bool kAlibi = false>
Status launch_mode(const detail::BackwardProblem& problem, const LaunchContext& context) {
  using Default = Config<kHeadDimQK, kHeadDimV, kWindowed, kSoftcap>;
  if constexpr (Default::kDqFromRegisters) {
    if (problem.fwd.deterministic) {
      using Deterministic = Config<kHeadDimQK, kHeadDimV, kWindowed, kSoftcap, true>;
      return launch<WithPolicy<Deterministic, kAlibi>, Element>(problem, context);
    }
  }
  return launch<WithPolicy<Default, kAlibi>, Element>(problem, context);
}

// The score policy's switch: kAlibi compiles only the ALiBi kernels (their own translation units,
// run_backward_alibi), the rest the plain and softcapped ones.
template <int kHeadDimQK, int kHeadDimV, bool kWindowed, typename Element, bool kAlibi = false>
Status launch_softcap_or_not(const detail::BackwardProblem& problem, const LaunchContext& context) {
  if constexpr (kAlibi) {
    return launch_mode<kHeadDimQK, kHeadDimV, kWindowed, false, Element, true>(problem, context);
  } else {
    if (problem.fwd.softcap > 0.0f) {
      if constexpr (kHeadDimQK <= 64) {  // runs on the 128 configuration (head_dim_qk_to_run)
        return {Code::internal,
                "sm90 backward: a softcapped head dim 64 reached its configuration"};
      } else {
        return launch_mode<kHeadDimQK, kHeadDimV, kWindowed, true, Element>(problem, context);
      }
    }
    return launch_mode<kHeadDimQK, kHeadDimV, kWindowed, false, Element>(problem, context);
  }
}

template <int kHeadDimQK, int kHeadDimV, typename Element, bool kAlibi = false>
Status run_backward_with(const detail::BackwardProblem& problem, const LaunchContext& context) {
  if (problem.fwd.has_window()) {
    return launch_softcap_or_not<kHeadDimQK, kHeadDimV, true, Element, kAlibi>(problem, context);
  }
  return launch_softcap_or_not<kHeadDimQK, kHeadDimV, false, Element, kAlibi>(problem, context);
}

template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_backward(const detail::BackwardProblem& problem, const LaunchContext& context) {
  return run_backward_with<kHeadDimQK, kHeadDimV, Element>(problem, context);
}

template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_backward_alibi(const detail::BackwardProblem& problem, const LaunchContext& context) {
  return run_backward_with<kHeadDimQK, kHeadDimV, Element, true>(problem, context);
}

// Block-sparse: one configuration per head dims (BlockSparseTileConfig over the windowed one),
// with or without a window (ANDed with the mask); not deterministic (the backend refuses it).
template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_backward_block_sparse(const detail::BackwardProblem& problem,
                                 const LaunchContext& context) {
  if (problem.fwd.deterministic) {
    return {Code::internal, "sm90 backward: a deterministic block-sparse call reached its kernels"};
  }
  return launch<BlockSparseConfig<kHeadDimQK, kHeadDimV>, Element>(problem, context);
}

}  // namespace hfa::sm90::bwd

// One translation unit per (head dims, element type), the same for ALiBi, and per (head dims,
// element type) of kernel_list.def's block-sparse list.
#define HFA_INSTANTIATE_BACKWARD(HEAD_DIM_QK, HEAD_DIM_V, ELEMENT)                         \
  template hfa::Status hfa::sm90::bwd::run_backward<HEAD_DIM_QK, HEAD_DIM_V, ELEMENT>(     \
      const hfa::detail::BackwardProblem&, const hfa::sm90::bwd::LaunchContext&);
#define HFA_INSTANTIATE_BACKWARD_ALIBI(HEAD_DIM_QK, HEAD_DIM_V, ELEMENT)                   \
  template hfa::Status hfa::sm90::bwd::run_backward_alibi<HEAD_DIM_QK, HEAD_DIM_V, ELEMENT>( \
      const hfa::detail::BackwardProblem&, const hfa::sm90::bwd::LaunchContext&);
#define HFA_INSTANTIATE_BACKWARD_BLOCK_SPARSE(HEAD_DIM_QK, HEAD_DIM_V, ELEMENT)            \
  template hfa::Status                                                                     \
  hfa::sm90::bwd::run_backward_block_sparse<HEAD_DIM_QK, HEAD_DIM_V, ELEMENT>(             \
      const hfa::detail::BackwardProblem&, const hfa::sm90::bwd::LaunchContext&);
