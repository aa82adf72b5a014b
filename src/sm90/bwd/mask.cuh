// Masking a transposed score tile (keys as rows, queries as columns) in registers: every query
// of a key past seqlen_k, and the queries outside each key's window. Query i sees key j iff
// j − diagonal − right <= i <= j − diagonal + left (common/window.cuh), so a key row's visible
// queries are one range; its lower end comes from the right window (causal: the diagonal).
#pragma once

#include <cmath>

#include "sm90/common/window.cuh"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::bwd {

// The query on the diagonal of `key` (i + seqlen_k − seqlen_q = key), as a column counted from
// first_query: the window's bounds and ALiBi's distances are counted from it.
__device__ __forceinline__ int diagonal_query_column(int key, int first_query,
                                                     const Sequence& seq) {
  return key - seq.diagonal() - first_query;
}

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
      const int facing = diagonal_query_column(key, first_query, seq);
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

// ALiBi's coordinates of the same fragment (score_mods.cuh): per row half (key), the column of
// the query on its diagonal.
__device__ __forceinline__ void fragment_diagonal(float (&diagonal_column)[2], int first_key,
                                                  int first_query, const Sequence& seq) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    diagonal_column[half] = float(diagonal_query_column(first_key + 8 * half, first_query, seq));
  }
}

}  // namespace hfa::sm90::bwd
