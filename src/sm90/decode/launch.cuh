// Builds Params from a KVCacheProblem and launches the decode kernel (and the combine kernel
// when the keys are split). Included once per q dtype (bf16.cu, fp16.cu).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "sm90/common/launch.hpp"
#include "sm90/decode/combine_kernel.cuh"
#include "sm90/decode/head_dim.hpp"
#include "sm90/decode/kernel.cuh"
#include "sm90/decode/stream_kernel.cuh"
#include "sm90/decode/launch.hpp"
#include "sm90/decode/params_of.hpp"

namespace hfa::sm90::decode {

template <typename Element, Storage kStorage, int kHeadDim>
Status launch_decode(const Params& params, cudaStream_t stream) {
  using C = Config<kStorage, kHeadDim>;
  auto kernel = decode_kernel<Element, kStorage, kHeadDim>;
  // Every call (cheap, host-side, allowed during graph capture): the attribute is per device.
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           C::kSmemBytes);
      e != cudaSuccess)
    return cuda_status(kFamily, "setting the shared memory size", e);
  const dim3 grid(params.num_splits, params.heads_kv * params.row_tiles, params.batch);
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(params);
  return Status::ok();
}

template <typename Element, Storage kStorage>
Status launch_stream(Params params, cudaStream_t stream) {
  using C = StreamConfig<kStorage>;
  auto kernel = stream_kernel<Element, kStorage>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           C::kSmemBytes);
      e != cudaSuccess)
    return cuda_status(kFamily, "setting the shared memory size", e);
  params.row_tiles = (params.rows + C::kRowsPerTile - 1) / C::kRowsPerTile;
  const dim3 grid(params.num_splits, params.heads_kv * params.row_tiles, params.batch);
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(params);
  return Status::ok();
}

// The attention of one storage format: the stream kernel where stream::takes says so
// (compiled only at its head dim), else the tile kernel.
template <typename Element, Storage kStorage, int kHeadDim>
Status launch_attention(const Params& params, bool stream_kernel, cudaStream_t stream) {
  if constexpr (kHeadDim == stream::kHeadDim)
    if (stream_kernel) return launch_stream<Element, kStorage>(params, stream);
  return launch_decode<Element, kStorage, kHeadDim>(params, stream);
}

// Everything one head dim launches: the attention for the cache's format, then the combine of
// the split partials.
template <typename Element, int kHeadDim>
Status launch_for_head_dim(const detail::KVCacheProblem& p, const Params& params, cudaStream_t stream) {
  Status status;
  const bool stream_kernel = stream::takes(p, params.rows);
  switch (p.format) {
    case detail::CacheFormat::plain:
      status = launch_attention<Element, Storage::plain, kHeadDim>(params, stream_kernel, stream);
      break;
    case detail::CacheFormat::fp8_per_head:
    case detail::CacheFormat::fp8_per_token:
      status = launch_attention<Element, Storage::fp8, kHeadDim>(params, stream_kernel, stream);
      break;
    default:
      status = launch_attention<Element, Storage::fp4, kHeadDim>(params, stream_kernel, stream);
      break;
  }
  if (!status) return status;
  if (params.num_splits > 1) {
    const int64_t blocks = (params.rows_total + kCombineRowsPerBlock - 1) / kCombineRowsPerBlock;
    combine_kernel<Element, kHeadDim><<<unsigned(blocks), kCombineThreads, 0, stream>>>(params);
  }
  return Status::ok();
}

template <typename Element>
Status run(const detail::KVCacheProblem& p, const Plan& plan) {
  const Params params = params_of(p, plan);
  auto stream = static_cast<cudaStream_t>(p.stream);
  const Status status = with_head_dim(p.hdim_qk, [&](auto head_dim) {
    return launch_for_head_dim<Element, decltype(head_dim)::value>(p, params, stream);
  });
  if (!status) return status;
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cuda_status(kFamily, "launch", e);
  return Status::ok();
}

}  // namespace hfa::sm90::decode
