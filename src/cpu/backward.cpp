// Tiled backward (FlashAttention-2's loop order), recomputing P from the forward's LSE:
//   D = rowsum(dO∘O),  dS = P∘(dP − D)  (times 1 − tanh² under a softcap),
//   dV = Pᵀ·dO,  dK = scale·dSᵀ·Q,  dQ = scale·dS·K.
// Three parallel passes:
//   1. rows     (batch, head, query tile): D and the LSE as an exp2 shift, once per row, and
//               the dQ slices that the tile's key ranges add into zeroed.
//   2. keys     (batch, kv head, key range): for each key tile of the range Kᵀ, Vᵀ and K are
//               packed once; every query tile of every query head of the GQA group that sees
//               the keys then takes five products with them: S = Q·Kᵀ and dP = dO·Vᵀ, then
//               dV += Pᵀ·dO and dK += dSᵀ·Q into the key tile's accumulators and dQ += dS·K
//               into the range's fp32 slice of dQ. S and P are computed once per block, as the
//               backward's FLOP count (2.5 forwards) assumes.
//   3. dQ       (batch, head, query tile): the row's slices summed in range order, scaled and
//               stored.
// Every output element has one writer and a fixed order of additions: no atomics, and the
// same result from run to run. A head's keys are split into several ranges (several slices)
// only when there are too few (batch, kv head) pairs to keep the threads busy and the keys
// are long enough; dQ's rounding then depends on the thread count, dK's and dV's never do.
// Memory: one allocation a call, three floats a query row and an fp32 copy of dQ a range.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/tiled_attention.hpp"
#include "cpu/tiled_common.hpp"

namespace hfa::cpu {
namespace {

using detail::BackwardProblem;
using detail::ForwardProblem;

constexpr int kRows = kBackwardQueryRows;
constexpr int kKeys = kBackwardKeys;

// Work items of the key pass per thread, at least, when a head's keys must be split to make
// them: a few per thread let the pool even out ranges that take unequal time.
constexpr int64_t kKeyItemsPerThread = 4;
// Key tiles a range spans, at least: its dQ slice is zeroed and summed over all the rows it
// reaches, about 1 % of its products at 4 tiles (512 keys); at 1024 tokens, 2 heads and 2
// threads 4 ranges of 2 tiles ran the backward at 76-96 % of the GEMM rate, 1 range at 97-106 %.
constexpr int64_t kMinKeyTilesPerRange = 4;
// The most the dQ slices of all ranges may take beyond the first (fp32 copies of dQ).
constexpr double kExtraSliceBytes = 1 << 30;

// The forward's inputs of one (batch, query head), and its out and dout.
struct HeadRows : HeadInputs {
  InputRows out, dout;

  HeadRows(const BackwardProblem& bp, int64_t b, int64_t h, const Sequence& seq)
      : HeadInputs(bp.fwd, b, h, seq) {
    const ForwardProblem& p = bp.fwd;
    out = rows_of(static_cast<const void*>(p.out), p.out_dtype, p.out_stride, b, seq.q_begin, h);
    dout = rows_of(bp.dout, p.dtype, bp.dout_stride, b, seq.q_begin, h);
  }
};

// Row 0 of sequence b among every sequence's query rows end to end (b·seqlen_q, or the varlen
// token cu_seqlens_q[b]); b = batch gives the number of rows.
int64_t query_token_begin(const ForwardProblem& p, int64_t b) {
  return p.is_varlen() ? int64_t{p.cu_seqlens_q[b]} : b * p.seqlen_q;
}

// What the passes hand each other, for every query row of the problem: D and the exp2 shift
// (pass 1 writes them, every block of the row reads them) and the row's dQ slices, one fp32
// row per key range (pass 2 adds into them, pass 3 sums them). Row i of (b, h) has index
// h·tokens + token_begin(b) + i, tokens being all sequences' rows end to end.
class RowState {
 public:
  RowState(const ForwardProblem& p, int key_ranges)
      : p_(p),
        tokens_(query_token_begin(p, p.batch)),
        rows_(tokens_ * p.heads_q),
        dqk_(p.hdim_qk),
        key_ranges_(key_ranges) {
    const std::size_t per_row = scratch_floats(static_cast<std::size_t>(rows_));
    const std::size_t slice = static_cast<std::size_t>(rows_) * dqk_;
    const std::size_t floats = 3 * per_row + scratch_floats(slice * key_ranges_);
    bytes_ = std::max<std::size_t>(floats, 16) * sizeof(float);
    storage_.reset(static_cast<float*>(std::aligned_alloc(64, bytes_)));
    if (!storage_) return;
    d_ = storage_.get();
    shift_high_ = d_ + per_row;
    shift_low_ = shift_high_ + per_row;
    dq_ = shift_low_ + per_row;
  }

