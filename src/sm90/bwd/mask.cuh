// Masking a transposed score tile (keys as rows, queries as columns) in registers: every query
// of a key past seqlen_k, and the queries outside each key's window. Query i sees key j iff
// j − diagonal − right <= i <= j − diagonal + left (common/window.cuh), so a key row's visible
// queries are one range; its lower end comes from the right window (causal: the diagonal).
#pragma once

#include <cmath>

#include "sm90/common/window.cuh"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::bwd {

// s: one thread's accumulator of a 64-key × N-query tile; first_key: the key of its row0,
// first_query: the query of its first column (column_pair included). Masked scores become −inf.
template <int kAcc, WindowFields P>
__device__ __forceinline__ void mask_scores(float (&s)[kAcc], int first_key, int first_query,
                                            const Sequence& seq, const P& p) {
  constexpr int kUnbounded = 1 << 30;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = first_key + 8 * half;
    // This key is seen by the queries [begin, end), counted from first_query.
    int begin = -kUnbounded, end = kUnbounded;
    if (key >= seq.seqlen_k) {
      end = begin;
    } else {
      const int facing = key - seq.diagonal() - first_query;  // the query on the key's diagonal
      if (p.window_right >= 0) begin = window_first_query(p, facing);
      if (p.window_left >= 0) end = window_last_query(p, facing) + 1;
    }
#pragma unroll
    for (int i = 0; i < kAcc; ++i) {
      const int column = ptx::fragment_column(i, 0);
      if (ptx::fragment_row_half(i) == half && (column < begin || column >= end)) s[i] = -INFINITY;
    }
  }
}

}  // namespace hfa::sm90::bwd
