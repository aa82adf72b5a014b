// Launches the MLA decode kernel (mla_kernel.cuh) and, when the keys are split, the decode
// combine at V's 512 columns. Included once per q dtype (mla_bf16.cu, mla_fp16.cu): the MLA
// kernel compiles in translation units of its own, beside the other decode kernels'.
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

template <typename Element>
Status run_mla(const detail::KVCacheProblem& p, const Plan& plan) {
  mla::MlaParams params;
  params.decode = params_of(p, plan);
  params.decode.row_tiles = (params.decode.rows + mla::kRowsPerTile - 1) / mla::kRowsPerTile;
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

  auto kernel = mla::mla_decode_kernel<Element>;
  constexpr int kSmemBytes = mla::kSmemBytes<Element>;
  // Every call (cheap, host-side, allowed during graph capture): the attribute is per device.
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           kSmemBytes);
      e != cudaSuccess)
    return cuda_status(kFamily, "setting the MLA kernel's shared memory size", e);
  auto stream = static_cast<cudaStream_t>(p.stream);
  const Params& d = params.decode;
  const dim3 grid(d.num_splits, d.heads_kv * d.row_tiles, d.batch);
  kernel<<<grid, mla::kThreads, kSmemBytes, stream>>>(params);
  if (d.num_splits > 1) {
    const int64_t blocks = (d.rows_total + kCombineRowsPerBlock - 1) / kCombineRowsPerBlock;
    combine_kernel<Element, mla::kHeadDimV><<<unsigned(blocks), kCombineThreads, 0, stream>>>(d);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cuda_status(kFamily, "launch", e);
  return Status::ok();
}

}  // namespace hfa::sm90::decode