  // False when the memory could not be had (nothing else may then be called).
  bool allocated() const { return storage_ != nullptr; }
  std::size_t bytes() const { return bytes_; }
  int key_ranges() const { return key_ranges_; }
  // Index of row 0 of (b, h).
  int64_t first_row(int64_t b, int64_t h) const {
    return h * tokens_ + query_token_begin(p_, b);
  }
  float* d(int64_t row) const { return d_ + row; }
  float* shift_high(int64_t row) const { return shift_high_ + row; }
  float* shift_low(int64_t row) const { return shift_low_ + row; }
  // The dQ slice of key range `range`, at row `row` (rows of hdim_qk floats).
  float* dq(int range, int64_t row) const { return dq_ + (range * rows_ + row) * dqk_; }

 private:
  struct Free {
    void operator()(float* block) const { std::free(block); }
  };
  const ForwardProblem& p_;
  int64_t tokens_, rows_;
  int64_t dqk_;
  int key_ranges_;
  std::size_t bytes_;
  std::unique_ptr<float, Free> storage_;
  float *d_ = nullptr, *shift_high_ = nullptr, *shift_low_ = nullptr, *dq_ = nullptr;
};

// D = rowsum(dO∘O) of row i: given, or computed through the two staging rows.
float row_d(const BackwardProblem& bp, const Kernels& kernels, const HeadRows& head,
            const float* given, int64_t i, float* staging_o, float* staging_do) {
  const ForwardProblem& p = bp.fwd;
  if (given != nullptr) return given[i];
  kernels.load(p.out_dtype, head.out.row(i), p.hdim_v, 1.0f, staging_o);
  kernels.load(p.dtype, head.dout.row(i), p.hdim_v, 1.0f, staging_do);
  return kernels.dot(staging_o, staging_do, p.hdim_v);
}

// The given D (BackwardProblem::softmax_d) of row 0 of (b, h), or null: computed.
const float* given_d(const BackwardProblem& bp, int64_t b, int64_t h, const Sequence& seq) {
  return bp.softmax_d == nullptr ? nullptr
                                 : bp.softmax_d + b * bp.softmax_d_batch_stride +
                                       h * bp.softmax_d_head_stride + seq.q_begin;
}

const float* lse_of(const ForwardProblem& p, int64_t b, int64_t h, const Sequence& seq) {
  return p.lse + b * p.lse_batch_stride + h * p.lse_head_stride + seq.q_begin;
}

// ---- key ranges ----------------------------------------------------------------------------

// How one sequence's key tiles are split into `ranges` ranges: consecutive runs of about equal
// work, the work of a tile being the query rows that see it, so that under a causal mask (the
// first keys seen by every row, the last by few) the ranges take equal time. Range s starts at
// the first tile with (work before it)·ranges >= total·s.
class KeyRanges {
 public:
  KeyRanges(const KeyWindow& window, int64_t seqlen_k, int ranges) : window_(window), starts_(ranges + 1) {
    const int64_t key_tiles = (seqlen_k + kKeys - 1) / kKeys;
    std::vector<double> before(key_tiles + 1, 0.0);  // work of the tiles before each tile
    for (int64_t tile = 0; tile < key_tiles; ++tile) {
      const TileRows rows = rows_seeing(tile, tile + 1);
      before[tile + 1] = before[tile] + static_cast<double>(rows.end - rows.first);
    }
    int64_t tile = 0;
    for (int s = 0; s < ranges; ++s) {
      while (tile < key_tiles && before[tile] * ranges < before[key_tiles] * s) ++tile;
      starts_[s] = tile;
    }
    starts_[ranges] = key_tiles;
  }

