// Masking one S tile in registers: keys past the sequence's seqlen_k and keys outside the
// row's window (bottom-right aligned; causal is the window (∞, 0); see common/window.cuh).
#pragma once

#include <cmath>

#include "sm90/common/window.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"

namespace hfa::sm90::fwd {

// The key on the diagonal of tile row `row`'s query (packed with PackGQA): the window's bounds
// and ALiBi's distances are counted from it.
__device__ __forceinline__ int diagonal_key(const Params& p, int row, const Sequence& seq) {
  return query_of_row(p, row) + seq.diagonal();
}

// s: one thread's accumulator of a 64 × kBlockN S tile. row0: the tile row (sequence-relative,
// packed with PackGQA) of the thread's first row; first_column: the key index of its first column
// (n_block·kBlockN + column_pair). Masked scores become −inf, so exp2 turns them into exact 0.
template <bool kWindowed, int kAcc>
__device__ __forceinline__ void apply_mask(float (&s)[kAcc], int row0, int first_column,
                                           const Sequence& seq, const Params& p) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    // This row sees keys [key_begin, key_end).
    int key_end = seq.seqlen_k;
    if constexpr (kWindowed) {
      // The key on the diagonal of the row's query.
      const int facing = diagonal_key(p, row0 + 8 * half, seq);
      if (p.window_right >= 0) key_end = min(key_end, window_last_key(p, facing) + 1);
      if (p.window_left >= 0) {
        mask_row_half<true>(s, half, window_first_key(p, facing) - first_column,
                            key_end - first_column);
        continue;
      }
    }
    mask_row_half<false>(s, half, 0, key_end - first_column);
  }
}

// ALiBi's coordinates of the same fragment (score_mods.cuh): per row half, the column of the
// key on its diagonal, counted from first_column.
__device__ __forceinline__ void fragment_diagonal(float (&diagonal_column)[2], int row0,
                                                  int first_column, const Sequence& seq,
                                                  const Params& p) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    diagonal_column[half] = float(diagonal_key(p, row0 + 8 * half, seq) - first_column);
  }
}

}  // namespace hfa::sm90::fwd
