// mbarrier: shared-memory barriers that count thread arrivals and TMA bytes (sm_90).
//
// A barrier completes a phase when its expected arrivals and expected transaction bytes have
// all come in; waiters name the phase they wait for by its parity bit.
#pragma once

#include <cstdint>

namespace hfa::sm90::ptx {

__device__ __forceinline__ uint32_t smem_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

struct alignas(8) Mbarrier {
  uint64_t state;

  // One thread initializes; fence_barrier_init() + a CTA barrier publish it before first use.
  __device__ __forceinline__ void init(uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(this)), "r"(arrivals)
                 : "memory");
  }

  __device__ __forceinline__ void arrive() {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(this))
                 : "memory");
  }

  // One arrival that also announces `bytes` of TMA traffic the phase must wait for.
  __device__ __forceinline__ void arrive_expect_tx(uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                     smem_address(this)),
                 "r"(bytes)
                 : "memory");
  }

  __device__ __forceinline__ bool try_wait(uint32_t parity) const {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_address(this)), "r"(parity)
        : "memory");
    return done != 0;
  }

  // Blocks until the phase with this parity has completed.
  __device__ __forceinline__ void wait(uint32_t parity) const {
    while (!try_wait(parity)) {
    }
  }
};

__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Position in a ring of kStages buffers: which stage, and the parity of its current use.
// Consumers wait on "full" with `phase`; producers wait on "empty" with `phase ^ 1`, so the
// first pass over fresh barriers does not block the producer.
template <int kStages>
struct RingPosition {
  int stage = 0;
  uint32_t phase = 0;

  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

}  // namespace hfa::sm90::ptx
