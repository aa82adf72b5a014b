// Tiled forward. A work item is a block of up to kForwardQueryTilesPerItem query tiles of one
// (batch, head); K/V tiles stream past the block, each loaded (converted to fp32 when 16-bit)
// once and used by every query tile of the block while it is hot in cache.
//
// Each query tile's Q is packed once, transposed (d × rows) and pre-scaled into the exp2 domain.
// Scores are computed transposed, Sᵀ = K·Qᵀ (keys × queries), so that K and V are read in place
// (f32) or converted row by row, never transposed per tile; the online softmax then runs down
// the columns and O += P·V reads Pᵀ as a transposed operand.
#include <algorithm>
#include <cmath>

#include "common/combine_splits.hpp"
#include "cpu/kernels.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/tiled_attention.hpp"
#include "cpu/tiled_common.hpp"

namespace hfa::cpu {
namespace {

using detail::ForwardProblem;

constexpr int kRows = kForwardQueryRows;
constexpr int kKeys = kForwardKeys;
constexpr int kMaxTilesPerItem = kForwardQueryTilesPerItem;

// One query tile: its rows, packed Q and online-softmax state.
struct QueryTile {
  int64_t i_first = 0;
  int rows = 0;
  float* q_t;       // hdim_qk × kRows: Qᵀ, scaled into the exp2 domain
  float* o;         // kRows × hdim_v: unnormalized output
  float* row_max;   // kRows: running max m (exp2 domain)
  float* row_sum;   // kRows: running sum l
  float* new_max;   // kRows
  float* shift;     // kRows: the max used for exp2 (0 for a row that has seen no key yet)

  int64_t i_last() const { return i_first + rows - 1; }
};

// Per-thread fp32 tiles of one work item, carved from the thread's scratch (or, with a null
// block, only counted).
struct ForwardTiles {
  float* k;         // kKeys × hdim_qk (when K needs converting)
  float* v;         // kKeys × hdim_v
  float* s_t;       // kKeys × kRows: scores, then probabilities, transposed
  float* staging;   // one row of hdim_qk
  QueryTile queries[kMaxTilesPerItem];
  ScratchCarver carver;

