// Named barriers: the 16 hardware barriers of a CTA, synchronizing a subset of its warps.
#pragma once

#include <cstdint>

namespace hfa::sm90::ptx {

// Every id hfa uses, in one place, so no two roles ever share one by accident.
enum class NamedBarrier : uint32_t {
  sync_threads = 0,      // reserved: __syncthreads
  warp_scheduler = 1,    // 1..3: turn of consumer warpgroup 0..2 (forward: to issue its GEMMs;
                         // backward: at P's exponentials)
  scores_shared = 4,     // backward: both consumer warpgroups' Pᵀ/dSᵀ tiles are in shared memory
  padding_zeroed = 5,    // backward: the tile rows past a sequence's used length are zeros
  v_padding_zeroed = 6,  // 6..8: forward, consumer warpgroup 0..2 zeroed V's rows past seqused_k
  out_staged = 9,        // 9..11: forward, consumer warpgroup 0..2's O buffer (free, then written)
  gradients_staged = 12, // backward: K and V free for dK and dV, then holding them
  mla_consumers = 13,    // MLA decode: both consumer warpgroups (Q staged, O staged, row sums)
  mla_p_ready = 14,      // 14..15, MLA decode: P of a pair's tile 0 / 1 in its rotary slab
  // MLA decode's kernel has none of the forward's or the backward's barriers: it takes 1..2 again.
  mla_max_ready = 1,     // 1..2, MLA decode: warpgroup 0's / 1's row maxima of a pair shared
  count = 16,
};

inline constexpr uint32_t kWarpgroupThreads = 128;

__device__ __forceinline__ uint32_t barrier_id(NamedBarrier base, uint32_t offset = 0) {
  return static_cast<uint32_t>(base) + offset;
}

__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// named_barrier_arrive once every value of `after` is computed, for a turn handed on at the end
// of a phase: the thread count depends on all of them, so ptxas cannot issue the arrive earlier
// (it did, after 3 of 40 exponentials, when nothing tied them: docs/decisions/041).
// min(bits | kThreads, kThreads) is kThreads whatever the bits, NaN included, in an asm the
// compiler does not fold.
template <uint32_t kThreads, int N>
__device__ __forceinline__ void named_barrier_arrive_after(const float (&after)[N], uint32_t id) {
  uint32_t bits = kThreads;
#pragma unroll
  for (int i = 0; i < N; ++i) bits |= __float_as_uint(after[i]);
  uint32_t threads;
  asm volatile("min.u32 %0, %1, %2;\n" : "=r"(threads) : "r"(bits), "n"(kThreads));
  named_barrier_arrive(id, threads);
}

}  // namespace hfa::sm90::ptx
