// Where a sequence's query rows and keys are, for the decode kernels and their combine: fixed
// length or varlen queries (cu_seqlens_q), the keys of the cache plus the appended tokens, and
// the numbering of query rows that out, lse and the split partials share. The sequence is the
// one every kernel family sees (common/sequence.cuh); only where its lengths come from is the
// cache's own.
#pragma once

#include <cstdint>

#include "sm90/common/sequence.cuh"
#include "sm90/decode/params.hpp"

namespace hfa::sm90::decode {

// The sequence every kernel family sees (common/sequence.cuh), with q_offset also as the 64-bit
// q_begin that every index into q and out starts from (widened once, where it is read).
struct DecodeSequence : Sequence {
  int64_t q_begin;
};

// q_offset: the token of row 0 in q and out (varlen), else 0. seqlen_k: the keys attended,
// cache_seqlens[b] plus its new tokens, clamped to the capacity. The cache has no k_offset: its
// pages are found through the block table.
__device__ __forceinline__ DecodeSequence decode_sequence(const Params& p, int b) {
  DecodeSequence s;
  s.k_offset = 0;
  s.map_batch = b;
  if (p.cu_seqlens_q != nullptr) {
    s.q_begin = p.cu_seqlens_q[b];
    s.seqlen_q = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
  } else {
    s.q_begin = 0;
    s.seqlen_q = p.seqlen_q;
  }
  s.q_offset = int(s.q_begin);
  const int64_t appended = p.cu_seqlens_k_new != nullptr
                               ? int64_t(p.cu_seqlens_k_new[b + 1]) - p.cu_seqlens_k_new[b]
                               : int64_t(p.seqlen_new);
  const int64_t keys = int64_t(p.cache_seqlens[b]) + appended;
  s.seqlen_k = int(keys < 0 ? 0 : (keys > p.capacity ? p.capacity : keys));
  return s;
}

// Row i of query head h of a sequence whose row 0 is token q_begin: its index in lse's order,
// (batch, heads_q, seqlen_q) or (heads_q, total_q), which the split partials share.
__device__ __forceinline__ int64_t query_row_id(const Params& p, int b, int h, int64_t token) {
  return int64_t(b) * p.row_id_batch_stride + int64_t(h) * p.row_id_head_stride + token;
}

// The element offset in out of row `row_id`'s first column (the inverse of query_row_id: varlen
// has no batch term, so b comes out 0 there).
__device__ __forceinline__ int64_t out_offset_of_row(const Params& p, int64_t row_id) {
  const int64_t per_batch = int64_t(p.heads_q) * p.row_id_head_stride;
  const int64_t b = row_id / per_batch;
  const int64_t in_batch = row_id - b * per_batch;
  const int64_t h = in_batch / p.row_id_head_stride;
  const int64_t token = in_batch - h * p.row_id_head_stride;
  return b * p.out_batch_stride + token * p.out_row_stride + h * p.out_head_stride;
}

}  // namespace hfa::sm90::decode
