// Masking a transposed score tile (keys as rows, queries as columns) in registers: every query
// of a key past seqlen_k, and the queries outside each key's window. Query i sees key j iff
// j − diagonal − right <= i <= j − diagonal + left (common/window.cuh), so a key row's visible
// queries are one range; its lower end comes from the right window (causal: the diagonal).
// Last, the same for a tile with queries as rows (mask_scores_by_query).
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

// The same for a score tile with queries as rows and keys as columns (the gradients-transposed
// tile's S, TileConfig::kTransposedGradients), the forward's form: query i sees keys [i +
// diagonal − left, i + diagonal + right], cut at seqlen_k. s: one thread's accumulator of a
// 64-query × N-key tile; first_query: the query of its row0; first_key: the key of its first
// column (column_pair included).
template <bool kWindowed, int kAcc, WindowFields P>
__device__ __forceinline__ void mask_scores_by_query(float (&s)[kAcc], int first_query,
                                                     int first_key, const Sequence& seq,
                                                     const P& p) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    int key_end = seq.seqlen_k;  // this row sees keys [key_begin, key_end)
    if constexpr (kWindowed) {
      const int facing = first_query + 8 * half + seq.diagonal();
      if (p.window_right >= 0) key_end = min(key_end, window_last_key(p, facing) + 1);
      if (p.window_left >= 0) {
        mask_row_half<true>(s, half, window_first_key(p, facing) - first_key, key_end - first_key);
        continue;
      }
    }
    mask_row_half<false>(s, half, 0, key_end - first_key);
  }
}

// ALiBi's coordinates of that fragment: per row half (query), the column of the key on its
// diagonal, counted from first_key.
__device__ __forceinline__ void fragment_diagonal_by_query(float (&diagonal_column)[2],
                                                           int first_query, int first_key,
                                                           const Sequence& seq) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    diagonal_column[half] = float(first_query + 8 * half + seq.diagonal() - first_key);
  }
}

}  // namespace hfa::sm90::bwd
