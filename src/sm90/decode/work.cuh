// The decode scheduler: what one CTA does. A piece of work is one sequence's query rows of one
// kv-head (the rows of a GQA group, group · seqlen_q of them, row r = query r / group of head
// r % group), the rows of one row tile, and a range of their keys. Two parts make the pieces:
//   the uniform plan (decode_work) — the grid is (split, kv-head × row tile, sequence), one
//     piece a CTA: split s of every sequence's keys, from the host's split plan (plan.cpp: how
//     many splits, and split_size for fixed chunks). Every decode kernel runs on it.
//   the balanced schedule (WorkWalk over split_schedule.hpp) — the grid is (kv-head × row tile,
//     part), a persistent CTA walks its part's range of (sequence, tile): whole sequences and
//     pieces of split ones, written on the device by the schedule kernel. MLA's kernels (either
//     cache) run on it unless the call fixes the splits (WorkWalk takes either part).
// Each piece becomes the CTA's stages of kBlockN keys; its rows' results go to out and lse, or
// to the piece's partial (PartialRows), which a combine kernel merges.
#pragma once

#include <cstdint>

#include "sm90/common/window.cuh"
#include "sm90/decode/params.hpp"
#include "sm90/decode/sequence.cuh"
#include "sm90/decode/split_schedule.hpp"

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
  // whose stages hold whole rows' ranges; the cut of a split_size chunk or of a scheduled piece).
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

// Row tile `tile` (kv-head · row_tiles + row tile: a grid index) of sequence `batch`, with every
// key its rows see; the split (its index among the sequence's pieces) and the keys' cut are the
// caller's.
template <int kRowsPerTile>
__device__ __forceinline__ DecodeWork row_tile_work(const Params& p, int split, int batch,
                                                    unsigned tile) {
  DecodeWork w;
  w.split = split;
  w.kv_head = tile / p.row_tiles;
  const int row_tile = tile % p.row_tiles;
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

// The uniform plan's piece. With split_size, split s takes chunk s at fixed boundaries (whatever
// the batch), which need not fall on a stage: row_keys cuts the chunk's first and last stage.
// Else an even share of the stages.
template <int kRowsPerTile, int kBlockN>
__device__ __forceinline__ DecodeWork decode_work(const Params& p) {
  DecodeWork w = row_tile_work<kRowsPerTile>(p, blockIdx.x, blockIdx.z, blockIdx.y);
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

// The stages a balanced schedule deals out for a sequence: those of the keys its rows see, all
// rows together (each row tile then cuts its piece to its own rows' keys).
template <int kBlockN>
__device__ __forceinline__ TileSpan scheduled_tiles(const Params& p, const DecodeSequence& seq) {
  const KeyRange keys = keys_of_rows(p, seq, 0, p.group * seq.seqlen_q - 1);
  return tiles_of_keys<kBlockN>(keys.begin, keys.end);
}

// The CTA's pieces of work in order, whichever part makes them: the one the uniform plan's grid
// gives it, or those of its part of the balanced schedule (p.part_starts set). Every thread of
// the CTA walks the same pieces.
template <int kRowsPerTile, int kBlockN>
class WorkWalk {
 public:
  __device__ __forceinline__ explicit WorkWalk(const Params& p) : p_(p) {
    if (p.part_starts == nullptr) {
      next_ = {int32_t(blockIdx.z), 0, 0};
      end_ = {int32_t(blockIdx.z) + 1, 0, 0};
    } else {
      next_ = p.part_starts[blockIdx.y];
      end_ = p.part_starts[blockIdx.y + 1];
    }
  }

  // The next piece with rows into *work; false when none is left.
  __device__ __forceinline__ bool next(DecodeWork* work) {
    while (schedule::reaches(end_, next_.sequence)) {
      const int32_t b = next_.sequence;
      if (p_.part_starts == nullptr) {
        *work = decode_work<kRowsPerTile, kBlockN>(p_);
      } else {
        *work = row_tile_work<kRowsPerTile>(p_, 0, b, blockIdx.x);
        const TileSpan tiles = scheduled_tiles<kBlockN>(p_, work->seq);
        const schedule::Piece piece =
            schedule::piece_of(next_, end_, b, schedule::units_of(tiles.count));
        cut_to_piece(work, tiles.first, piece);
      }
      next_ = {b + 1, 0, 0};
      if (work->has_rows()) return true;
    }
    return false;
  }

 private:
  // The piece's units are stages from the sequence's first: the row tile's keys within them
  // (in 64 bits: a last stage may reach past the int range of keys).
  __device__ __forceinline__ static void cut_to_piece(DecodeWork* w, int first_tile,
                                                      const schedule::Piece& piece) {
    w->split = piece.split;
    w->key_begin = max(w->key_begin, (first_tile + piece.first_unit) * kBlockN);
    w->key_end = int(min(int64_t(w->key_end), int64_t(first_tile + piece.end_unit) * kBlockN));
    const TileSpan tiles = tiles_of_keys<kBlockN>(w->key_begin, w->key_end);
    w->first_tile = tiles.first;
    w->n_tiles = tiles.count;
  }

  const Params& p_;
  schedule::PartStart next_, end_;
};

// Where a piece's rows go: out and lse when it holds all their keys (out null), else its
// partial. Row (h, i) of the sequence is partial row first_row + h · head_stride + i: its
// output at out + row · hdim, its LSE at lse[row · lse_stride].
struct PartialRows {
  float* out;
  float* lse;
  int64_t first_row, head_stride;
  int lse_stride;
};

// The uniform plan's: split s's partials (num_splits, rows_total, hdim) and LSEs (rows_total,
// num_splits) by row id (what store_row writes). The balanced schedule's: sequence b's slots
// (split_schedule.hpp), heads_q · seqlen_q rows each (h · seqlen_q + i), and their LSEs
// (slot row, piece) after the partials of the slots before.
template <int kHeadDim>
__device__ __forceinline__ PartialRows partial_rows(const Params& p, const DecodeWork& w) {
  PartialRows rows{};
  if (p.part_starts == nullptr) {
    if (p.num_splits == 1) return rows;
    rows.out = p.partial_out + int64_t(w.split) * p.rows_total * kHeadDim;
    rows.lse = p.partial_lse + w.split;
    rows.first_row = int64_t(w.batch) * p.row_id_batch_stride + w.seq.q_begin;
    rows.head_stride = p.row_id_head_stride;
    rows.lse_stride = p.num_splits;
    return rows;
  }
  const int32_t first_slot = p.first_slot[w.batch];
  const int32_t slots = p.first_slot[w.batch + 1] - first_slot;
  if (slots == 0) return rows;
  const int64_t slot_rows = int64_t(p.heads_q) * p.seqlen_q;
  rows.out = p.partial_out + (first_slot + w.split) * slot_rows * kHeadDim;
  rows.lse = p.partial_lse + first_slot * slot_rows + w.split;
  rows.first_row = 0;
  rows.head_stride = p.seqlen_q;
  rows.lse_stride = slots;
  return rows;
}

}  // namespace hfa::sm90::decode
