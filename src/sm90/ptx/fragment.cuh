// Where the values of a wgmma accumulator live: the m64nN fp32 fragment of one thread.
//
// Warp w of the warpgroup owns rows 16w..16w+15. For each 8-column group j, lane l holds
//   acc[4j + 0..1] = (row0, 8j + 2·(l % 4) + 0..1),   acc[4j + 2..3] = (row0 + 8, same columns),
// with row0 = 16w + l / 4. So a thread holds two rows, and the four lanes of a quad share them.
#pragma once

#include <cstdint>
#include <type_traits>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace hfa::sm90::ptx {

struct FragmentCoords {
  int row0;         // first of the thread's two rows (the second is row0 + 8)
  int column_pair;  // 2·(lane % 4): first column of the thread's pair in each 8-column group
};

__device__ __forceinline__ FragmentCoords fragment_coords(int thread_in_warpgroup) {
  const int warp = thread_in_warpgroup / 32;
  const int lane = thread_in_warpgroup % 32;
  return {16 * warp + lane / 4, 2 * (lane % 4)};
}

// Row (0 or 1, i.e. row0 or row0 + 8) and column of accumulator register i.
__device__ __forceinline__ constexpr int fragment_row_half(int i) { return (i / 2) % 2; }
__device__ __forceinline__ constexpr int fragment_column(int i, int column_pair) {
  return 8 * (i / 4) + column_pair + i % 2;
}

template <typename Element>
__device__ __forceinline__ Element to_element(float x) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else return __float2half_rn(x);
}

// Two floats as one register of two 16-bit values, the first in the low half.
template <typename Element>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// Four floats as one register of four e4m3 codes (round to nearest even, saturated to ±448),
// the first in the lowest byte. cvt's e4m3x2 puts its first source in the upper byte.
__device__ __forceinline__ uint32_t pack_e4m3x4(float b0, float b1, float b2, float b3) {
  uint32_t low, high;
  asm("{\n.reg .b16 l, h;\n"
      "cvt.rn.satfinite.e4m3x2.f32 l, %3, %2;\n"
      "cvt.rn.satfinite.e4m3x2.f32 h, %5, %4;\n"
      "cvt.u32.u16 %0, l;\ncvt.u32.u16 %1, h;\n}\n"
      : "=r"(low), "=r"(high)
      : "f"(b0), "f"(b1), "f"(b2), "f"(b3));
  return low | high << 16;
}

// An accumulator as the A operand of the next wgmma (rs form), without moving data between
// threads.
//   16-bit: the m64k16 A fragment of a thread is {(row0, c..c+1), (row0+8, c..c+1), (row0,
//     c+8..c+9), (row0+8, c+8..c+9)}: exactly the accumulator registers 8k..8k+7 of columns
//     16k..16k+15 taken in pairs, so conversion is only packing.
//   e4m3: the m64k32 A fragment is {(row0, 4q..4q+3), (row0+8, 4q..4q+3), (row0, 16+4q..),
//     (row0+8, 16+4q..)} with q = lane % 4, while the accumulator holds columns 2q, 2q+1, 8+2q,
//     9+2q of each 16. Register 4t + r (r < 4) of 32-column chunk t takes accumulators base,
//     base+1, base+4, base+5 with base = 16t + 2·(r % 2) + 8·(r / 2): A column c of each 16 then
//     holds score column fp8_key_order(c), and the B operand must hold V's keys in that order
//     (the forward's V transpose writes them so). P·V sums over keys: nothing else changes.
template <typename Element, int kAcc, int kRegs>
__device__ __forceinline__ void accumulator_to_operand(const float (&acc)[kAcc],
                                                       uint32_t (&operand)[kRegs]) {
  if constexpr (std::is_same_v<Element, __nv_fp8_e4m3>) {
    static_assert(kRegs == kAcc / 4 && kAcc % 16 == 0);
#pragma unroll
    for (int j = 0; j < kRegs; ++j) {
      const int base = 16 * (j / 4) + 2 * (j % 2) + 8 * (j % 4 / 2);
      operand[j] = pack_e4m3x4(acc[base], acc[base + 1], acc[base + 4], acc[base + 5]);
    }
  } else {
    static_assert(kRegs == kAcc / 2);
#pragma unroll
    for (int i = 0; i < kRegs; ++i) operand[i] = pack_pair<Element>(acc[2 * i], acc[2 * i + 1]);
  }
}

// The score column (of 16) that A column c of an e4m3 operand built above holds: the order in
// which V's keys must be stored for P·V.
__host__ __device__ __forceinline__ constexpr int fp8_key_order(int c) {
  return 2 * (c / 4) + c % 2 + 8 * (c / 2 % 2);
}

}  // namespace hfa::sm90::ptx
