// Where the sequence of a tile lives in the q, k, v (and out, dq, dk, dv) tensors and how much of
// it is used: fixed length, varlen (cu_seqlens) and used lengths (seqused) seen the same way.
// Every attention kernel family's Params has these fields under these names (SequenceFields).
#pragma once

#include <concepts>
#include <cstdint>

namespace hfa::sm90 {

template <typename P>
concept SequenceFields = requires(const P& p) {
  { p.seqlen_q } -> std::convertible_to<int>;  // varlen: the longest sequence's
  { p.seqlen_k } -> std::convertible_to<int>;
  { p.cu_seqlens_q } -> std::convertible_to<const int32_t*>;  // null: fixed length
  { p.cu_seqlens_k } -> std::convertible_to<const int32_t*>;
  { p.seqused_q } -> std::convertible_to<const int32_t*>;  // null: every row used
  { p.seqused_k } -> std::convertible_to<const int32_t*>;
};

struct Sequence {
  int q_offset;   // row of the sequence's first query in q and out (varlen), else 0
  int k_offset;   // row of its first key in k and v
  int map_batch;  // batch coordinate in the TMA maps (varlen: 0, the packed tensor is one batch)
  int seqlen_q;   // rows used
  int seqlen_k;
  // Offset of the bottom-right aligned diagonal: query i faces key i + diagonal.
  __device__ __forceinline__ int diagonal() const { return seqlen_k - seqlen_q; }
};

template <SequenceFields P>
__device__ __forceinline__ Sequence sequence_of(const P& p, int batch) {
  Sequence seq{0, 0, batch, p.seqlen_q, p.seqlen_k};
  if (p.cu_seqlens_q != nullptr) {
    seq.q_offset = p.cu_seqlens_q[batch];
    seq.k_offset = p.cu_seqlens_k[batch];
    seq.map_batch = 0;
    seq.seqlen_q = p.cu_seqlens_q[batch + 1] - seq.q_offset;
    seq.seqlen_k = p.cu_seqlens_k[batch + 1] - seq.k_offset;
  }
  if (p.seqused_q != nullptr) seq.seqlen_q = p.seqused_q[batch];
  if (p.seqused_k != nullptr) seq.seqlen_k = p.seqused_k[batch];
  return seq;
}

// The rows a sequence has in its tensors, used or not (seqused counts only the first ones):
// the rows a backward writes gradients for, zeros beyond the used ones.
template <SequenceFields P>
__device__ __forceinline__ int allocated_queries(const P& p, int batch) {
  return p.cu_seqlens_q != nullptr ? p.cu_seqlens_q[batch + 1] - p.cu_seqlens_q[batch] : p.seqlen_q;
}
template <SequenceFields P>
__device__ __forceinline__ int allocated_keys(const P& p, int batch) {
  return p.cu_seqlens_k != nullptr ? p.cu_seqlens_k[batch + 1] - p.cu_seqlens_k[batch] : p.seqlen_k;
}

}  // namespace hfa::sm90
