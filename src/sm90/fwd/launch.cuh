// Builds the kernel's Params from a ForwardProblem and launches the persistent grid.
#pragma once

#include <algorithm>
#include <bit>
#include <cuda_runtime.h>
#include <string>

#include "common/errors.hpp"
#include "sm90/common/launch.hpp"
#include "sm90/fwd/kernel.cuh"
#include "sm90/fwd/launch.hpp"
#include "sm90/fwd/transpose_v.cuh"

namespace hfa::sm90::fwd {

// Causal tiles are ordered longest first within sections of (batch, tile head) pairs
// (tile_sections) whose K and V share the L2, so the CTAs running at once re-read K/V from
// L2, not HBM.
inline TileSections head_sections(const detail::ForwardProblem& problem, int pack_shift,
                                  int m_blocks, std::size_t l2_bytes, int grid) {
  const int tile_heads_per_kv_head = (problem.heads_q / problem.heads_kv) >> pack_shift;
  const std::size_t kv_bytes_per_head = std::size_t(problem.seqlen_k) *
                                        (problem.hdim_qk + problem.hdim_v) *
                                        dtype_size(problem.dtype) / tile_heads_per_kv_head;
  return tile_sections((problem.heads_q >> pack_shift) * problem.batch, m_blocks, kv_bytes_per_head,
                       l2_bytes, grid);
}

// PackGQA (Params::pack_shift) where one head's queries underfill a tile (decode, speculative
// verification, short chunks): the group's heads then fill it and share one pass over K/V.
// Needs a power-of-two group that divides the tile's rows. HFA_SM90_PACK_GQA=0 turns it off
// (to measure it). Never under a block-sparse mask, whose query blocks are a head's rows.
template <typename Config>
int pack_shift_for(const detail::ForwardProblem& problem) {
  if (Config::kBlockSparse) return 0;
  const int group = problem.heads_q / problem.heads_kv;
  if (group < 2 || (group & (group - 1)) != 0 || Config::kBlockM % group != 0) return 0;
  if (problem.seqlen_q >= Config::kBlockM || !pack_gqa_enabled()) return 0;
  return std::countr_zero(unsigned(group));
}

// FP8: the transposed copy of v in the workspace (transpose_v.cuh) and its map, boxes of 128
// keys × the configuration's head dims (rows past hdim_v read as zeros).
template <typename Config>
Status transpose_v(const detail::ForwardProblem& problem, CUtensorMap* map) {
  TransposeVParams t{};
  t.v = static_cast<const uint8_t*>(problem.v);
  t.v_stride = problem.v_stride;
  t.vt = static_cast<uint8_t*>(problem.workspace) + kVtOffset;
  t.row_keys = fp8_vt_row_keys(problem);
  t.batch = problem.batch;
  t.heads_kv = problem.heads_kv;
  t.hdim_v = problem.hdim_v;
  t.seqlen_k = problem.seqlen_k;
  t.cu_seqlens_k = problem.cu_seqlens_k;
  t.seqused_k = problem.seqused_k;
  const bool aligned = reinterpret_cast<uintptr_t>(problem.v) % 16 == 0 &&
                       t.v_stride.row % 16 == 0 && t.v_stride.head % 16 == 0 &&
                       t.v_stride.batch % 16 == 0;
  if (!aligned) {
    return {Code::not_supported,
            std::string(kFamily) + ": FP8 v must be 16-byte aligned, with row, head and batch "
                                   "strides multiples of 16 bytes"};
  }
  // A sequence's keys and its gap to the next: at most its allocated keys + 3 groups (one of
  // rounding up, two of the per-sequence groups before and after it).
  const int64_t longest = problem.seqlen_k;  // varlen: max_seqlen_k
  t.ctas_per_sequence = int((longest + 3 * kKeyGroup + kTransposeKeys - 1) / kTransposeKeys);
  const dim3 grid(unsigned(int64_t(t.ctas_per_sequence) * problem.batch),
                  unsigned(problem.heads_kv));
  if (grid.x > 0 && grid.y > 0) {
    transpose_v_kernel<Config::kHeadDimV><<<grid, kTransposeThreads, 0,
                                           static_cast<cudaStream_t>(problem.stream)>>>(t);
    HFA_RETURN_IF_ERROR(launch_status(kFamily));
  }
  const uint64_t row_bytes = uint64_t(t.row_keys), head_bytes = row_bytes * problem.hdim_v;
  const TileMapShape shape{t.vt,
                           {row_bytes, uint64_t(problem.hdim_v), uint64_t(problem.heads_kv), 1},
                           {row_bytes, head_bytes, head_bytes * problem.heads_kv},
                           uint32_t(Config::kHeadDimV)};
  return make_tile_map(map, shape, tma_dtype<typename Config::Element>());
}

// The FP8 fields: descales, and whether S must be scaled per row (fp8_scales.cuh).
inline void fill_fp8_fields(Params& params, const detail::ForwardProblem& problem) {
  params.q_descale = problem.q_descale;
  params.k_descale = problem.k_descale;
  params.v_descale = problem.v_descale;
  const detail::ScaleView& q = problem.q_descale;
  const bool per_query_head = q.data != nullptr && q.head_divisor == 1 && q.head_stride != 0;
  const bool q_differs_in_tile = q.block_rows > 0 || (params.pack_shift > 0 && per_query_head);
  params.fp8_row_scales = q_differs_in_tile || problem.k_descale.block_rows > 0;
}

// FP8: whether k or v carries a scale per block of keys (TileConfig::kKeyBlockScales).
inline bool has_key_block_scales(const detail::ForwardProblem& problem) {
  return problem.k_descale.block_rows > 0 || problem.v_descale.block_rows > 0;
}

template <typename Config>
Status launch(const detail::ForwardProblem& problem, const LaunchContext& context) {
  using Element = typename Config::Element;
  using Storage = SharedStorage<Config>;
  if constexpr (Config::kFp8 && Config::kBlockN != detail::kFp8KeyBlock) {
    // run_forward_fp8 sends k and v scaled per block to tiles of one block scale each.
    if (has_key_block_scales(problem)) {
      return {Code::internal, std::string(kFamily) + ": per-block k or v scales on tiles of " +
                                  std::to_string(Config::kBlockN) + " keys"};
    }
  }
  constexpr auto kDtype = tma_dtype<Element>();
  Params params{};
  // Varlen tensors are (total, head, dim): the maps see them as one batch of `total` rows.
  const bool varlen = problem.is_varlen();
  const int b = problem.batch, map_batches = varlen ? 1 : b;
  const int q_rows = varlen ? int(problem.total_q) : problem.seqlen_q;
  const int k_rows = varlen ? int(problem.total_k) : problem.seqlen_k;
  const int pack_shift = pack_shift_for<Config>(problem);
  TileMapShape q_map =
      tile_map_shape<Element>(problem.q, problem.hdim_qk, q_rows, problem.heads_q, map_batches,
                              problem.q_stride, varlen, Config::kBlockM);
  q_map.heads_per_row = 1u << pack_shift;  // rank 5 always: one producer path
  const TileMapShape maps[2] = {
      q_map,
      tile_map_shape<Element>(problem.k, problem.hdim_qk, k_rows, problem.heads_kv, map_batches,
                              problem.k_stride, varlen, Config::kBlockN),
  };
  CUtensorMap* targets[2] = {&params.q_map, &params.k_map};
  for (int i = 0; i < 2; ++i) {
    if (Status status = make_tile_map(targets[i], maps[i], kDtype); !status) return status;
  }
  if constexpr (Config::kFp8 && !Config::kTransposesVInKernel) {
    if (problem.heads_kv > 0 && problem.batch > 0) {
      HFA_RETURN_IF_ERROR(transpose_v<Config>(problem, &params.v_map));
    }
  } else {  // V as stored (in-kernel FP8 transpose: into the staging ring)
    const TileMapShape v_map =
        tile_map_shape<Element>(problem.v, problem.hdim_v, k_rows, problem.heads_kv, map_batches,
                                problem.v_stride, varlen, Config::kBlockN);
    HFA_RETURN_IF_ERROR(make_tile_map(&params.v_map, v_map, kDtype));
  }

  if constexpr (Storage::kStagesOut) {
    // out as q is seen (rank 5, PackGQA's groups), boxes of a warpgroup's rows. Where TMA cannot
    // take it (alignment, strides) or a box cannot hold whole groups, O goes from registers.
    TileMapShape out_map = tile_map_shape<typename Config::Out>(
        problem.out, problem.hdim_v, q_rows, problem.heads_q, map_batches, problem.out_stride,
        varlen, kRowsPerWarpgroup);
    out_map.heads_per_row = 1u << pack_shift;
    params.out_by_tma = kRowsPerWarpgroup % out_map.heads_per_row == 0 &&
                        make_tile_map(&params.out_map, out_map, tma_dtype<typename Config::Out>());
    params.out_map_ends_sequences = !varlen && problem.seqused_q == nullptr;
  }
  params.out = problem.out;
  params.out_stride = {problem.out_stride.batch, problem.out_stride.row, problem.out_stride.head};
  params.lse = problem.lse;
  params.lse_batch_stride = problem.lse_batch_stride;
  params.lse_head_stride = problem.lse_head_stride;
  params.accumulate = problem.accumulate;
  params.batch = b;
  params.heads_q = problem.heads_q;
  params.heads_per_kv = problem.heads_q / problem.heads_kv;
  params.pack_shift = pack_shift;
  params.tile_heads = problem.heads_q >> pack_shift;
  params.hdim_v = problem.hdim_v;
  fill_shared_fields(params, problem);
  params.sinks = problem.sinks;
  params.alibi = alibi_slopes(problem);
  if constexpr (Config::kBlockSparse) params.block_sparse = problem.block_sparse;
  if constexpr (Config::kFp8) fill_fp8_fields(params, problem);
  params.num_m_blocks = ((problem.seqlen_q << pack_shift) + Config::kBlockM - 1) / Config::kBlockM;
  params.num_tiles = params.num_m_blocks * params.tile_heads * b;
  if (params.num_tiles == 0) return Status::ok();
  const int grid = std::min(params.num_tiles, context.sm_count);
  params.sections =
      head_sections(problem, pack_shift, params.num_m_blocks, context.l2_bytes, grid);
  // Dynamic schedule (workspace_bytes reserved the counter), unless every tile has a CTA of its
  // own: then no CTA takes a second tile, the two schedules are the same, and the counter's reset
  // (a launch of ~1 us of host time) is saved on the small calls where host time decides.
  if (Config::kWindowed && params.num_tiles > grid) {
    params.tile_counter = static_cast<int32_t*>(problem.workspace);
    if (cudaError_t error = cudaMemsetAsync(params.tile_counter, 0, sizeof(int32_t),
                                            static_cast<cudaStream_t>(problem.stream));
        error != cudaSuccess) {
      return cuda_status(kFamily, "cannot reset the tile counter", error);
    }
  }

  constexpr auto kKernel = forward_kernel<Config>;
  constexpr int kSmem = kSharedBytes<Storage>;
  static_assert(shared_memory_fits<Storage>, "shared memory: 227 KB a CTA at most");
  HFA_RETURN_IF_ERROR(reserve_shared_memory<kKernel>(kFamily, kSmem, problem.device.index));
  kKernel<<<grid, Config::kThreads, kSmem, static_cast<cudaStream_t>(problem.stream)>>>(params);
  return launch_status(kFamily);
}

// The score policy's switch: kAlibi compiles only the ALiBi kernels (their own translation units,
// run_forward_alibi), the rest the plain and softcapped ones.
// FP8 without softcap: the in-kernel V transpose's layer where `v_transpose` asks for it.
template <int kHeadDimQK, int kHeadDimV, bool kWindowed, typename Element, typename Out,
          bool kShortRows = false, bool kKeyBlockScales = false, bool kAlibi = false>
Status launch_softcap_or_not(const detail::ForwardProblem& problem, const LaunchContext& context,
                             Fp8VTranspose v_transpose = Fp8VTranspose::pass) {
  using Plain = TileConfigFor<kHeadDimQK, kHeadDimV, kWindowed, false, Element, Out, kShortRows,
                              kKeyBlockScales>;
  if constexpr (kAlibi) {
    return launch<AlibiTileConfig<Plain>>(problem, context);
  } else {
    using Softcapped = TileConfigFor<kHeadDimQK, kHeadDimV, kWindowed, true, Element, Out,
                                     kShortRows, kKeyBlockScales>;
    if (problem.softcap > 0.0f) return launch<Softcapped>(problem, context);
    if constexpr (Plain::kFp8) {
      if (v_transpose == Fp8VTranspose::in_kernel) {
        return launch<VTransposingTileConfig<Plain>>(problem, context);
      }
    }
    return launch<Plain>(problem, context);
  }
}

// Windowed problems of at most this many keys (varlen: the longest sequence's) run on the
// short-rows configuration where there is one (tile_config.hpp): measured faster at 512 and
// 1024 tokens, causal, not at 2048 (hdim 64). Longer sequences under a sliding window keep the
// standard tile (not measured).
inline constexpr int kShortRowsMaxKeys = 1024;

template <int kHeadDimQK, int kHeadDimV, typename Element, typename Out,
          bool kKeyBlockScales = false, bool kAlibi = false>
Status run_forward_with(const detail::ForwardProblem& problem, const LaunchContext& context,
                        Fp8VTranspose v_transpose = Fp8VTranspose::pass) {
  if (uses_window(problem)) {
    if constexpr (has_short_rows_tile<kHeadDimQK, Element>) {
      if (problem.seqlen_k <= kShortRowsMaxKeys) {
        return launch_softcap_or_not<kHeadDimQK, kHeadDimV, true, Element, Out, true, false,
                                     kAlibi>(problem, context);
      }
    }
    return launch_softcap_or_not<kHeadDimQK, kHeadDimV, true, Element, Out, false,
                                 kKeyBlockScales, kAlibi>(problem, context, v_transpose);
  }
  return launch_softcap_or_not<kHeadDimQK, kHeadDimV, false, Element, Out, false,
                               kKeyBlockScales, kAlibi>(problem, context, v_transpose);
}

template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_forward(const detail::ForwardProblem& problem, const LaunchContext& context) {
  return run_forward_with<kHeadDimQK, kHeadDimV, Element, Element>(problem, context);
}

template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_forward_alibi(const detail::ForwardProblem& problem, const LaunchContext& context) {
  return run_forward_with<kHeadDimQK, kHeadDimV, Element, Element, false, true>(problem, context);
}

// Block-sparse: one configuration per head dims, tiles of one 128 × 128 mask block
// (BlockSparseTileConfig), with or without a window (ANDed with the mask).
template <int kHeadDimQK, int kHeadDimV, typename Element>
Status run_forward_block_sparse(const detail::ForwardProblem& problem,
                                const LaunchContext& context) {
  using Windowed = TileConfig<kHeadDimQK, kHeadDimV, true, false, Element, Element,
                              has_short_rows_tile<kHeadDimQK, Element>>;
  return launch<BlockSparseTileConfig<Windowed>>(problem, context);
}

template <int kHeadDimQK, int kHeadDimV, typename Element, typename Out>
Status run_forward_partial(const detail::ForwardProblem& problem, const LaunchContext& context) {
  using Windowed = TileConfig<kHeadDimQK, kHeadDimV, true, false, Element, Out>;
  using Full = TileConfig<kHeadDimQK, kHeadDimV, false, false, Element, Out>;
  return uses_window(problem) ? launch<Windowed>(problem, context) : launch<Full>(problem, context);
}

// FP8: k or v scaled per block of keys takes the tiles of one block scale each
// (TileConfig::kKeyBlockScales).
template <int kHeadDimQK, int kHeadDimV, typename Out>
Status run_forward_fp8(const detail::ForwardProblem& problem, const LaunchContext& context,
                       Fp8VTranspose v_transpose) {
  if (v_transpose == Fp8VTranspose::in_kernel && problem.softcap > 0.0f) {
    return {Code::internal, std::string(kFamily) + ": no in-kernel V transpose with softcap"};
  }
  if (has_key_block_scales(problem)) {
    return run_forward_with<kHeadDimQK, kHeadDimV, __nv_fp8_e4m3, Out, true>(problem, context,
                                                                            v_transpose);
  }
  return run_forward_with<kHeadDimQK, kHeadDimV, __nv_fp8_e4m3, Out>(problem, context,
                                                                     v_transpose);
}

}  // namespace hfa::sm90::fwd

