// setmaxnreg: move registers between the warpgroups of a CTA at run time (sm_90a).
//
// The kernel is compiled for an even split (launch bounds); the producer then gives registers
// back and the consumers take them. Counts are immediates, multiples of 8 in [24, 256].
#pragma once

namespace hfa::sm90::ptx {

template <int kRegisters>
__device__ __forceinline__ void release_registers() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256);
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ __forceinline__ void claim_registers() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256);
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

}  // namespace hfa::sm90::ptx
