// Where the sequence of a tile lives in the q, k, v and out tensors and how much of it is used:
// fixed length, varlen (cu_seqlens) and used lengths (seqused) seen the same way.
#pragma once

#include "sm90/fwd/params.hpp"

namespace hfa::sm90::fwd {

struct Sequence {
  int q_offset;  // row of the sequence's first query in q and out (varlen), else 0
  int k_offset;  // row of its first key in k and v
  int map_batch;  // batch coordinate in the TMA maps (varlen: 0, the packed tensor is one batch)
  int seqlen_q;   // rows used
  int seqlen_k;
  // Offset of the bottom-right aligned diagonal: query i faces key i + diagonal.
  __device__ __forceinline__ int diagonal() const { return seqlen_k - seqlen_q; }
};

// A tile row's query index within its sequence: with PackGQA, rows are (query, head) pairs,
// head fastest (see Params::pack_shift).
__device__ __forceinline__ int query_of_row(const Params& p, int row) { return row >> p.pack_shift; }

__device__ __forceinline__ Sequence sequence_of(const Params& p, int batch) {
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

}  // namespace hfa::sm90::fwd