// One translation unit per (head dims, element type) and the same for ALiBi, per (head dims,
// element, out type) for a partial out, per (head dims, out type) for FP8, and per (head dims,
// element type) of kernel_list.def's block-sparse list.
#define HFA_INSTANTIATE_FORWARD(HEAD_DIM_QK, HEAD_DIM_V, ELEMENT)                          \
  template hfa::Status hfa::sm90::fwd::run_forward<HEAD_DIM_QK, HEAD_DIM_V, ELEMENT>(      \
      const hfa::detail::ForwardProblem&, const hfa::sm90::fwd::LaunchContext&);
#define HFA_INSTANTIATE_FORWARD_ALIBI(HEAD_DIM_QK, HEAD_DIM_V, ELEMENT)                    \
  template hfa::Status hfa::sm90::fwd::run_forward_alibi<HEAD_DIM_QK, HEAD_DIM_V, ELEMENT>( \
      const hfa::detail::ForwardProblem&, const hfa::sm90::fwd::LaunchContext&);
#define HFA_INSTANTIATE_FORWARD_BLOCK_SPARSE(HEAD_DIM_QK, HEAD_DIM_V, ELEMENT)             \
  template hfa::Status                                                                     \
  hfa::sm90::fwd::run_forward_block_sparse<HEAD_DIM_QK, HEAD_DIM_V, ELEMENT>(              \
      const hfa::detail::ForwardProblem&, const hfa::sm90::fwd::LaunchContext&);
#define HFA_INSTANTIATE_FORWARD_PARTIAL(HEAD_DIM_QK, HEAD_DIM_V, ELEMENT, OUT)               \
  template hfa::Status hfa::sm90::fwd::run_forward_partial<HEAD_DIM_QK, HEAD_DIM_V, ELEMENT, OUT>( \
      const hfa::detail::ForwardProblem&, const hfa::sm90::fwd::LaunchContext&);
#define HFA_INSTANTIATE_FORWARD_FP8(HEAD_DIM_QK, HEAD_DIM_V, OUT)                          \
  template hfa::Status hfa::sm90::fwd::run_forward_fp8<HEAD_DIM_QK, HEAD_DIM_V, OUT>(      \
      const hfa::detail::ForwardProblem&, const hfa::sm90::fwd::LaunchContext&,            \
      hfa::sm90::fwd::Fp8VTranspose);
