// The decode scheduler: what one CTA does. The grid is (split, kv-head × row tile, sequence): a
// CTA takes one sequence's query rows of one kv-head (the rows of a GQA group, group · seqlen_q
// of them, row r = query r / group of head r % group) and one split of their keys. The split plan
// (how many splits, and split_size for fixed chunks) is the host's (plan.cpp); here it becomes the
// CTA's stages of kBlockN keys. Every decode kernel starts from this, whatever its math.
#pragma once

#include <cstdint>

#include "sm90/common/window.cuh"
#include "sm90/decode/params.hpp"
#include "sm90/decode/sequence.cuh"

namespace hfa::sm90::decode {

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullWarp = 0xffffffffu;

// The keys one fragment row sees, [lo, hi], clamped to the CTA's keys. hi = -1: no row.
struct RowKeys {
  int lo, hi;
};

// A row's ALiBi: its head's slope in the scores' units, and the key on its diagonal, from which
// the bias counts (-slope · |diagonal_key - key|).
struct RowBias {
  policy::Alibi alibi;
  int diagonal_key;

  __device__ __forceinline__ float score(float s, int key) const {
    return alibi.score_at_offset(s, float(diagonal_key - key));
  }
};

// A thread's place: its warp and lane, and the lane's mma.sync fragment coordinates (row group g,
// column pair c). A consumer keeps its own copy for the loop.
struct LanePosition {
  int warp, lane, g, c;
};

// Query rows and keys are bottom-right aligned (common/window.cuh): query i sees key j iff the
// window lets it and j < seqlen_k.
struct DecodeWork {
  int split, kv_head, batch;
  // The thread: its warp and lane, and the lane's mma.sync fragment coordinates (row group g,
  // column pair c). Computed here, before the sequence, where the kernels always computed them:
  // their SASS follows the order.
  int warp, lane, g, c;
  DecodeSequence seq;
  int first_row;            // the CTA's first query row of its kv-head
  int rows;                 // the sequence's query rows of one kv-head (group · seqlen_q)
  int key_begin, key_end;   // the CTA's keys [key_begin, key_end)
  int first_tile, n_tiles;  // its stages of kBlockN keys

  __device__ __forceinline__ LanePosition lane_position() const { return {warp, lane, g, c}; }

  // A CTA past its sequence's rows (varlen: the grid covers the longest) has nothing to write,
  // not even a partial: the combine reads only the rows that exist.
  __device__ __forceinline__ bool has_rows() const { return first_row < rows; }

  // Row r's keys: the window's bounds for its query, cut to the CTA's (a no-op for an even share,
  // whose stages hold whole rows' ranges; the cut of a split_size chunk).
  __device__ __forceinline__ RowKeys row_keys(const Params& p, int r) const {
    const int i = r / p.group;
    RowKeys k;
    const int diagonal_key = i + seq.diagonal();
    k.lo = max(key_begin, p.window_left >= 0 ? window_first_key(p, diagonal_key) : 0);
    k.hi = r < rows ? min(key_end - 1, p.window_right >= 0 ? window_last_key(p, diagonal_key)
                                                           : seq.seqlen_k - 1)
                    : -1;
    return k;
  }

  // Row r's ALiBi (p.alibi's slopes set): the slope of its query head, r % group of the kv-head's.
  __device__ __forceinline__ RowBias row_bias(const Params& p, int r) const {
    return {p.alibi.of(batch, kv_head * p.group + r % p.group), r / p.group + seq.diagonal()};
  }
};

// Keys [begin, end): those some row of a range sees.
struct KeyRange {
  int begin, end;
};

// The keys rows first_row … last_row (of the sequence's, at least one) see: the window's bounds
// for their queries, within the sequence's keys.
__device__ __forceinline__ KeyRange keys_of_rows(const Params& p, const DecodeSequence& seq,
                                                 int first_row, int last_row) {
  const int diagonal = seq.diagonal();
  KeyRange keys{0, seq.seqlen_k};
  if (p.window_left >= 0)
    keys.begin = max(0, window_first_key(p, first_row / p.group + diagonal));
  if (p.window_right >= 0)
    keys.end = min(keys.end, window_last_key(p, last_row / p.group + diagonal) + 1);
  return keys;
}

// The stages of kBlockN keys that hold keys [begin, end): the first and how many.
struct TileSpan {
  int first, count;
};

template <int kBlockN>
__device__ __forceinline__ TileSpan tiles_of_keys(int begin, int end) {
  const int first = begin / kBlockN;
  return {first, end > begin ? (end + kBlockN - 1) / kBlockN - first : 0};
}

// The CTA's row tile (blockIdx.y) of sequence `batch`, with every key its rows see; the split
// and the keys' cut are the caller's.
template <int kRowsPerTile>
__device__ __forceinline__ DecodeWork row_tile_work(const Params& p, int split, int batch) {
  DecodeWork w;
  w.split = split;
  w.kv_head = blockIdx.y / p.row_tiles;
  const int row_tile = blockIdx.y % p.row_tiles;
  w.batch = batch;
  w.warp = int(threadIdx.x) / kWarpSize;
  w.lane = int(threadIdx.x) % kWarpSize;
  w.g = w.lane / 4;
  w.c = w.lane % 4;
  w.seq = decode_sequence(p, w.batch);
  w.first_row = row_tile * kRowsPerTile;
  w.rows = p.group * w.seq.seqlen_q;
  const int last_row = min(w.rows, w.first_row + kRowsPerTile) - 1;
  const KeyRange keys = keys_of_rows(p, w.seq, w.first_row, last_row);
  w.key_begin = keys.begin;
  w.key_end = keys.end;
  return w;
}

// With split_size, split s takes chunk s at fixed boundaries (whatever the batch), which need
// not fall on a stage: row_keys cuts the chunk's first and last stage. Else an even share of the
// stages.
template <int kRowsPerTile, int kBlockN>
__device__ __forceinline__ DecodeWork decode_work(const Params& p) {
  DecodeWork w = row_tile_work<kRowsPerTile>(p, blockIdx.x, blockIdx.z);
  if (p.split_size > 0) {
    const int64_t chunk_begin = int64_t(w.split) * p.split_size;
    w.key_begin = int(max(int64_t(w.key_begin), chunk_begin));
    w.key_end = int(min(int64_t(w.key_end), chunk_begin + p.split_size));
    const TileSpan tiles = tiles_of_keys<kBlockN>(w.key_begin, w.key_end);
    w.first_tile = tiles.first;
    w.n_tiles = tiles.count;
  } else {
    const TileSpan all = tiles_of_keys<kBlockN>(w.key_begin, w.key_end);
    const int tiles_per_split = (all.count + p.num_splits - 1) / p.num_splits;
    w.first_tile = all.first + w.split * tiles_per_split;
    w.n_tiles = min(max(all.count - w.split * tiles_per_split, 0), tiles_per_split);
  }
  return w;
}

}  // namespace hfa::sm90::decode
