// The bottom-right aligned window, and what follows from it for blocks of queries and keys:
// query i of a sequence sees key j iff j < seqlen_k and
//   (window_left  < 0 || j >= i + diagonal − window_left) and
//   (window_right < 0 || j <= i + diagonal + window_right),   diagonal = seqlen_k − seqlen_q.
// Causal is the window (−1, 0). The forward walks the key blocks a query block sees; the
// backward walks the query blocks that see a key block (the inverse range). Both ranges are
// exact — a block pair is in them iff it holds a visible (query, key) pair — so the one
// derives from the other pair by pair (the deterministic backward's turns count on it).
#pragma once

#include <concepts>

#include "common/score_policy.hpp"
#include "sm90/common/sequence.cuh"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90 {

template <typename P>
concept WindowFields = requires(const P& p) {
  { p.window_left } -> std::convertible_to<int>;  // −1: unbounded; clamped so that row ± window cannot overflow
  { p.window_right } -> std::convertible_to<int>;
};

// The window's two bounds for one query, unclamped, from the key on its diagonal (query +
// diagonal): the first key its left bound lets it see and the last its right bound does (each
// meaningful only when that bound is set, >= 0). The block ranges below, the element masks
// (fwd/mask.cuh, bwd/mask.cuh) and the decode's key ranges (decode/work.cuh) are these, rounded
// and clamped. The rule itself is the score policy's (src/common/score_policy.hpp), shared with
// the CPU backend.
template <WindowFields P>
__device__ __forceinline__ int window_first_key(const P& p, int diagonal_key) {
  return policy::window_first_key(p.window_left, diagonal_key);
}
template <WindowFields P>
__device__ __forceinline__ int window_last_key(const P& p, int diagonal_key) {
  return policy::window_last_key(p.window_right, diagonal_key);
}
// The inverse: the first and last query that see a key, from the query on its diagonal (key −
// diagonal).
template <WindowFields P>
__device__ __forceinline__ int window_first_query(const P& p, int diagonal_query) {
  return policy::window_first_query(p.window_right, diagonal_query);
}
template <WindowFields P>
__device__ __forceinline__ int window_last_query(const P& p, int diagonal_query) {
  return policy::window_last_query(p.window_left, diagonal_query);
}

// Blocks [begin, end) of a walk; empty when end <= begin. A walk's positions are its blocks
// (a block-sparse walk, common/block_sparse.cuh, maps positions to the mask's listed blocks).
struct BlockRange {
  int begin;
  int end;
  __device__ __forceinline__ int count() const { return end - begin; }
  __device__ __forceinline__ int key_block(int position) const { return position; }
};

// The blocks of kBlockN keys that queries [first_query, last_query] see. last_query must be a
// query of the sequence (< seqlen_q); first_query need not be clamped.
template <int kBlockN, bool kWindowed, WindowFields P>
__device__ __forceinline__ BlockRange key_blocks(const P& p, const Sequence& seq, int first_query,
                                                 int last_query) {
  const int n_blocks = (seq.seqlen_k + kBlockN - 1) / kBlockN;
  if constexpr (!kWindowed) {
    return {0, n_blocks};
  } else {
    int begin = 0, end = n_blocks;
    if (p.window_right >= 0) {
      const int last_key = window_last_key(p, last_query + seq.diagonal());
      end = last_key < 0 ? 0 : min(n_blocks, last_key / kBlockN + 1);
    }
    if (p.window_left >= 0) {
      const int first_key = window_first_key(p, first_query + seq.diagonal());
      begin = first_key <= 0 ? 0 : first_key / kBlockN;
    }
    return {begin, max(begin, end)};
  }
}

// The blocks of kBlockM queries that see any of keys [first_key, first_key + block_keys) (the
// inverse of key_blocks). Empty when the keys lie past the sequence's.
template <int kBlockM, bool kWindowed, WindowFields P>
__device__ __forceinline__ BlockRange query_blocks(const P& p, const Sequence& seq, int first_key,
                                                   int block_keys) {
  const int m_blocks = (seq.seqlen_q + kBlockM - 1) / kBlockM;
  if (first_key >= seq.seqlen_k) return {0, 0};
  if constexpr (!kWindowed) {
    return {0, m_blocks};
  } else {
    const int last_key = min(first_key + block_keys, seq.seqlen_k) - 1;
    int begin = 0, end = m_blocks;
    if (p.window_right >= 0) {
      const int first_query = window_first_query(p, first_key - seq.diagonal());
      begin = first_query <= 0 ? 0 : first_query / kBlockM;
    }
    if (p.window_left >= 0) {
      const int last_query = window_last_query(p, last_key - seq.diagonal());
      end = last_query < 0 ? 0 : min(m_blocks, last_query / kBlockM + 1);
    }
    return {begin, max(begin, end)};
  }
}

// Whether a block of keys [first_key, last_key] holds keys that some query of [first_query,
// last_query] must not see: keys past seqlen_k, or keys the window cuts off.
template <WindowFields P>
__device__ __forceinline__ bool block_needs_mask(const P& p, const Sequence& seq, int first_query,
                                                 int last_query, int first_key, int last_key) {
  bool needed = last_key >= seq.seqlen_k;
  // The first query has the lowest right bound, the last query the highest left bound.
  if (p.window_right >= 0) needed |= last_key > window_last_key(p, first_query + seq.diagonal());
  if (p.window_left >= 0) needed |= first_key < window_first_key(p, last_query + seq.diagonal());
  return needed;
}

// Sets the scores of one row half of an accumulator (see fragment.cuh) outside columns
// [column_begin, column_end) to −inf; the bounds are relative to the thread's first column.
// kBothSides = false skips the lower test (no left bound): masked blocks are most of the work
// of short causal sequences, and the second compare per score showed there.
template <bool kBothSides, int kAcc>
__device__ __forceinline__ void mask_row_half(float (&s)[kAcc], int half, int column_begin,
                                              int column_end) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) {
    // Compare the compile-time column offset of each register with per-thread limits.
    const int column = ptx::fragment_column(i, 0);
    if (ptx::fragment_row_half(i) == half &&
        (column >= column_end || (kBothSides && column < column_begin))) {
      s[i] = -INFINITY;
    }
  }
}

}  // namespace hfa::sm90
