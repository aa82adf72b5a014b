// Adding a warpgroup's fp32 accumulators into a FragmentChunk (workspace.hpp) in global memory.
#pragma once

#include "sm90/bwd/workspace.hpp"
#include "sm90/ptx/global_reduce.cuh"

namespace hfa::sm90::bwd {

inline constexpr int kPartRegisters = kSlabColumns / 2;  // a 64 × 64 part over 128 threads

// slab: the thread's registers of one 64 × 64 part (64 × 80: kRegisters 40, a transposed dK or
// dV slab over 80 keys); part: that part of the chunk. Register 4g + r of thread t goes to
// float (g·128 + t)·4 + r: one 16-byte reduction a group, a warp's 512 contiguous bytes at a
// time.
template <int kRegisters = kPartRegisters>
__device__ __forceinline__ void add_fragment_part(float* part, const float* slab, int thread) {
#pragma unroll
  for (int group = 0; group < kRegisters / 4; ++group) {
    const float* r = slab + 4 * group;
    ptx::reduce_add_v4(part + 4 * (group * kThreadsPerWarpgroup + thread),
                       make_float4(r[0], r[1], r[2], r[3]));
  }
}

}  // namespace hfa::sm90::bwd
