// hfa_quantize_kv / hfa_dequantize_kv on a Hopper GPU: one warp per (page, slot, head) row, each
// lane owning hdim / 32 columns as in the append (append_kernel.cuh), whose encode_lane writes
// the codes and scales, so that quantizing a row writes the bytes appending it writes. Decoding
// goes through common/kv_rows.hpp's decode_columns, the CPU reads' decoder.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "common/errors.hpp"
#include "common/kv_rows.hpp"
#include "sm90/decode/append_kernel.cuh"
#include "sm90/decode/head_dim.hpp"
#include "sm90/device.hpp"
#include "sm90/operations.hpp"

namespace hfa::sm90::decode {
namespace {

using detail::QuantizeProblem;

static_assert(std::is_trivially_copyable_v<QuantizeProblem>, "the kernel's parameter");
constexpr int64_t kMaxGridX = INT32_MAX;

__device__ __forceinline__ float load_value(const QuantizeProblem& p, int64_t at) {
  if (p.values_dtype == DType::f32) return static_cast<const float*>(p.values)[at];
  return to_float(p.values_dtype, static_cast<const uint16_t*>(p.values)[at]);
}

__device__ __forceinline__ void store_value(const QuantizeProblem& p, int64_t at, float value) {
  if (p.values_dtype == DType::f32) static_cast<float*>(p.values)[at] = value;
  else static_cast<uint16_t*>(p.values)[at] = from_float(p.values_dtype, value);
}

template <int kHeadDim>
__global__ void __launch_bounds__(kAppendThreads)
    quantize_kernel(const __grid_constant__ QuantizeProblem p) {
  static_assert(lanes_fit<kHeadDim>(), "whole lanes per row, per scale block and per code byte");
  constexpr int kValues = kValuesPerLane<kHeadDim>;
  const int64_t row = int64_t{blockIdx.x} * kAppendWarps + threadIdx.x / kAppendLanes;
  if (row >= p.rows()) return;  // the whole warp: its shuffles stay among live lanes
  const int lane = int(threadIdx.x % kAppendLanes);
  const int64_t head = row % p.heads;
  const int64_t slot = row / p.heads % p.slots;
  const int64_t page = row / p.heads / p.slots;
  const int column = lane * kValues;
  const int64_t at = p.values_stride.offset(page, slot, head) + column;
  float x[kValues];
  if (p.dequantize) {
    detail::decode_columns(p.format, p.side, page, slot, head, column, kValues, x);
#pragma unroll
    for (int k = 0; k < kValues; ++k) store_value(p, at + k, x[k]);
    return;
  }
#pragma unroll
  for (int k = 0; k < kValues; ++k) x[k] = load_value(p, at + k);
  encode_lane(p.format, DType::e4m3, p.side, page, slot, head, lane, x);
}

}  // namespace
}  // namespace hfa::sm90::decode

namespace hfa::sm90 {

Status quantize_kv(const detail::QuantizeProblem& p) {
  using namespace decode;
  const int64_t blocks = (p.rows() + kAppendWarps - 1) / kAppendWarps;
  if (blocks > kMaxGridX)
    return detail::not_supported("x: ", p.rows(), " rows above the GPU quantization's ",
                                 kMaxGridX * kAppendWarps, " (one warp each)");
  DeviceGuard guard(p.device.index);
  const Status launched = with_head_dim(p.side.hdim, [&](auto head_dim) {
    quantize_kernel<decltype(head_dim)::value>
        <<<unsigned(blocks), kAppendThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(p);
    return Status::ok();
  });
  if (!launched) return launched;
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return {Code::cuda, std::string("sm90 KV quantization: launch: ") + cudaGetErrorString(e)};
  return Status::ok();
}

}  // namespace hfa::sm90