  int64_t first_tile(int range) const { return starts_[range]; }
  int64_t end_tile(int range) const { return starts_[range + 1]; }
  // Whether range `range` adds into the dQ slice rows of some row in [i_first, i_last].
  bool adds_to(int range, int64_t i_first, int64_t i_last) const {
    const TileRows rows = rows_seeing(first_tile(range), end_tile(range));
    return rows.first <= i_last && rows.end > i_first;
  }

 private:
  struct TileRows {
    int64_t first, end;
  };
  // The query rows that see some key of tiles [first, end) (first >= end: none).
  TileRows rows_seeing(int64_t first, int64_t end) const {
    if (first >= end) return {0, 0};
    const int64_t j_last = std::min(window_.seqlen_k, end * kKeys) - 1;
    const int64_t row_first = window_.first_row_seeing(first * kKeys);
    return {row_first, std::max(row_first, window_.last_row_seeing(j_last) + 1)};
  }

  KeyWindow window_;
  std::vector<int64_t> starts_;
};

// ---- pass 1: row statistics ---------------------------------------------------------------

void prepare_rows(const BackwardProblem& bp, const Kernels& kernels, const RowState& state,
                  int64_t b, int64_t h, int64_t i_first, const Sequence& seq, float* staging) {
  const ForwardProblem& p = bp.fwd;
  const int rows = static_cast<int>(std::min<int64_t>(kRows, seq.seqlen_q - i_first));
  const HeadRows head(bp, b, h, seq);
  const float* given = given_d(bp, b, h, seq);
  const float* lse = lse_of(p, b, h, seq);
  const int64_t first = state.first_row(b, h) + i_first;
  const std::size_t widest = static_cast<std::size_t>(std::max(p.hdim_qk, p.hdim_v));
  for (int r = 0; r < rows; ++r) {
    *state.d(first + r) = row_d(bp, kernels, head, given, i_first + r, staging, staging + widest);
    const Exp2Shift shift = lse_to_exp2_shift(lse[i_first + r]);
    *state.shift_high(first + r) = shift.high;
    *state.shift_low(first + r) = shift.low;
  }
  // Only the slices that pass 2 adds into: a causal range of late keys leaves the first rows.
  const KeyRanges ranges(KeyWindow(p, seq), seq.seqlen_k, state.key_ranges());
  for (int range = 0; range < state.key_ranges(); ++range) {
    if (!ranges.adds_to(range, i_first, i_first + rows - 1)) continue;
    std::fill_n(state.dq(range, first), static_cast<int64_t>(rows) * p.hdim_qk, 0.0f);
  }
}

// ---- pass 2: key ranges ------------------------------------------------------------------

struct KeyTiles {
  ScratchCarver carver;
  float *k_t, *v_t;   // hdim × kKeys: Kᵀ and Vᵀ
  float* k;           // kKeys × hdim_qk, when K needs converting
  float *q, *dout;    // kRows × hdim: Q scaled into the exp2 domain; dO when converted
  float *p, *ds;      // kRows × kKeys: S, then P; dP, then dS
  float* tanh;        // kRows × kKeys: the softcap's tanh of the scores
  float *dk, *dv;     // kKeys × hdim accumulators
  float* staging;     // one row of max(hdim_qk, hdim_v)

