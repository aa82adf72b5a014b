// Masking one S tile in registers: keys past the sequence's seqlen_k and keys outside the
// row's window (bottom-right aligned; causal is the window (∞, 0)).
#pragma once

#include <cmath>

#include "sm90/fwd/params.hpp"
#include "sm90/fwd/sequence.cuh"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::fwd {

// s: one thread's accumulator of a 64 × kBlockN S tile. row0: the sequence-relative query index
// of the thread's first row; first_column: the key index of the thread's first column
// (n_block·kBlockN + column_pair). Masked scores become −inf, so exp2 turns them into exact 0.
template <bool kWindowed, int kAcc>
__device__ __forceinline__ void apply_mask(float (&s)[kAcc], int row0, int first_column,
                                           const Sequence& seq, const Params& p) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    int key_end = seq.seqlen_k;  // this row sees keys in [key_begin, key_end)
    int key_begin = 0;
    if constexpr (kWindowed) {
      const int facing = row0 + 8 * half + seq.diagonal();  // the key on the row's diagonal
      if (p.window_right >= 0) key_end = min(key_end, facing + p.window_right + 1);
      if (p.window_left >= 0) key_begin = facing - p.window_left;
    }
    // Compare the compile-time column offset of each register with per-thread limits.
    const int column_end = key_end - first_column;
    const int column_begin = key_begin - first_column;
#pragma unroll
    for (int i = 0; i < kAcc; ++i) {
      const int column = ptx::fragment_column(i, 0);
      if (ptx::fragment_row_half(i) == half && (column >= column_end || column < column_begin)) {
        s[i] = -INFINITY;
      }
    }
  }
}

}  // namespace hfa::sm90::fwd
