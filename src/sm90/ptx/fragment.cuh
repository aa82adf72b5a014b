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

// An accumulator as the A operand of the next wgmma (rs form). The m64k16 A fragment of a thread
// is {(row0, c..c+1), (row0+8, c..c+1), (row0, c+8..c+9), (row0+8, c+8..c+9)}: exactly the
// accumulator registers 8k..8k+7 of columns 16k..16k+15 taken in pairs, so conversion is only
// packing, no data movement between threads.
template <typename Element, int kAcc>
__device__ __forceinline__ void accumulator_to_operand(const float (&acc)[kAcc],
                                                       uint32_t (&operand)[kAcc / 2]) {
#pragma unroll
  for (int i = 0; i < kAcc / 2; ++i) operand[i] = pack_pair<Element>(acc[2 * i], acc[2 * i + 1]);
}

}  // namespace hfa::sm90::ptx