  explicit KeyTiles(const ForwardProblem& fp, float* block = nullptr) : carver(block) {
    const std::size_t dqk = fp.hdim_qk, dv_ = fp.hdim_v, tile = std::size_t{kRows} * kKeys;
    k_t = carver.take(dqk * kKeys);
    v_t = carver.take(dv_ * kKeys);
    k = carver.take(kKeys * dqk);
    q = carver.take(kRows * dqk);
    dout = carver.take(kRows * dv_);
    p = carver.take(tile);
    ds = carver.take(tile);
    tanh = carver.take(tile);
    dk = carver.take(kKeys * dqk);
    dv = carver.take(kKeys * dv_);
    staging = carver.take(std::max(dqk, dv_));
  }
};

// The key tile a block runs against: its first key, its length, and K row-major (in place or
// converted) for dQ += dS·K. Kᵀ and Vᵀ, the right operands of S and dP, are in KeyTiles.
struct PackedKeys {
  int64_t j_first;
  int keys;
  FloatBlock k;
};

// The block-sparse mask of one (sequence, query head) indexed the other way round: the
// backward walks key tiles, the forward's lists run per query block. The table covers the mask
// blocks the sequence's rows and keys overlap (with cu_seqlens the packed tokens' blocks, which
// need not start at the sequence's first row or key); entry(m, kb) of those is kNone, kFull or
// the slot of the key block among the query block's partial blocks: the transposed lists,
// derived on the CPU from the forward's (FlexAttention keeps them precomputed for its GPU
// backward). A listed block past the sequence's keys (seqused_k, another packed sequence) holds
// none of its pairs and is left out.
struct SparseTable {
  static constexpr int32_t kNone = -1, kFull = -2;
  const detail::BlockSparse* sparse = nullptr;  // null: not block-sparse
  detail::BlockSparse::Origin origin{};
  int64_t h = 0;
  int64_t first_m = 0, first_kb = 0;    // the mask blocks of the sequence's row 0 and key 0
  int64_t q_blocks = 0, kv_blocks = 0;  // the mask blocks its rows and keys overlap
  std::vector<int32_t> entries;

  SparseTable(const ForwardProblem& p, int64_t b, int64_t head, const Sequence& seq) : h(head) {
    if (!p.block_sparse) return;
    sparse = &p.block_sparse;
    origin = sparse->origin(b, seq.q_begin, seq.k_begin);
    first_m = origin.row / sparse->block_q;
    first_kb = origin.key / sparse->block_kv;
    q_blocks = seq.seqlen_q == 0 ? 0 : row_block(seq.seqlen_q - 1) - first_m + 1;
    kv_blocks = seq.seqlen_k == 0 ? 0 : key_block(seq.seqlen_k - 1) - first_kb + 1;
    entries.assign(static_cast<std::size_t>(q_blocks * kv_blocks), kNone);
    for (int64_t m = 0; m < q_blocks; ++m) {
      int32_t* row = entries.data() + m * kv_blocks;
      auto mark = [&](int32_t index, int32_t entry) {
        const int64_t kb = index - first_kb;
        if (kb >= 0 && kb < kv_blocks) row[kb] = entry;
      };
      const int64_t mask_m = first_m + m;
      if (sparse->full_kv_num_blocks) {
        for (int32_t s = 0; s < *sparse->full_kv_num_blocks.at(origin.batch, h, mask_m); ++s)
          mark(*sparse->full_kv_indices.at(origin.batch, h, mask_m, s), kFull);
      }
      for (int32_t s = 0; s < *sparse->kv_num_blocks.at(origin.batch, h, mask_m); ++s)
        mark(*sparse->kv_indices.at(origin.batch, h, mask_m, s), s);
    }
  }
  explicit operator bool() const { return sparse != nullptr; }
  // The mask blocks of the sequence's row i and key j.
  int64_t row_block(int64_t i) const { return (origin.row + i) / sparse->block_q; }
  int64_t key_block(int64_t j) const { return (origin.key + j) / sparse->block_kv; }
  int32_t entry(int64_t m, int64_t kb) const {
    return entries[(m - first_m) * kv_blocks + kb - first_kb];
  }

  // Over rows [i_first, i_last] × keys [j_first, j_last]: whether some block is visited, and
  // whether every one is full (no mask work).
  void survey(int64_t i_first, int64_t i_last, int64_t j_first, int64_t j_last, bool* some,
              bool* all_full) const {
    *some = false, *all_full = true;
    for (int64_t m = row_block(i_first); m <= row_block(i_last); ++m)
      for (int64_t kb = key_block(j_first); kb <= key_block(j_last); ++kb) {
        const int32_t e = entry(m, kb);
        *some = *some || e != kNone;
        *all_full = *all_full && e == kFull;
      }
  }

