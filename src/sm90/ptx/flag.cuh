// Flags in global memory that order work across CTAs of one grid (the deterministic backward's
// turns): a CTA waits until a counter reaches its turn, does its part, then passes the turn on.
#pragma once

#include <cstdint>

namespace hfa::sm90::ptx {

// Spins until *flag == value; acquire at GPU scope: what the CTA that set it wrote before is
// visible after.
__device__ __forceinline__ void wait_flag(const int32_t* flag, int32_t value) {
  int32_t seen;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(flag) : "memory");
  } while (seen != value);
}

// *flag += 1; release at GPU scope: what this thread wrote (or saw complete) before is visible
// to the CTA that waits for the new value.
__device__ __forceinline__ void pass_flag(int32_t* flag) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(flag) : "memory");
}

}  // namespace hfa::sm90::ptx
