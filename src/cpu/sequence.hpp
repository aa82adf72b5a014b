// Where one (batch, head) of an attention problem lives, and which keys each query row sees:
// shared by the reference and the tiled kernels so that both read the problem the same way.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/problem.hpp"
#include "common/score_policy.hpp"

namespace hfa::cpu {

inline std::size_t element_size(DType dtype) {
  return dtype == DType::f32 ? 4 : dtype == DType::e4m3 ? 1 : 2;
}

// The extent of sequence b: its first token in the (varlen) tensors and its lengths.
struct Sequence {
  int64_t q_begin = 0;  // token index of row 0 (0 for fixed length)
  int64_t k_begin = 0;
  int64_t seqlen_q = 0;  // the rows and keys that take part (seqused_*, else all allocated)
  int64_t seqlen_k = 0;
  int64_t allocated_q = 0;  // rows the tensors hold for the sequence (>= seqlen_q)
  int64_t allocated_k = 0;
};

inline Sequence sequence_of(const detail::ForwardProblem& p, int64_t b) {
  Sequence s;
  if (p.is_varlen()) {
    s.q_begin = p.cu_seqlens_q[b];
    s.k_begin = p.cu_seqlens_k[b];
    s.allocated_q = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    s.allocated_k = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
  } else {
    s.allocated_q = p.seqlen_q;
    s.allocated_k = p.seqlen_k;
  }
  // The API checked 0 <= seqused <= allocated; the clamp keeps a direct backend caller in bounds.
  auto used = [](const int32_t* seqused, int64_t b, int64_t allocated) {
    return seqused ? std::clamp<int64_t>(seqused[b], 0, allocated) : allocated;
  };
  s.seqlen_q = used(p.seqused_q, b, s.allocated_q);
  s.seqlen_k = used(p.seqused_k, b, s.allocated_k);
  return s;
}

// The longest query and key sequences: for varlen, read from cu_seqlens rather than trusted from
// max_seqlen_*, so that every row gets written even when a caller's bound is too small.
inline int64_t longest_queries(const detail::ForwardProblem& p) {
  if (!p.is_varlen()) return p.seqlen_q;
  int64_t longest = 0;
  for (int64_t b = 0; b < p.batch; ++b) longest = std::max(longest, sequence_of(p, b).seqlen_q);
  return longest;
}

inline int64_t longest_keys(const detail::ForwardProblem& p) {
  if (!p.is_varlen()) return p.seqlen_k;
  int64_t longest = 0;
  for (int64_t b = 0; b < p.batch; ++b) longest = std::max(longest, sequence_of(p, b).seqlen_k);
  return longest;
}

// Row i of one (batch, head) of a strided tensor: element offset of row 0 plus i·row stride.
template <class Byte>
struct Rows {
  Byte* first = nullptr;
  int64_t row_bytes = 0;  // stride between rows, in bytes
  Byte* row(int64_t i) const { return first + i * row_bytes; }
};

template <class Pointer>
auto rows_of(Pointer data, DType dtype, const detail::Strides& s, int64_t b, int64_t token_begin,
             int64_t head) {
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Pointer>>, const std::byte,
                                  std::byte>;
  const int64_t size = static_cast<int64_t>(element_size(dtype));
  const int64_t offset = b * s.batch + token_begin * s.row + head * s.head;
  return Rows<Byte>{static_cast<Byte*>(data) + offset * size, s.row * size};
}

// The keys query row i sees, [first(i), last(i)] (empty when first > last), and the rows that
// see a key: the score policy's window rule (policy::WindowRule: bottom-right aligned, row i
// facing key i + seqlen_k − seqlen_q), its bounds clamped to the sequence.
struct KeyWindow {
  int64_t seqlen_q = 0;
  int64_t seqlen_k = 0;
  int left = -1;  // −1: unbounded; else policy::clamp_window's
  int right = -1;

  KeyWindow(int64_t queries, int64_t keys, int window_left, int window_right)
      : seqlen_q(queries),
        seqlen_k(keys),
        left(policy::clamp_window(window_left, reach())),
        right(policy::clamp_window(window_right, reach())) {}
  KeyWindow(const detail::ForwardProblem& p, const Sequence& s)
      : KeyWindow(s.seqlen_q, s.seqlen_k, p.window_left, p.window_right) {}

  int64_t first(int64_t i) const {
    return left < 0 ? 0 : std::max<int64_t>(0, policy::window_first_key(left, facing(i)));
  }
  int64_t last(int64_t i) const {
    return right < 0 ? seqlen_k - 1
                     : std::min<int64_t>(seqlen_k - 1, policy::window_last_key(right, facing(i)));
  }

  // The rows that see some key in [j_first, j_last], clamped to the sequence.
  int64_t first_row_seeing(int64_t j_first) const {
    return right < 0 ? 0 : std::max<int64_t>(0, policy::window_first_query(right, faced(j_first)));
  }
  int64_t last_row_seeing(int64_t j_last) const {
    return left < 0 ? seqlen_q - 1
                    : std::min<int64_t>(seqlen_q - 1, policy::window_last_query(left, faced(j_last)));
  }

  // Whether every row in [i_first, i_last] sees every key in [j_first, j_last] (first and last
  // never decrease with i, so the corners decide).
  bool all_visible(int64_t i_first, int64_t i_last, int64_t j_first, int64_t j_last) const {
    return first(i_last) <= j_first && last(i_first) >= j_last;
  }

 private:
  // Positions fit an int (the lengths are int32), and so do the bounds of clamped windows.
  int reach() const { return static_cast<int>(seqlen_q + seqlen_k); }
  int facing(int64_t i) const { return static_cast<int>(i + seqlen_k - seqlen_q); }  // key of row i
  int faced(int64_t j) const { return static_cast<int>(j - seqlen_k + seqlen_q); }   // row of key j
};

}  // namespace hfa::cpu