  // Scores of row i, keys [j_first, j_first + n): −inf where the mask hides the pair.
  void mask_row(float* x, int n, int64_t i, int64_t j_first) const {
    const int64_t m = row_block(i), r = origin.row + i - m * sparse->block_q;
    for (int c = 0; c < n; ++c) {
      const int64_t kb = key_block(j_first + c);
      const int32_t e = entry(m, kb);
      if (e == kFull) continue;
      const int64_t column = origin.key + j_first + c - kb * sparse->block_kv;
      if (e == kNone ||
          !detail::BlockSparse::bit(
              sparse->bits(origin.batch, h, m, e) + r * sparse->words_per_row, column))
        x[c] = -kInfinity;
    }
  }
};

// One block: query rows [i_first, i_first + rows) of one head against the packed key tile.
void backward_block(const BackwardProblem& bp, const Kernels& kernels,
                    const ScoreTransform& transform, const TileMods& mods,
                    const KeyWindow& window, const SparseTable& sparse,
                    const RowState& state, int range, const HeadRows& head, int64_t head_row,
                    int64_t i_first, int rows, const PackedKeys& keys, KeyTiles& t) {
  const ForwardProblem& p = bp.fwd;
  const int dqk = p.hdim_qk, dv = p.hdim_v;
  // Keys past the last row's window take no part: on a causal diagonal, the first query tile
  // of a 128-key tile sees only its first 64 keys.
  const int64_t i_last = i_first + rows - 1;
  const int n = static_cast<int>(std::min<int64_t>(keys.keys, window.last(i_last) + 1 - keys.j_first));
  // Block-sparse: a tile over no visited block is skipped (its P and dS are 0), one over full
  // blocks only takes no mask work.
  bool sparse_masked = false;
  if (sparse) {
    bool some = false, all_full = false;
    sparse.survey(i_first, i_last, keys.j_first, keys.j_first + n - 1, &some, &all_full);
    if (!some) return;
    sparse_masked = !all_full;
  }
  const int64_t row = head_row + i_first;
  const float* d = state.d(row);
  const float* shift_high = state.shift_high(row);
  const float* shift_low = state.shift_low(row);

  // Q scaled exactly as the forward scales it, so that the scores (and hence P against the
  // forward's LSE) come out bit for bit the same.
  for (int r = 0; r < rows; ++r) {
    kernels.load(p.dtype, head.q.row(i_first + r), dqk, transform.qk_factor, t.q + r * dqk);
  }
  const FloatBlock dout = load_block(kernels, p.dtype, head.dout, i_first, rows, dv, t.dout);

  kernels.gemm(rows, n, dqk, t.q, dqk, t.k_t, kKeys, t.p, kKeys, false);                  // S
  kernels.gemm(rows, n, dv, dout.data, dout.ld, t.v_t, kKeys, t.ds, kKeys, false);        // dP
  const bool masked = !window.all_visible(i_first, i_last, keys.j_first, keys.j_first + n - 1);
  if (masked || sparse_masked || mods.on()) {
    for (int r = 0; r < rows; ++r) {
      float* p_row = t.p + r * kKeys;
      const int64_t i = i_first + r;
      if (mods.on()) mods.row(p_row, t.tanh + r * kKeys, n, i, keys.j_first);
      if (masked)
        mask_outside(p_row, n, window.first(i) - keys.j_first, window.last(i) - keys.j_first);
      if (sparse_masked) sparse.mask_row(p_row, n, i, keys.j_first);
    }
  }
  kernels.softmax_grad_rows(t.p, t.ds, transform.softcapped() ? t.tanh : nullptr, rows, n, kKeys,
                            shift_high, shift_low, d);
  kernels.gemm_at(n, dv, rows, t.p, kKeys, dout.data, dout.ld, t.dv, dv, true);           // dV
  kernels.gemm_at(n, dqk, rows, t.ds, kKeys, t.q, dqk, t.dk, dqk, true);                 // dK
  kernels.gemm(rows, dqk, n, t.ds, kKeys, keys.k.data, keys.k.ld, state.dq(range, row), dqk, true);  // dQ
}

void backward_key_range(const BackwardProblem& bp, const Kernels& kernels, const RowState& state,
                        int64_t b, int64_t h_kv, int range, const Sequence& seq, KeyTiles& t) {
  const ForwardProblem& p = bp.fwd;
  const ScoreTransform transform(p);
  const KeyWindow window(p, seq);
  const int dqk = p.hdim_qk, dv = p.hdim_v;
  const int64_t group = p.heads_q / p.heads_kv;
  const KeyRanges ranges(window, seq.seqlen_k, state.key_ranges());
  const HeadRows kv_head(bp, b, h_kv * group, seq);
  const int64_t size = static_cast<int64_t>(element_size(p.dtype));
  // dK = scale·dSᵀ·Q, and the Q of the products carried qk_factor. A zero scale (valid) makes
  // that Q and dK zero: the factor is then 0, not 0 / 0.
  const float dk_factor = transform.qk_factor != 0.0f ? p.softmax_scale / transform.qk_factor : 0.0f;
  const Rows<std::byte> dk_rows = rows_of(bp.dk, p.dtype, bp.dk_stride, b, seq.k_begin, h_kv);
  const Rows<std::byte> dv_rows = rows_of(bp.dv, p.dtype, bp.dv_stride, b, seq.k_begin, h_kv);
  std::vector<SparseTable> sparse;  // one per query head of the group
  for (int64_t h = h_kv * group; h < (h_kv + 1) * group; ++h) sparse.emplace_back(p, b, h, seq);

  for (int64_t tile = ranges.first_tile(range); tile < ranges.end_tile(range); ++tile) {
    const int64_t j_first = tile * kKeys;
    const int keys = static_cast<int>(std::min<int64_t>(kKeys, seq.seqlen_k - j_first));
    const int64_t j_last = j_first + keys - 1;
    load_transposed(kernels, p.dtype, kv_head.k, j_first, keys, dqk, 1.0f, t.staging, t.k_t, kKeys);
    load_transposed(kernels, p.dtype, kv_head.v, j_first, keys, dv, 1.0f, t.staging, t.v_t, kKeys);
    const PackedKeys packed{j_first, keys, load_block(kernels, p.dtype, kv_head.k, j_first, keys, dqk, t.k)};
    std::fill(t.dk, t.dk + static_cast<int64_t>(keys) * dqk, 0.0f);
    std::fill(t.dv, t.dv + static_cast<int64_t>(keys) * dv, 0.0f);

    // Only the rows that see some key of the tile: blocks wholly masked are skipped.
    const int64_t row_first = window.first_row_seeing(j_first);
    const int64_t row_end = window.last_row_seeing(j_last) + 1;
    for (int64_t h = h_kv * group; h < (h_kv + 1) * group; ++h) {
      const HeadRows head(bp, b, h, seq);
      const TileMods mods(p, kernels, transform, b, h, seq);
      const int64_t head_row = state.first_row(b, h);
      for (int64_t i_first = row_first; i_first < row_end; i_first += kRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kRows, row_end - i_first));
        prefetch_tile(head.q, i_first + kRows, row_end, kRows, dqk * size);
        prefetch_tile(head.dout, i_first + kRows, row_end, kRows, dv * size);
        backward_block(bp, kernels, transform, mods, window, sparse[h - h_kv * group], state,
                       range, head, head_row, i_first, rows, packed, t);
      }
    }

