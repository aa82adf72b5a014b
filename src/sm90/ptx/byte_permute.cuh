// prmt: four bytes picked out of two registers, for moving 8-bit values where the matrix
// instructions (matrix_move.cuh) move 16-bit ones.
#pragma once

#include <cstdint>

namespace hfa::sm90::ptx {

// Byte i of the result is byte (selector >> 4i) & 7 of the eight bytes of {a, b}, a's the low
// four (0..3), b's the high (4..7). A selector held in a register may differ between lanes.
__device__ __forceinline__ uint32_t byte_permute(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
  return r;
}

}  // namespace hfa::sm90::ptx
