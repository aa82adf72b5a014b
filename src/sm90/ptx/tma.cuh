// TMA: the Tensor Memory Accelerator's bulk copies between global and shared memory: tensor
// copies described by a CUtensorMap built on the host (tma_descriptor.hpp), and plain 1-D runs of
// bytes (load_1d, reduce_add_1d, and prefetch_l2_1d into L2 only). One thread issues each. Loads
// complete on an mbarrier (transaction bytes); stores complete in bulk groups.
// Out-of-bounds box elements read as zero and are never written: tails need no special code.
#pragma once

#include <cstdint>
#include <cuda.h>

#include "sm90/ptx/mbarrier.cuh"

namespace hfa::sm90::ptx {

// L2 eviction hints (the createpolicy encodings CUTLASS names CacheHintSm90).
enum class CacheHint : uint64_t {
  evict_normal = 0x1000000000000000ull,
  evict_first = 0x12F0000000000000ull,  // read once (Q)
  evict_last = 0x14F0000000000000ull,   // re-read by other CTAs (K, V)
};

__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Loads the box at coordinates (c0 innermost .. c3) of a rank-4 map into shared memory.
__device__ __forceinline__ void load_4d(void* smem_dst, const CUtensorMap* map, Mbarrier* barrier,
                                        int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                                        CacheHint hint) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5, %6}], [%2], %7;\n" ::"r"(smem_address(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_address(barrier)), "r"(c0), "r"(c1), "r"(c2),
      "r"(c3), "l"(static_cast<uint64_t>(hint))
      : "memory");
}

// Loads the box at coordinates (c0 innermost .. c4) of a rank-5 map into shared memory.
__device__ __forceinline__ void load_5d(void* smem_dst, const CUtensorMap* map, Mbarrier* barrier,
                                        int32_t c0, int32_t c1, int32_t c2, int32_t c3, int32_t c4,
                                        CacheHint hint) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2], %8;\n" ::"r"(smem_address(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_address(barrier)), "r"(c0), "r"(c1), "r"(c2),
      "r"(c3), "r"(c4), "l"(static_cast<uint64_t>(hint))
      : "memory");
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory
// as one bulk copy, completing on `barrier` like a tensor load.
__device__ __forceinline__ void load_1d(void* smem_dst, const void* src, uint32_t bytes,
                                        Mbarrier* barrier, CacheHint hint) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;\n" ::"r"(smem_address(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_address(barrier)),
      "l"(static_cast<uint64_t>(hint))
      : "memory");
}

// Asks for `bytes` (a multiple of 16; the address 16-byte aligned) of global memory to be brought
// into L2, and returns at once: a hint, with no barrier and no destination, so that later loads
// of those bytes hit L2 rather than HBM.
__device__ __forceinline__ void prefetch_l2_1d(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(reinterpret_cast<uint64_t>(src)),
               "r"(bytes)
               : "memory");
}

// Adds `bytes` of fp32 values from shared memory into global memory, element by element and
// atomically against other adds; a bulk group like a store (commit, then wait).
__device__ __forceinline__ void reduce_add_1d(float* dst, const float* smem_src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   reinterpret_cast<uint64_t>(dst)),
               "r"(smem_address(smem_src)), "r"(bytes)
               : "memory");
}

// Stores a shared-memory box to global memory; complete with commit_group + wait_group_read.
__device__ __forceinline__ void store_4d(const CUtensorMap* map, const void* smem_src, int32_t c0,
                                         int32_t c1, int32_t c2, int32_t c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(smem_address(smem_src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// Stores a shared-memory box to global memory at coordinates (c0 innermost .. c4) of a rank-5
// map, as store_4d.
__device__ __forceinline__ void store_5d(const CUtensorMap* map, const void* smem_src, int32_t c0,
                                         int32_t c1, int32_t c2, int32_t c3, int32_t c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(smem_address(smem_src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

__device__ __forceinline__ void store_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until the committed stores have finished reading shared memory (it may be reused).
__device__ __forceinline__ void store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// Waits until the committed stores are complete in global memory.
__device__ __forceinline__ void store_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// Orders global memory between the generic proxy (ordinary loads, stores, flags) and the async
// proxy (bulk copies): a flag that says bulk writes landed, or that bulk writes may begin.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads
// (a TMA store or a wgmma of the same bytes).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

}  // namespace hfa::sm90::ptx