    for (int r = 0; r < keys; ++r) {
      float* dk_row = t.dk + static_cast<int64_t>(r) * dqk;
      kernels.scale(dk_row, dqk, dk_factor);
      kernels.store(p.dtype, dk_row, dqk, dk_rows.row(j_first + r));
      kernels.store(p.dtype, t.dv + static_cast<int64_t>(r) * dv, dv, dv_rows.row(j_first + r));
    }
  }
}

// How many ranges each head's keys are split into: 1 when the (batch, kv head) pairs already
// give every thread kKeyItemsPerThread items, else enough ranges for that, as long as each
// spans kMinKeyTilesPerRange key tiles and the extra dQ slices fit in kExtraSliceBytes.
int key_ranges_per_head(const ForwardProblem& p, int threads) {
  const int64_t heads = int64_t{p.batch} * p.heads_kv;
  const int64_t wanted = (kKeyItemsPerThread * threads + heads - 1) / std::max<int64_t>(heads, 1);
  const int64_t key_tiles = (longest_keys(p) + kKeys - 1) / kKeys;
  const int64_t long_enough = key_tiles / kMinKeyTilesPerRange;
  const double slice_bytes = 4.0 * p.hdim_qk * p.heads_q * static_cast<double>(query_token_begin(p, p.batch));
  const int64_t fitting = 1 + static_cast<int64_t>(kExtraSliceBytes / std::max(slice_bytes, 1.0));
  return static_cast<int>(std::max<int64_t>(1, std::min({wanted, long_enough, fitting})));
}

