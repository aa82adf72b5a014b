// Where a sequence's query rows and keys are, for the decode kernel and its combine: fixed length
// or varlen queries (cu_seqlens_q), the keys of the cache plus the appended tokens, and the
// numbering of query rows that out, lse and the split partials share.
#pragma once

#include <cstdint>

#include "sm90/decode/params.hpp"

namespace hfa::sm90::decode {

struct DecodeSequence {
  int64_t q_begin;  // the token of row 0 in q / out (varlen), else 0
  int seqlen_q;     // query rows
  int seqlen_k;     // keys attended: cache_seqlens[b] + its new tokens, clamped to the capacity
};

__device__ __forceinline__ DecodeSequence decode_sequence(const Params& p, int b) {
  DecodeSequence s;
  if (p.cu_seqlens_q != nullptr) {
    s.q_begin = p.cu_seqlens_q[b];
    s.seqlen_q = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
  } else {
    s.q_begin = 0;
    s.seqlen_q = p.seqlen_q;
  }
  const int64_t appended = p.cu_seqlens_k_new != nullptr
                               ? int64_t(p.cu_seqlens_k_new[b + 1]) - p.cu_seqlens_k_new[b]
                               : int64_t(p.seqlen_new);
  const int64_t keys = int64_t(p.cache_seqlens[b]) + appended;
  s.seqlen_k = int(keys < 0 ? 0 : (keys > p.capacity ? p.capacity : keys));
  return s;
}

// What one CTA of (sequence, kv-head, row tile, split) attends: its query rows and its keys,
// bottom-right aligned: query i sees key j iff i + offset - window_left <= j <=
// i + offset + window_right and j < seqlen_k. Both decode kernels start from this.
struct TileKeys {
  int rows;                 // the sequence's query rows of one kv-head (group · seqlen_q)
  int offset;               // seqlen_k - seqlen_q
  int key_begin, key_end;   // the CTA's keys [key_begin, key_end)
  int first_tile, n_tiles;  // its stages of block_n keys
};

// With split_size, split s takes chunk s at fixed boundaries (whatever the batch), which need
// not fall on a stage: row_keys cuts the chunk's first and last stage. Else an even share of the
// stages.
template <int kBlockN>
__device__ __forceinline__ TileKeys tile_keys(const Params& p, const DecodeSequence& seq,
                                              int first_row, int rows_per_tile, int split) {
  TileKeys t;
  t.rows = p.group * seq.seqlen_q;
  t.offset = seq.seqlen_k - seq.seqlen_q;
  const int last_row = min(t.rows, first_row + rows_per_tile) - 1;
  t.key_begin = 0;
  t.key_end = seq.seqlen_k;
  if (p.window_left >= 0) t.key_begin = max(0, first_row / p.group + t.offset - p.window_left);
  if (p.window_right >= 0) t.key_end = min(t.key_end, last_row / p.group + t.offset + p.window_right + 1);
  if (p.split_size > 0) {
    const int64_t chunk_begin = int64_t(split) * p.split_size;
    t.key_begin = int(max(int64_t(t.key_begin), chunk_begin));
    t.key_end = int(min(int64_t(t.key_end), chunk_begin + p.split_size));
    t.first_tile = t.key_begin / kBlockN;
    t.n_tiles = t.key_end > t.key_begin ? (t.key_end + kBlockN - 1) / kBlockN - t.first_tile : 0;
  } else {
    const int tile_base = t.key_begin / kBlockN;
    const int tiles_total = t.key_end > t.key_begin ? (t.key_end + kBlockN - 1) / kBlockN - tile_base : 0;
    const int tiles_per_split = (tiles_total + p.num_splits - 1) / p.num_splits;
    t.first_tile = tile_base + split * tiles_per_split;
    t.n_tiles = min(max(tiles_total - split * tiles_per_split, 0), tiles_per_split);
  }
  return t;
}

// The keys [lo, hi] row r of the tile sees, clamped to the CTA's keys (a no-op for an even share,
// whose stages hold whole rows' ranges; the cut of a split_size chunk). hi = -1: no row.
struct RowKeys {
  int lo, hi;
};
__device__ __forceinline__ RowKeys row_keys(const Params& p, const DecodeSequence& seq,
                                            const TileKeys& t, int r) {
  const int i = r / p.group;
  RowKeys k;
  k.lo = max(t.key_begin, p.window_left >= 0 ? i + t.offset - p.window_left : 0);
  k.hi = r < t.rows ? min(t.key_end - 1, p.window_right >= 0 ? i + t.offset + p.window_right
                                                             : seq.seqlen_k - 1)
                    : -1;
  return k;
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
