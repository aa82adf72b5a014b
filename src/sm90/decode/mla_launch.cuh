// Launches an MLA decode kernel (mla_kernel.cuh) with its keys' split: the balanced schedule
// (the schedule kernel, then the persistent attention, then the combine of the sequences it
// split), or the uniform plan (the attention, then the combine when the keys are split), each
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
#include "sm90/decode/schedule_kernel.cuh"
#include "sm90/tma_descriptor.hpp"

namespace hfa::sm90::decode {

// The decode parameters of an MLA call: its row tiles are the kernels' 64 rows.
inline Params mla_params_of(const detail::KVCacheProblem& p, const Plan& plan) {
  Params params = params_of(p, plan);
  params.row_tiles = int32_t(mla::row_tiles(params.rows));
  return params;
}

namespace mla {

// An MLA kernel: its arguments are the decode parameters themselves or a struct holding them.
template <typename Arguments>
using Kernel = void (*)(Arguments);

// The three launches of the balanced schedule, all on one stream: each reads what the one before
// wrote (the schedule, then the partials). The second and third are dependent launches: each
// starts while the one before drains and waits for it in the kernel (skeleton.cuh,
// combine_kernel.cuh), so that neither pays a launch's latency after the one before ends. A
// schedule an earlier call left in the workspace (reuse_schedule) is not made again: the
// attention then waits for whatever ran before it on the stream, as it waits for the schedule.
template <typename Element, typename Arguments>
cudaError_t launch_scheduled(Kernel<Arguments> kernel, const Arguments& arguments,
                             const Params& d, bool make_schedule, cudaStream_t stream) {
  if (make_schedule) schedule_kernel<kBlockN><<<1, kScheduleThreads, 0, stream>>>(d);
  // The row tiles of a part side by side (FlashMLA's order): they read the same pages at about
  // the same time.
  const dim3 grid(d.heads_kv * d.row_tiles, d.parts);
  if (cudaError_t e = launch_dependent(kernel, grid, kThreads, kSmemBytes<Element>, stream,
                                       arguments);
      e != cudaSuccess || d.parts == 1)  // parts == 1: nothing split
    return e;
  const int64_t slot_rows = int64_t(d.heads_q) * d.seqlen_q;
  const dim3 combine_grid(unsigned((slot_rows + kCombineRowsPerBlock - 1) / kCombineRowsPerBlock),
                          d.batch);
  return launch_dependent(scheduled_combine_kernel<Element, kHeadDimV>, combine_grid,
                          kCombineThreads, 0, stream, d);
}

// The uniform plan's: the grid (split, kv-head × row tile, sequence).
template <typename Element, typename Arguments>
void launch_uniform(Kernel<Arguments> kernel, const Arguments& arguments, const Params& d,
                    cudaStream_t stream) {
  const dim3 grid(d.num_splits, d.heads_kv * d.row_tiles, d.batch);
  kernel<<<grid, kThreads, kSmemBytes<Element>, stream>>>(arguments);
  if (d.num_splits == 1) return;
  const int64_t blocks = (d.rows_total + kCombineRowsPerBlock - 1) / kCombineRowsPerBlock;
  combine_kernel<Element, kHeadDimV><<<unsigned(blocks), kCombineThreads, 0, stream>>>(d);
}

}  // namespace mla

// One MLA kernel on the work of `d` (the balanced schedule when the plan made one), with the
// launches around it, on p's stream.
template <typename Element, typename Arguments>
Status launch_mla(mla::Kernel<Arguments> kernel, const Arguments& arguments, const Params& d,
                  const detail::KVCacheProblem& p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  // Every call (cheap, host-side, allowed during graph capture): the attribute is per device.
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           mla::kSmemBytes<Element>);
      e != cudaSuccess)
    return cuda_status(kFamily, "setting the MLA kernel's shared memory size", e);
  cudaError_t e = cudaSuccess;
  if (d.parts > 0)
    e = mla::launch_scheduled<Element>(kernel, arguments, d, !p.reuse_schedule, stream);
  else
    mla::launch_uniform<Element>(kernel, arguments, d, stream);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_status(kFamily, "launch", e);
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
  return launch_mla<Element>(mla::mla_decode_kernel<Element>, params, params.decode, p);
}

}  // namespace hfa::sm90::decode
