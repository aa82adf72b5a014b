// Which warpgroup of the CTA a thread is in, and its place inside it.
#pragma once

#include "sm90/common/wgmma_shape.hpp"

namespace hfa::sm90 {

// Shuffled from lane 0 so that the compiler knows it is one value a warp: the role branches on
// it are then uniform, and what derives from it (wgmma descriptors, ring stages, barrier
// addresses) lives in uniform registers. From threadIdx.x / 128 alone, ptxas treats the
// branches as divergent (SASS: R2UR before each wgmma, BSSY/BSYNC around mbarrier waits).
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, int(threadIdx.x) / kThreadsPerWarpgroup, 0);
}

__device__ __forceinline__ int thread_in_warpgroup() { return threadIdx.x % kThreadsPerWarpgroup; }

}  // namespace hfa::sm90