// ---- pass 3: dQ ----------------------------------------------------------------------------

// sum: scratch of kRows × hdim_qk floats.
void store_dq(const BackwardProblem& bp, const Kernels& kernels, const RowState& state, int64_t b,
              int64_t h, int64_t i_first, const Sequence& seq, float* sum) {
  const ForwardProblem& p = bp.fwd;
  const int dqk = p.hdim_qk;
  const int rows = static_cast<int>(std::min<int64_t>(kRows, seq.seqlen_q - i_first));
  const int64_t first = state.first_row(b, h) + i_first;
  const int64_t count = static_cast<int64_t>(rows) * dqk;
  // The slices pass 1 zeroed, in range order: rows that no range reaches get dQ = 0.
  std::fill_n(sum, count, 0.0f);
  const KeyRanges ranges(KeyWindow(p, seq), seq.seqlen_k, state.key_ranges());
  for (int range = 0; range < state.key_ranges(); ++range) {
    if (!ranges.adds_to(range, i_first, i_first + rows - 1)) continue;
    const float* slice = state.dq(range, first);
    for (int64_t c = 0; c < count; ++c) sum[c] += slice[c];
  }
  const Rows<std::byte> dq_rows = rows_of(bp.dq, p.dtype, bp.dq_stride, b, seq.q_begin, h);
  for (int r = 0; r < rows; ++r) {
    float* row = sum + static_cast<int64_t>(r) * dqk;
    kernels.scale(row, dqk, p.softmax_scale);
    kernels.store(p.dtype, row, dqk, dq_rows.row(i_first + r));
  }
}

// ---- rows beyond seqused, and the sinks' gradient -----------------------------------------

// Rows [first, end) of one (batch, head) of a gradient tensor set to 0 (all-zero bits are 0 in
// f32, f16 and bf16; the last dim has unit stride).
void zero_rows(void* data, DType dtype, const detail::Strides& strides, int64_t b,
               int64_t token_begin, int64_t head, int64_t first, int64_t end, int cols) {
  const Rows<std::byte> rows = rows_of(data, dtype, strides, b, token_begin, head);
  for (int64_t i = first; i < end; ++i) {
    std::fill_n(rows.row(i), cols * element_size(dtype), std::byte{0});
  }
}

// A query row beyond seqused_q or a key beyond seqused_k takes no part in the attention: its
// gradient is 0, written so that callers who allocate the gradients uninitialised get it.
void zero_unused_rows(const BackwardProblem& bp, int64_t b) {
  const ForwardProblem& p = bp.fwd;
  const Sequence seq = sequence_of(p, b);
  for (int64_t h = 0; h < p.heads_q; ++h) {
    zero_rows(bp.dq, p.dtype, bp.dq_stride, b, seq.q_begin, h, seq.seqlen_q, seq.allocated_q, p.hdim_qk);
  }
  for (int64_t h = 0; h < p.heads_kv; ++h) {
    zero_rows(bp.dk, p.dtype, bp.dk_stride, b, seq.k_begin, h, seq.seqlen_k, seq.allocated_k, p.hdim_qk);
    zero_rows(bp.dv, p.dtype, bp.dv_stride, b, seq.k_begin, h, seq.seqlen_k, seq.allocated_k, p.hdim_v);
  }
}

