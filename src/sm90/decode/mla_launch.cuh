// Launches the MLA decode kernels (mla_kernel.cuh) and, when the keys are split, the decode
// combine at V's 512 columns. Included once per kernel's translation unit (mla_bf16.cu,
// mla_fp16.cu: caches of q's dtype; mla_fp8.cu: FP8 records): the MLA kernels compile in
// translation units of their own, beside the other decode kernels'.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "sm90/common/launch.hpp"
#include "sm90/decode/combine_kernel.cuh"
#include "sm90/decode/launch.hpp"
#include "sm90/decode/mla_kernel.cuh"
#include "sm90/decode/params_of.hpp"
#include "sm90/tma_descriptor.hpp"

namespace hfa::sm90::decode {

// The decode parameters of an MLA call: its row tiles are the kernels' 64 rows.
inline Params mla_params_of(const detail::KVCacheProblem& p, const Plan& plan) {
  Params params = params_of(p, plan);
  params.row_tiles = int32_t(mla::row_tiles(params.rows));
  return params;
}

// One MLA kernel over the grid of `d` (its arguments: `d` itself or a struct holding it), then
// the combine of its splits.
template <typename Element, typename Arguments>
Status launch_mla(void (*kernel)(Arguments), const Arguments& arguments, const Params& d,
                  cudaStream_t stream) {
  constexpr int kSmemBytes = mla::kSmemBytes<Element>;
  // Every call (cheap, host-side, allowed during graph capture): the attribute is per device.
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           kSmemBytes);
      e != cudaSuccess)
    return cuda_status(kFamily, "setting the MLA kernel's shared memory size", e);
  const dim3 grid(d.num_splits, d.heads_kv * d.row_tiles, d.batch);
  kernel<<<grid, mla::kThreads, kSmemBytes, stream>>>(arguments);
  if (d.num_splits > 1) {
    const int64_t blocks = (d.rows_total + kCombineRowsPerBlock - 1) / kCombineRowsPerBlock;
    combine_kernel<Element, mla::kHeadDimV><<<unsigned(blocks), kCombineThreads, 0, stream>>>(d);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cuda_status(kFamily, "launch", e);
  return Status::ok();
}

template <typename Element>
Status run_mla(const detail::KVCacheProblem& p, const Plan& plan) {
  mla::MlaParams params;
  params.decode = mla_params_of(p, plan);
  // The cache as (dim, slot, kv-head, page), a box of one 64-column slab of one page: the K
  // tile's 9 copies (the V side is its view, plan.cpp's check).
  constexpr uint64_t kBytes = sizeof(Element);
  const TileMapShape cache{p.k.data,
                           {uint64_t(mla::kHeadDimQK), uint64_t(p.page_size), uint64_t(p.heads_kv),
                            uint64_t(p.num_pages)},
                           {uint64_t(p.k.stride.slot) * kBytes, uint64_t(p.k.stride.head) * kBytes,
                            uint64_t(p.k.stride.page) * kBytes},
                           uint32_t(mla::kBlockN)};
  HFA_RETURN_IF_ERROR(make_tile_map(&params.k_map, cache, tma_dtype<Element>()));
  return launch_mla<Element>(mla::mla_decode_kernel<Element>, params, params.decode,
                             static_cast<cudaStream_t>(p.stream));
}

}  // namespace hfa::sm90::decode
