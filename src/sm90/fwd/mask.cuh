// Masking one S tile in registers: keys past seqlen_k, and (causal) keys after the diagonal.
#pragma once

#include <cmath>

#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::fwd {

// s: one thread's accumulator of a 64 × kBlockN S tile. row0: the absolute query index of the
// thread's first row; first_column: the absolute key index of the thread's first column
// (n_block·kBlockN + column_pair). Masked scores become −inf, so exp2 turns them into exact 0.
template <bool kCausal, int kAcc>
__device__ __forceinline__ void apply_mask(float (&s)[kAcc], int row0, int first_column,
                                           int seqlen_q, int seqlen_k) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    int key_limit = seqlen_k;  // keys < key_limit are visible to this row
    if constexpr (kCausal) key_limit = min(key_limit, row0 + 8 * half + 1 + seqlen_k - seqlen_q);
    // Compare the compile-time column offset of each register with one per-thread limit.
    const int column_limit = key_limit - first_column;
#pragma unroll
    for (int i = 0; i < kAcc; ++i) {
      if (ptx::fragment_row_half(i) == half && ptx::fragment_column(i, 0) >= column_limit) {
        s[i] = -INFINITY;
      }
    }
  }
}

}  // namespace hfa::sm90::fwd