// dsinks[h] = −Σ over the batch and the rows of exp(sink − LSE)·D, D = rowsum(dO∘O): the sink
// is one more logit of the softmax, with no value, so dL/dsink = −P_sink·Σ_j P_j·dP_j. In
// double, one head per item and a fixed order: the result does not depend on the threads.
void sink_gradient(const BackwardProblem& bp, const RowState& state, int64_t h) {
  const ForwardProblem& p = bp.fwd;
  const double sink = p.sinks[h];
  double sum = 0.0;
  if (sink != -kInfinity) {
    for (int64_t b = 0; b < p.batch; ++b) {
      const Sequence seq = sequence_of(p, b);
      const float* lse = lse_of(p, b, h, seq);
      const float* d = state.d(state.first_row(b, h));
      for (int64_t i = 0; i < seq.seqlen_q; ++i) sum += std::exp(sink - double{lse[i]}) * d[i];
    }
  }
  bp.dsinks[h] = static_cast<float>(-sum);
}

}  // namespace

Status tiled_backward(const BackwardProblem& bp, int key_ranges) {
  const ForwardProblem& p = bp.fwd;
  const Kernels& kernels = active_kernels();
  ThreadPool& pool = ThreadPool::shared();
  const RowState state(p, key_ranges > 0 ? key_ranges : key_ranges_per_head(p, pool.thread_count()));
  if (!state.allocated()) {
    return {Code::internal, "CPU backward: out of memory for " + std::to_string(state.bytes()) +
                                " bytes of row statistics and dQ slices"};
  }

  // (batch, head, query tile) items of passes 1 and 3.
  const int64_t query_tiles = (longest_queries(p) + kRows - 1) / kRows;
  const int64_t row_items_per_batch = int64_t{p.heads_q} * query_tiles;
  auto for_each_query_tile = [&](auto&& body) {
    pool.parallel_for(p.batch * row_items_per_batch, [&](int64_t item, int) {
      const int64_t b = item / row_items_per_batch;
      const int64_t h = item / query_tiles % p.heads_q;
      const int64_t i_first = item % query_tiles * kRows;
      const Sequence seq = sequence_of(p, b);
      if (i_first < seq.seqlen_q) body(b, h, i_first, seq);
    });
  };

  const std::size_t staging_floats = 2 * scratch_floats(static_cast<std::size_t>(std::max(p.hdim_qk, p.hdim_v)));
  for_each_query_tile([&](int64_t b, int64_t h, int64_t i_first, const Sequence& seq) {
    prepare_rows(bp, kernels, state, b, h, i_first, seq, thread_scratch(staging_floats));
  });

  const int ranges = state.key_ranges();
  const int64_t key_items = int64_t{p.batch} * p.heads_kv * ranges;
  const std::size_t key_scratch = KeyTiles(p).carver.used();
  pool.parallel_for(key_items, [&](int64_t item, int) {
    const int64_t b = item / (int64_t{p.heads_kv} * ranges);
    const int64_t h_kv = item / ranges % p.heads_kv;
    const int range = static_cast<int>(item % ranges);
    const Sequence seq = sequence_of(p, b);
    KeyTiles tiles(p, thread_scratch(key_scratch));
    backward_key_range(bp, kernels, state, b, h_kv, range, seq, tiles);
  });

  const std::size_t sum_floats = static_cast<std::size_t>(kRows) * p.hdim_qk;
  for_each_query_tile([&](int64_t b, int64_t h, int64_t i_first, const Sequence& seq) {
    store_dq(bp, kernels, state, b, h, i_first, seq, thread_scratch(sum_floats));
  });

  if (p.seqused_q != nullptr || p.seqused_k != nullptr) {
    pool.parallel_for(p.batch, [&](int64_t b, int) { zero_unused_rows(bp, b); });
  }
  if (bp.dsinks != nullptr && p.sinks != nullptr) {
    pool.parallel_for(p.heads_q, [&](int64_t h, int) { sink_gradient(bp, state, h); });
  }
  return Status::ok();
}

}  // namespace hfa::cpu