  explicit ForwardTiles(const ForwardProblem& p, float* block = nullptr) : carver(block) {
    const std::size_t dqk = p.hdim_qk, dv = p.hdim_v;
    k = carver.take(kKeys * dqk);
    v = carver.take(kKeys * dv);
    s_t = carver.take(std::size_t{kKeys} * kRows);
    staging = carver.take(dqk);
    for (QueryTile& q : queries) {
      q.q_t = carver.take(dqk * kRows);
      q.o = carver.take(kRows * dv);
      q.row_max = carver.take(kRows);
      q.row_sum = carver.take(kRows);
      q.new_max = carver.take(kRows);
      q.shift = carver.take(kRows);
    }
  }
};

// A partial block of a block-sparse mask (hfa/options.def, kv_mask_bits): its bits and the
// first query row and key it covers.
struct PartialBlock {
  const int32_t* bits = nullptr;  // row r's words start at bits + r·words_per_row
  int words_per_row = 0;
  int64_t i_first = 0, j_first = 0;
};

// Adds keys [j_first, j_first + keys) to one query tile: scores, mask, online softmax, P·V.
// partial: the block's bit mask when these keys lie in a partial block; null otherwise.
void accumulate_key_tile(const ForwardProblem& p, const Kernels& kernels,
                         const TileMods& mods, const KeyWindow& window, QueryTile& q, int64_t j_first, int keys,
                         const FloatBlock& k, const FloatBlock& v, float* s_t,
                         const PartialBlock* partial) {
  const int dqk = p.hdim_qk, dv = p.hdim_v, rows = q.rows;
  const int64_t j_last = j_first + keys - 1;
  kernels.gemm(keys, rows, dqk, k.data, k.ld, q.q_t, kRows, s_t, kRows, false);
  if (mods.on()) {
    for (int r = 0; r < keys; ++r) mods.column(s_t + r * kRows, rows, q.i_first, j_first + r);
  }
  if (!window.all_visible(q.i_first, q.i_last(), j_first, j_last)) {
    for (int r = 0; r < keys; ++r) {
      const int64_t j = j_first + r;
      mask_outside(s_t + r * kRows, rows, window.first_row_seeing(j) - q.i_first,
                   window.last_row_seeing(j) - q.i_first);
    }
  }
  if (partial != nullptr) {
    for (int r = 0; r < keys; ++r) {
      const int64_t c = j_first + r - partial->j_first;
      const int32_t* row_bits =
          partial->bits + (q.i_first - partial->i_first) * partial->words_per_row;
      float* column = s_t + r * kRows;
      for (int i = 0; i < rows; ++i, row_bits += partial->words_per_row)
        if (!detail::BlockSparse::bit(row_bits, c)) column[i] = -kInfinity;
    }
  }

  // Online softmax: a larger max rescales what was summed so far by exp2(m_old − m_new).
  std::copy(q.row_max, q.row_max + rows, q.new_max);
  kernels.columns_max(s_t, keys, rows, kRows, q.new_max);
  for (int i = 0; i < rows; ++i) {
    q.shift[i] = q.new_max[i] == -kInfinity ? 0.0f : q.new_max[i];
    if (q.new_max[i] != q.row_max[i]) {
      const float rescale = std::exp2(q.row_max[i] - q.shift[i]);
      q.row_sum[i] *= rescale;
      kernels.scale(q.o + static_cast<int64_t>(i) * dv, dv, rescale);
      q.row_max[i] = q.new_max[i];
    }
  }
  kernels.exp2_columns(s_t, keys, rows, kRows, q.shift, nullptr, q.row_sum);
  kernels.gemm_at(rows, dv, keys, s_t, kRows, v.data, v.ld, q.o, dv, true);
}

// accumulate: the running result of earlier calls (an f32 row and its LSE) merged with this
// call's normalized row o and its lse, in place.
void merge_into_running(const float* o, int dv, float lse, float* running, float* running_lse) {
  const detail::RunningMerge m = detail::merge_with_running(*running_lse, lse);
  for (int c = 0; c < dv; ++c)
    running[c] = (m.reads_before ? m.before * running[c] : 0.0f) + m.call * o[c];
  *running_lse = m.lse;
}

// O = (Σ P·V) / l and LSE = m·ln2 + ln l for the rows of one query tile, stored, or merged into
// out and lse (p.accumulate).
void store_query_tile(const ForwardProblem& p, const Kernels& kernels, int64_t b, int64_t h,
                      const Sequence& seq, const QueryTile& q) {
  const int dv = p.hdim_v;
  Rows<std::byte> out_rows = rows_of(p.out, p.out_dtype, p.out_stride, b, seq.q_begin, h);
  for (int i = 0; i < q.rows; ++i) {
    float* o_row = q.o + static_cast<int64_t>(i) * dv;
    const float sum = q.row_sum[i];
    // sum is 0 exactly when the row saw no key and has no sink: O = 0 and LSE = −inf. With a
    // sink the sum is >= 1 and O = 0 / sum for a row without keys.
    kernels.scale(o_row, dv, sum > 0.0f ? 1.0f / sum : 0.0f);
    // In double, so that the one rounding is the store to float.
    const float lse = sum > 0.0f ? static_cast<float>(q.row_max[i] * kLn2 + std::log(double{sum}))
                                 : -kInfinity;
    float* lse_at = p.lse == nullptr ? nullptr
                                     : p.lse + b * p.lse_batch_stride + h * p.lse_head_stride +
                                           seq.q_begin + q.i_first + i;
    std::byte* out_row = out_rows.row(q.i_first + i);
    if (p.accumulate) {  // out is f32 and lse given (validated)
      merge_into_running(o_row, dv, lse, reinterpret_cast<float*>(out_row), lse_at);
      continue;
    }
    kernels.store(p.out_dtype, o_row, dv, out_row);
    if (lse_at != nullptr) *lse_at = lse;
  }
}

// Query rows [i_first, i_end) of one (sequence, head): at most kMaxTilesPerItem tiles.
void forward_query_block(const ForwardProblem& p, const Kernels& kernels, int64_t b, int64_t h,
                         int64_t i_first, int64_t i_end, const Sequence& seq, ForwardTiles& t) {
  const ScoreTransform transform(p);
  const TileMods mods(p, kernels, transform, b, h, seq);
  const KeyWindow window(p, seq);
  const HeadInputs in(p, b, h, seq);

  // A sink starts every row's online softmax as one logit already seen, with no value: the
  // running max is the sink and the sum exp2(sink − sink) = 1. So it takes part in the max and
  // the denominator, and a row that sees no key ends with O = 0 and LSE = the sink. A sink of
  // −inf is no sink (its sum would be exp2(−inf + inf)).
  float start_max = -kInfinity, start_sum = 0.0f;
  if (p.sinks != nullptr && p.sinks[h] != -kInfinity) {
    start_max = static_cast<float>(p.sinks[h] * kLog2e);
    start_sum = 1.0f;
  }

  int count = 0;  // query tiles of the block
  for (; i_first + count * kRows < i_end; ++count) {
    QueryTile& q = t.queries[count];
    q.i_first = i_first + count * kRows;
    q.rows = static_cast<int>(std::min<int64_t>(kRows, i_end - q.i_first));
    load_transposed(kernels, p.dtype, in.q, q.i_first, q.rows, p.hdim_qk, transform.qk_factor,
                    t.staging, q.q_t, kRows);
    std::fill(q.row_max, q.row_max + q.rows, start_max);
    std::fill(q.row_sum, q.row_sum + q.rows, start_sum);
    std::fill(q.o, q.o + static_cast<int64_t>(q.rows) * p.hdim_v, 0.0f);
  }
  if (count == 0) return;

  // Rows see a contiguous key range that only moves right with i: [first(i), last(i_end)]
  // holds every key the rows [i, i_end] see, and every key in it is seen by one of them.
  auto sees_some_key = [&](const QueryTile& q, int64_t j_first, int64_t j_last) {
    return window.first(q.i_first) <= j_last && window.last(q.i_last()) >= j_first;
  };
  const int64_t key_end = window.last(t.queries[count - 1].i_last()) + 1;
  // Keys [begin, end) in tiles of kKeys, each added to the query tiles that see some of it.
  auto visit_keys = [&](int64_t begin, int64_t end, const PartialBlock* partial) {
    for (int64_t j_first = begin; j_first < end; j_first += kKeys) {
      const int keys = static_cast<int>(std::min<int64_t>(kKeys, end - j_first));
      const FloatBlock k = load_block(kernels, p.dtype, in.k, j_first, keys, p.hdim_qk, t.k);
      const FloatBlock v = load_block(kernels, p.dtype, in.v, j_first, keys, p.hdim_v, t.v);
      const int64_t size = static_cast<int64_t>(element_size(p.dtype));
      prefetch_tile(in.k, j_first + kKeys, end, kKeys, p.hdim_qk * size);
      prefetch_tile(in.v, j_first + kKeys, end, kKeys, p.hdim_v * size);
      for (int tile = 0; tile < count; ++tile) {
        QueryTile& q = t.queries[tile];
        if (!sees_some_key(q, j_first, j_first + keys - 1)) continue;  // masked tiles are skipped
        // Keys past the tile's last row's window (the block's later tiles see them) are left
        // out too: on a causal diagonal that is half of a 128-key tile for every other query tile.
        const int seen_keys =
            static_cast<int>(std::min<int64_t>(keys, window.last(q.i_last()) + 1 - j_first));
        accumulate_key_tile(p, kernels, mods, window, q, j_first, seen_keys, k, v, t.s_t,
                            partial);
      }
    }
  };
  const detail::BlockSparse& sparse = p.block_sparse;
  if (!sparse) {
    visit_keys(window.first(i_first), key_end, nullptr);
  } else {
    // Only the listed key blocks (the item is one query block's rows of this sequence): the
    // full ones, then the partial ones with their bits; the window still bounds each (the mask
    // is their AND). Mask coordinates are the sequence's shifted by its origin (packed: its
    // first tokens), so a key block may reach outside the sequence: that part is not visited.
    const detail::BlockSparse::Origin origin = sparse.origin(b, seq.q_begin, seq.k_begin);
    const int64_t m = (origin.row + i_first) / sparse.block_q;
    const int64_t row_of_block = m * sparse.block_q - origin.row;  // may lie before the sequence
    auto first_key = [&](int32_t index) { return int64_t{index} * sparse.block_kv - origin.key; };
    auto visit_block = [&](int32_t index, const PartialBlock* partial) {
      const int64_t j_first = first_key(index);
      const int64_t begin = std::max(j_first, window.first(i_first));
      visit_keys(begin, std::min(j_first + sparse.block_kv, key_end), partial);
    };
    if (sparse.full_kv_num_blocks) {
      const int32_t full = *sparse.full_kv_num_blocks.at(origin.batch, h, m);
      for (int32_t s = 0; s < full; ++s)
        visit_block(*sparse.full_kv_indices.at(origin.batch, h, m, s), nullptr);
    }
    const int32_t count_partial = *sparse.kv_num_blocks.at(origin.batch, h, m);
    for (int32_t s = 0; s < count_partial; ++s) {
      const int32_t index = *sparse.kv_indices.at(origin.batch, h, m, s);
      const PartialBlock partial{sparse.bits(origin.batch, h, m, s), sparse.words_per_row,
                                 row_of_block, first_key(index)};
      visit_block(index, &partial);
    }
  }
  for (int tile = 0; tile < count; ++tile) store_query_tile(p, kernels, b, h, seq, t.queries[tile]);
}

// The query rows [first, end) of work item `item` of a sequence: runs of rows_per_item rows
// counted from the sequence's first row, or, block-sparse (rows_per_item = block_q), the rows of
// each mask query block the sequence overlaps. With cu_seqlens those are the packed tokens'
// blocks, so a sequence may start inside one: its first item is then short.
struct RowRange {
  int64_t first, end;
};

RowRange item_rows(const ForwardProblem& p, int64_t b, const Sequence& seq, int64_t item,
                   int64_t rows_per_item) {
  const detail::BlockSparse& sparse = p.block_sparse;
  const int64_t before = sparse ? sparse.origin(b, seq.q_begin, seq.k_begin).row % sparse.block_q
                                : 0;  // rows of the first block ahead of the sequence
  const int64_t first = item * rows_per_item - before;
  return {std::max<int64_t>(first, 0), std::min(first + rows_per_item, seq.seqlen_q)};
}

}  // namespace

Status tiled_forward(const ForwardProblem& p) {
  const Kernels& kernels = active_kernels();
  ThreadPool& pool = ThreadPool::shared();
  const int64_t tiles_per_sequence = (longest_queries(p) + kRows - 1) / kRows;
  // Blocks of several tiles share each K/V tile, but every thread should get a few items.
  int tiles_per_item = kMaxTilesPerItem;
  const int64_t heads = int64_t{p.batch} * p.heads_q;
  // Block-sparse: one item per query block (the backend checked it is whole query tiles).
  if (p.block_sparse) tiles_per_item = p.block_sparse.block_q / kRows;
  while (!p.block_sparse && tiles_per_item > 1 &&
         heads * ((tiles_per_sequence + tiles_per_item - 1) / tiles_per_item) < 4 * pool.thread_count()) {
    tiles_per_item /= 2;
  }
  // A packed mask's blocks need not start at a sequence's first row: one more item each.
  const int64_t items_per_sequence = (tiles_per_sequence + tiles_per_item - 1) / tiles_per_item +
                                     (p.block_sparse.packed ? 1 : 0);
  const int64_t items_per_batch = items_per_sequence * p.heads_q;
  const std::size_t scratch_size = ForwardTiles(p).carver.used();
  pool.parallel_for(p.batch * items_per_batch, [&](int64_t item, int) {
    const int64_t b = item / items_per_batch;
    const int64_t h = item % items_per_batch / items_per_sequence;
    // Last blocks first: under a causal mask they see the most keys, so the long items start
    // early and the short ones fill in at the end.
    const int64_t block = items_per_sequence - 1 - item % items_per_sequence;
    const Sequence seq = sequence_of(p, b);
    const RowRange rows = item_rows(p, b, seq, block, int64_t{tiles_per_item} * kRows);
    if (rows.first >= rows.end) return;
    ForwardTiles tiles(p, thread_scratch(scratch_size));
    forward_query_block(p, kernels, b, h, rows.first, rows.end, seq, tiles);
  });
  return Status::ok();
}

}  // namespace hfa::cpu
