// ldmatrix / stmatrix / movmatrix: 8×8 tiles of 16-bit values moved between shared memory (or
// another thread's registers) and the mma fragment layout (lane l: row l / 4, columns
// 2·(l % 4), +1).
#pragma once

#include <cstdint>

namespace hfa::sm90::ptx {

__device__ __forceinline__ void ldmatrix_x4(uint32_t address, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t address, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// Stores four 8×8 matrices, register i of each lane holding matrix i's fragment; lanes 8i..8i+7
// give the shared-memory addresses of matrix i's rows (16 bytes each).
__device__ __forceinline__ void stmatrix_x4(uint32_t address, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// As stmatrix_x4, each matrix stored transposed: lane l's register i holds (row l / 4, columns
// 2·(l % 4), +1) of matrix i, which land in column l / 4 of stored rows 2·(l % 4), +1; lanes
// 8i..8i+7 give the addresses of matrix i's stored rows (its columns, 16 bytes each). An
// accumulator tile's columns become the stored rows.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t address, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// Two matrices the same way (lanes 0..15 give the addresses): the last 8 columns of an
// accumulator whose columns are an odd number of 8-column groups.
__device__ __forceinline__ void stmatrix_x2_trans(uint32_t address, const uint32_t (&r)[2]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(address),
               "r"(r[0]), "r"(r[1])
               : "memory");
}

// The transpose of an 8x8 b16 matrix held as an mma fragment: an accumulator tile's rows
// become a B operand's k.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
  return r;
}

}  // namespace hfa::sm90::ptx
