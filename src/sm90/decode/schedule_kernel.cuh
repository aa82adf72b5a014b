// The balanced schedule's kernel (split_schedule.hpp): one CTA turns the lengths on the device
// into the schedule in the call's workspace, on the attention's stream just before it. The host
// never reads a length, and the launch is of a fixed size: a CUDA graph captures it, and its
// replays schedule whatever lengths the step has. Thread t takes a contiguous range of the
// sequences; two prefix sums over the threads (of their ranges' costs, then of their slots) tell
// each range where it starts, and each thread then writes its range's part.
#pragma once

#include <cstdint>

#include "sm90/decode/params.hpp"
#include "sm90/decode/sequence.cuh"
#include "sm90/decode/split_schedule.hpp"
#include "sm90/decode/work.cuh"
#include "sm90/ptx/grid_dependency.cuh"

namespace hfa::sm90::decode {

// One sequence a thread up to a batch of 256 (serving batches seldom hold more); past that each
// thread's range grows, the two prefix sums staying one each.
inline constexpr int kScheduleThreads = 256;
inline constexpr int kScheduleWarps = kScheduleThreads / kWarpSize;

// The sum of `value` over the CTA's threads before this one, and in *total over all of them.
// Every thread calls it; warp_sums is free again when it returns.
__device__ __forceinline__ int64_t exclusive_sum(int64_t value,
                                                 int64_t (&warp_sums)[kScheduleWarps],
                                                 int64_t* total) {
  const int lane = int(threadIdx.x) % kWarpSize, warp = int(threadIdx.x) / kWarpSize;
  int64_t inclusive = value;
#pragma unroll
  for (int offset = 1; offset < kWarpSize; offset *= 2) {
    const int64_t before = __shfl_up_sync(kFullWarp, inclusive, offset);
    if (lane >= offset) inclusive += before;
  }
  if (lane == kWarpSize - 1) warp_sums[warp] = inclusive;
  __syncthreads();
  int64_t before_warp = 0, all = 0;
#pragma unroll
  for (int w = 0; w < kScheduleWarps; ++w) {
    if (w < warp) before_warp += warp_sums[w];
    all += warp_sums[w];
  }
  __syncthreads();
  *total = all;
  return before_warp + inclusive - value;
}

// The bounds of the CTA's sequence costs, from each thread's; every thread calls it and gets
// them. warp_bounds is free again when it returns.
__device__ __forceinline__ schedule::CostBounds block_bounds(
    schedule::CostBounds bounds, schedule::CostBounds (&warp_bounds)[kScheduleWarps]) {
#pragma unroll
  for (int mask = 1; mask < kWarpSize; mask *= 2)
    bounds.merge({__shfl_xor_sync(kFullWarp, bounds.least, mask),
                  __shfl_xor_sync(kFullWarp, bounds.most, mask)});
  if (int(threadIdx.x) % kWarpSize == 0) warp_bounds[threadIdx.x / kWarpSize] = bounds;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kScheduleWarps; ++w) bounds.merge(warp_bounds[w]);
  __syncthreads();
  return bounds;
}

// The schedule of p.parts parts into p.part_starts and p.first_slot; sequences dealt out in
// stages of kBlockN keys.
template <int kBlockN>
__global__ void __launch_bounds__(kScheduleThreads) schedule_kernel(const __grid_constant__ Params p) {
  // The attention after it may launch at once (mla_launch.cuh): it waits for the schedule.
  ptx::allow_dependent_launch();
  __shared__ int64_t warp_sums[kScheduleWarps];
  __shared__ schedule::CostBounds warp_bounds[kScheduleWarps];
  const int32_t per_thread = (p.batch + kScheduleThreads - 1) / kScheduleThreads;
  const int32_t lo = min(p.batch, int32_t(threadIdx.x) * per_thread);
  const int32_t hi = min(p.batch, lo + per_thread);
  const auto tiles_of = [&p](int32_t b) {
    return scheduled_tiles<kBlockN>(p, decode_sequence(p, b)).count;
  };
  int64_t total = 0, slots = 0;
  schedule::CostBounds bounds;
  const int64_t cost_base =
      exclusive_sum(schedule::cost_of_range(tiles_of, lo, hi, &bounds), warp_sums, &total);
  const int64_t share =
      schedule::balanced_share(total, p.parts, block_bounds(bounds, warp_bounds).uniform());
  const int64_t slot_base = exclusive_sum(
      schedule::slots_of_range(tiles_of, lo, hi, cost_base, share), warp_sums, &slots);
  const schedule::Schedule out{p.part_starts, p.first_slot};
  schedule::write_range(tiles_of, lo, hi, cost_base, slot_base, share, out);
  if (threadIdx.x == 0) schedule::write_end(total, share, p.parts, p.batch, slots, out);
}

}  // namespace hfa::sm90::decode
