// cp.async: Ampere-style asynchronous copies of 4 or 16 bytes from global to shared memory, one
// per thread, zero-filling what the source does not supply; completed in commit groups.
#pragma once

#include <cstdint>

namespace hfa::sm90::ptx {

// 16 bytes, bypassing L1 (streamed once). src_bytes = 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

// 16 bytes through L1: where a lane's neighbouring copies share 32-byte sectors (each fetched
// from L2 once, not once a copy). src_bytes = 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_16_l1(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace hfa::sm90::ptx
