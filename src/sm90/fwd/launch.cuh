// Builds the kernel's Params from a ForwardProblem and launches the persistent grid.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cuda_runtime.h>
#include <string>

#include "sm90/fwd/kernel.cuh"
#include "sm90/fwd/launch.hpp"
#include "sm90/tma_descriptor.hpp"

namespace hfa::sm90::fwd {

template <typename Element>
constexpr CUtensorMapDataType tma_dtype() {
  return std::is_same_v<Element, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

// Shape of one of q, k, v, out as a (dim, row, head, batch) tile map.
template <typename Element>
TileMapShape tile_map_shape(const void* base, int dim, int rows, int heads, int batch,
                            const detail::Strides& strides, int box_rows) {
  constexpr uint64_t kBytes = sizeof(Element);
  return {base,
          {uint64_t(dim), uint64_t(rows), uint64_t(heads), uint64_t(batch)},
          {uint64_t(strides.row) * kBytes, uint64_t(strides.head) * kBytes,
           uint64_t(strides.batch) * kBytes},
          uint32_t(box_rows)};
}

// Causal tiles are ordered longest first within sections of (batch, tile head) pairs whose K
// and V fit in half the L2 together, so the CTAs running at once re-read K/V from L2, not HBM.
inline int heads_per_section(const detail::ForwardProblem& problem, int pack_shift,
                             std::size_t l2_bytes) {
  const int tile_heads_per_kv_head = (problem.heads_q / problem.heads_kv) >> pack_shift;
  const std::size_t kv_bytes_per_head = std::size_t(problem.seqlen_k) *
                                        (problem.hdim_qk + problem.hdim_v) * 2 /
                                        tile_heads_per_kv_head;
  const std::size_t budget = l2_bytes / 2;
  return int(std::max<std::size_t>(1, budget / std::max<std::size_t>(1, kv_bytes_per_head)));
}

// The window as the kernel takes it: −1 (unbounded) or at most the longest possible reach, so
// that row ± window cannot overflow.
inline int32_t clamp_window(int32_t window, const detail::ForwardProblem& problem) {
  return window < 0 ? -1 : std::min(window, problem.seqlen_q + problem.seqlen_k);
}

// PackGQA (Params::pack_shift) where one head's queries underfill a tile (decode, speculative
// verification, short chunks): the group's heads then fill it and share one pass over K/V.
// Needs a power-of-two group that divides the tile's rows. HFA_SM90_PACK_GQA=0 turns it off
// (to measure it).
template <typename Config>
int pack_shift_for(const detail::ForwardProblem& problem) {
  const int group = problem.heads_q / problem.heads_kv;
  if (group < 2 || (group & (group - 1)) != 0 || Config::kBlockM % group != 0) return 0;
  if (problem.seqlen_q >= Config::kBlockM || !pack_gqa_enabled()) return 0;
  return std::countr_zero(unsigned(group));
}

template <typename Config, typename Element>
Status launch(const detail::ForwardProblem& problem, const LaunchContext& context) {
  using Storage = SharedStorage<Config, Element>;
  constexpr auto kDtype = tma_dtype<Element>();
  Params params{};
  // Varlen tensors are (total, head, dim): the maps see them as one batch of `total` rows.
  const bool varlen = problem.is_varlen();
  const int b = problem.batch, map_batches = varlen ? 1 : b;
  const int q_rows = varlen ? int(problem.total_q) : problem.seqlen_q;
  const int k_rows = varlen ? int(problem.total_k) : problem.seqlen_k;
  // The batch stride of a varlen map spans one batch: never stepped over, but TMA wants it
  // valid (a multiple of 16 bytes).
  auto map_strides = [&](detail::Strides strides, int rows) {
    if (varlen) strides.batch = strides.row * rows;
    return strides;
  };
  const int pack_shift = pack_shift_for<Config>(problem);
  TileMapShape q_map =
      tile_map_shape<Element>(problem.q, problem.hdim_qk, q_rows, problem.heads_q, map_batches,
                              map_strides(problem.q_stride, q_rows), Config::kBlockM);
  q_map.heads_per_row = 1u << pack_shift;  // rank 5 always: one producer path
  const TileMapShape maps[3] = {
      q_map,
      tile_map_shape<Element>(problem.k, problem.hdim_qk, k_rows, problem.heads_kv, map_batches,
                              map_strides(problem.k_stride, k_rows), Config::kBlockN),
      tile_map_shape<Element>(problem.v, problem.hdim_v, k_rows, problem.heads_kv, map_batches,
                              map_strides(problem.v_stride, k_rows), Config::kBlockN),
  };
  CUtensorMap* targets[3] = {&params.q_map, &params.k_map, &params.v_map};
  for (int i = 0; i < 3; ++i) {
    if (Status status = make_tile_map(targets[i], maps[i], kDtype); !status) return status;
  }

  constexpr float kLog2e = 1.4426950408889634f;
  params.out = problem.out;
  params.out_stride = {problem.out_stride.batch, problem.out_stride.row, problem.out_stride.head};
  params.lse = problem.lse;
  params.lse_batch_stride = problem.lse_batch_stride;
  params.lse_head_stride = problem.lse_head_stride;
  params.batch = b;
  params.heads_q = problem.heads_q;
  params.heads_per_kv = problem.heads_q / problem.heads_kv;
  params.pack_shift = pack_shift;
  params.tile_heads = problem.heads_q >> pack_shift;
  params.seqlen_q = problem.seqlen_q;
  params.seqlen_k = problem.seqlen_k;
  params.hdim_v = problem.hdim_v;
  params.cu_seqlens_q = problem.cu_seqlens_q;
  params.cu_seqlens_k = problem.cu_seqlens_k;
  params.seqused_q = problem.seqused_q;
  params.seqused_k = problem.seqused_k;
  params.window_left = clamp_window(problem.window_left, problem);
  params.window_right = clamp_window(problem.window_right, problem);
  if (problem.softcap > 0.0f) {
    params.softcap_prescale = problem.softmax_scale / problem.softcap;
    params.scale_log2 = problem.softcap * kLog2e;
  } else {
    params.softcap_prescale = 0.0f;
    params.scale_log2 = problem.softmax_scale * kLog2e;
  }
  params.sinks = problem.sinks;
  params.num_m_blocks = ((problem.seqlen_q << pack_shift) + Config::kBlockM - 1) / Config::kBlockM;
  params.num_tiles = params.num_m_blocks * params.tile_heads * b;
  params.heads_per_section = heads_per_section(problem, pack_shift, context.l2_bytes);
  if (params.num_tiles == 0) return Status::ok();
  if (Config::kWindowed) {  // dynamic schedule (workspace_bytes reserved the counter)
    params.tile_counter = static_cast<int32_t*>(problem.workspace);
    if (cudaError_t error = cudaMemsetAsync(params.tile_counter, 0, sizeof(int32_t),
                                            static_cast<cudaStream_t>(problem.stream));
        error != cudaSuccess) {
      return {Code::cuda, std::string("sm90 forward: cannot reset the tile counter: ") +
                              cudaGetErrorString(error)};
    }
  }

  auto kernel = forward_kernel<Config, Element>;
  constexpr int kSmem = kSharedBytes<Storage>;
  // The opt-in to > 48 KB of shared memory is per device; ask once on each.
  static std::atomic<uint64_t> reserved_on_device{0};
  const uint64_t device_bit = uint64_t(1) << (problem.device.index % 64);
  if (!(reserved_on_device.load(std::memory_order_relaxed) & device_bit)) {
    if (cudaError_t error =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
        error != cudaSuccess) {
      return {Code::cuda, std::string("sm90 forward: cannot reserve shared memory: ") +
                              cudaGetErrorString(error)};
    }
    reserved_on_device.fetch_or(device_bit, std::memory_order_relaxed);
  }
  const int grid = std::min(params.num_tiles, context.sm_count);
  kernel<<<grid, Config::kThreads, kSmem, static_cast<cudaStream_t>(problem.stream)>>>(params);
  if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) {
    return {Code::cuda, std::string("sm90 forward: launch failed: ") + cudaGetErrorString(error)};
  }
  return Status::ok();
}

template <int kHeadDimQK, int kHeadDimV, bool kWindowed, typename Element>
Status launch_softcap_or_not(const detail::ForwardProblem& problem, const LaunchContext& context) {
  if (problem.softcap > 0.0f) {
    return launch<TileConfig<kHeadDimQK, kHeadDimV, kWindowed, true>, Element>(problem, context);
  }
  return launch<TileConfig<kHeadDimQK, kHeadDimV, kWindowed, false>, Element>(problem, context);
}

template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_forward(const detail::ForwardProblem& problem, const LaunchContext& context) {
  if (uses_window(problem)) {
    return launch_softcap_or_not<kHeadDimQK, kHeadDimV, true, Element>(problem, context);
  }
  return launch_softcap_or_not<kHeadDimQK, kHeadDimV, false, Element>(problem, context);
}

}  // namespace hfa::sm90::fwd

// One translation unit per (head dims, element type).
#define HFA_INSTANTIATE_FORWARD(HEAD_DIM_QK, HEAD_DIM_V, ELEMENT)                          \
  template hfa::Status hfa::sm90::fwd::run_forward<HEAD_DIM_QK, HEAD_DIM_V, ELEMENT>(      \
      const hfa::detail::ForwardProblem&, const hfa::sm90::fwd::LaunchContext&);
