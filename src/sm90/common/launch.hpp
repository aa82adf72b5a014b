// Host side of every sm90 launch: TMA map shapes of attention tensors, the shared-memory opt-in,
// and CUDA errors as a Status that names the kernel family.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "common/problem.hpp"
#include "common/score_policy.hpp"
#include "sm90/common/math.hpp"
#include "sm90/common/tile_order.cuh"
#include "sm90/tma_descriptor.hpp"

namespace hfa::sm90 {

inline Status cuda_status(const char* family, const char* what, cudaError_t error) {
  return {Code::cuda, std::string(family) + ": " + what + ": " + cudaGetErrorString(error)};
}

template <typename Element>
constexpr CUtensorMapDataType tma_dtype() {
  if constexpr (std::is_same_v<Element, __nv_fp8_e4m3>) {
    return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  } else {
    static_assert(std::is_same_v<Element, __nv_bfloat16> || std::is_same_v<Element, __half>);
    return std::is_same_v<Element, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                  : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  }
}

// Shape of one (batch, row, head, dim) attention tensor as a (dim, row, head, batch) tile map.
// Varlen tensors are (total, head, dim): one batch of `rows` = total rows, whose batch stride
// is never stepped over but must be valid for TMA (a multiple of 16 bytes).
template <typename Element>
TileMapShape tile_map_shape(const void* base, int dim, int rows, int heads, int batch,
                            detail::Strides strides, bool varlen, int box_rows) {
  constexpr uint64_t kBytes = sizeof(Element);
  if (varlen) strides.batch = strides.row * rows;
  return {base,
          {uint64_t(dim), uint64_t(rows), uint64_t(heads), uint64_t(batch)},
          {uint64_t(strides.row) * kBytes, uint64_t(strides.head) * kBytes,
           uint64_t(strides.batch) * kBytes},
          uint32_t(box_rows)};
}

// The window as kernels take it: −1 (unbounded) or at most the longest possible reach
// (policy::clamp_window).
inline int32_t clamp_window(int32_t window, const detail::ForwardProblem& problem) {
  return policy::clamp_window(window, problem.seqlen_q + problem.seqlen_k);
}

// The fields every kernel family's Params shares, under the same names: the sequences
// (sequence.cuh), the window (window.cuh) and the scores' scale. Scores reach the softmax as
// exp2(s·scale_log2 − ...); with a softcap c, s is first tanh(s·softcap_prescale),
// softcap_prescale = softmax_scale / c, and scale_log2 = c·log2(e).
template <typename Params>
void fill_shared_fields(Params& params, const detail::ForwardProblem& problem) {
  params.seqlen_q = problem.seqlen_q;
  params.seqlen_k = problem.seqlen_k;
  params.cu_seqlens_q = problem.cu_seqlens_q;
  params.cu_seqlens_k = problem.cu_seqlens_k;
  params.seqused_q = problem.seqused_q;
  params.seqused_k = problem.seqused_k;
  params.window_left = clamp_window(problem.window_left, problem);
  params.window_right = clamp_window(problem.window_right, problem);
  const bool softcapped = problem.softcap > 0.0f;
  params.softcap_prescale = softcapped ? problem.softmax_scale / problem.softcap : 0.0f;
  params.scale_log2 = (softcapped ? problem.softcap : problem.softmax_scale) * kLog2e;
}

// ALiBi's slopes as the kernels read them (policy::AlibiSlopes): the option's view, and the
// unit, in logits, of the scores the kernels add the bias to.
inline policy::AlibiSlopes alibi_slopes(const detail::OptionVector& slopes, float unit) {
  return {static_cast<const float*>(slopes.data), slopes.batch_stride, slopes.head_stride, unit};
}
// The forward's and backward's tiles add it to the unscaled scores, which their exp2 scales.
inline policy::AlibiSlopes alibi_slopes(const detail::ForwardProblem& problem) {
  return alibi_slopes(problem.vectors.alibi_slopes,
                      policy::score_unit(problem.softmax_scale, problem.softcap));
}

// The sections of the sectioned tile order (tile_order.cuh). Pairs a section: as many as share
// half the L2 (`bytes_per_pair` of operands each), but at least one wave of tiles, then evened
// out over the sections. A section of fewer tiles than CTAs gains no L2 locality (the CTAs
// running at once span several sections anyway) and costs a tail: each section's longest tiles
// start only as the section before drains. Measured (backward, GQA 32/8 heads, 8k causal, hdim
// 128: 64 tiles a pair): one pair a section 2860 µs, two 2404, four (this rule's) 2454, all
// eight 2483; one section of every pair loses 10-40 % below 4k tokens, where L2 locality decides
// (docs/decisions/013).
// The last section's tiles are the grid's last, and nothing follows them to fill the SMs their
// longest tiles leave idle: where the pairs left for it are fewer than a section's and hold
// fewer than two waves of tiles (a causal triangle's mean tile is half its longest, so two waves
// are about one longest tile of work an SM), they join the section before. Evening out leaves
// such remainders: 64 pairs of 32 tiles at 6 pairs a section made nine sections of 7 and a last
// one of 1 pair, whose 64-step tile started as the grid drained (the backward's hdim 128 causal
// 4k: +4.8 % with it joined, docs/decisions/051).
inline TileSections tile_sections(int pairs, int tiles_per_pair, std::size_t bytes_per_pair,
                                  std::size_t l2_bytes, int concurrent_ctas) {
  const auto ceil_div = [](int64_t a, int64_t b) { return int((a + b - 1) / b); };
  pairs = std::max(1, pairs);
  tiles_per_pair = std::max(1, tiles_per_pair);
  const std::size_t fit_in_l2 = l2_bytes / 2 / std::max<std::size_t>(1, bytes_per_pair);
  const int one_wave = ceil_div(concurrent_ctas, tiles_per_pair);
  const int at_least =
      std::clamp(std::max(int(std::min<std::size_t>(fit_in_l2, pairs)), one_wave), 1, pairs);
  const int per_section = ceil_div(pairs, pairs / at_least);
  int count = ceil_div(pairs, per_section);
  const int last_pairs = pairs - (count - 1) * per_section;
  if (count > 1 && last_pairs < per_section &&
      int64_t(last_pairs) * tiles_per_pair < 2 * int64_t(concurrent_ctas)) {
    --count;
  }
  return {per_section, count};
}

// A kernel that takes more than 48 KB of shared memory must opt in, once per device.
template <auto kKernel>
Status reserve_shared_memory(const char* family, int bytes, int device) {
  static std::atomic<uint64_t> reserved_on_device{0};
  const uint64_t device_bit = uint64_t(1) << (device % 64);
  if (reserved_on_device.load(std::memory_order_relaxed) & device_bit) return Status::ok();
  if (cudaError_t error =
          cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      error != cudaSuccess) {
    return cuda_status(family, "cannot reserve shared memory", error);
  }
  reserved_on_device.fetch_or(device_bit, std::memory_order_relaxed);
  return Status::ok();
}

// kernel<<<grid, threads, shared, stream>>>(args...) allowed to start while the kernel before it
// in the stream drains (programmatic dependent launch, ptx/grid_dependency.cuh): the kernel
// waits for that one itself before it reads what that one writes.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, int threads, int shared,
                             cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = std::size_t(shared);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// The launch just made on this thread failed to start (bad configuration, no kernel image).
inline Status launch_status(const char* family) {
  if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) {
    return cuda_status(family, "launch failed", error);
  }
  return Status::ok();
}

}  // namespace hfa::sm90
