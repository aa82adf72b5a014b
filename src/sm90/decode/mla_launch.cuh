// Launches the MLA decode kernel (mla_kernel.cuh) with its keys' split: the balanced schedule
// (the schedule kernel, then the persistent attention, then the combine of the sequences it
// split), or the uniform plan (the attention, then the combine when the keys are split), each
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
#include "sm90/decode/schedule_kernel.cuh"
#include "sm90/tma_descriptor.hpp"

namespace hfa::sm90::decode {

namespace mla {

// The three launches of the balanced schedule, all on one stream: each reads what the one before
// wrote (the schedule, then the partials).
template <typename Element>
void launch_scheduled(const MlaParams& params, cudaStream_t stream) {
  const Params& d = params.decode;
  schedule_kernel<kBlockN><<<1, kScheduleThreads, 0, stream>>>(d);
  const dim3 grid(d.parts, d.heads_kv * d.row_tiles);
  mla_decode_kernel<Element><<<grid, kThreads, kSmemBytes<Element>, stream>>>(params);
  if (d.parts == 1) return;  // nothing split
  const int64_t slot_rows = int64_t(d.heads_q) * d.seqlen_q;
  const dim3 combine_grid(unsigned((slot_rows + kCombineRowsPerBlock - 1) / kCombineRowsPerBlock),
                          d.batch);
  scheduled_combine_kernel<Element, kHeadDimV><<<combine_grid, kCombineThreads, 0, stream>>>(d);
}

// The uniform plan's: the grid (split, kv-head × row tile, sequence).
template <typename Element>
void launch_uniform(const MlaParams& params, cudaStream_t stream) {
  const Params& d = params.decode;
  const dim3 grid(d.num_splits, d.heads_kv * d.row_tiles, d.batch);
  mla_decode_kernel<Element><<<grid, kThreads, kSmemBytes<Element>, stream>>>(params);
  if (d.num_splits == 1) return;
  const int64_t blocks = (d.rows_total + kCombineRowsPerBlock - 1) / kCombineRowsPerBlock;
  combine_kernel<Element, kHeadDimV><<<unsigned(blocks), kCombineThreads, 0, stream>>>(d);
}

}  // namespace mla

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

  // Every call (cheap, host-side, allowed during graph capture): the attribute is per device.
  if (cudaError_t e = cudaFuncSetAttribute(mla::mla_decode_kernel<Element>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           mla::kSmemBytes<Element>);
      e != cudaSuccess)
    return cuda_status(kFamily, "setting the MLA kernel's shared memory size", e);
  auto stream = static_cast<cudaStream_t>(p.stream);
  if (plan.parts > 0)
    mla::launch_scheduled<Element>(params, stream);
  else
    mla::launch_uniform<Element>(params, stream);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cuda_status(kFamily, "launch", e);
  return Status::ok();
}

}  // namespace hfa::sm90::decode
