// Tiled backward (FlashAttention-2 style), recomputing P from the forward's LSE:
//   D = rowsum(dO∘O),  dS = P∘(dP − D)  (times 1 − tanh² under a softcap),
//   dV = Pᵀ·dO,  dK = scale·dSᵀ·Q,  dQ = scale·dS·K.
// Two kinds of work items, run together in one parallel pass and writing disjoint outputs, so
// no atomics and a deterministic result:
//   key items   (batch, kv head, key tile): dK and dV of those keys, over every query head of
//               the GQA group and every query tile that sees the keys; Kᵀ and Vᵀ packed once.
//   query items (batch, head, query tile): dQ of those rows over the keys they see; Qᵀ and dOᵀ
//               packed once, scores computed transposed as in the forward.
#include <algorithm>
#include <cmath>

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

// The tensors of one (batch, query head) and its kv head.
struct HeadRows {
  InputRows q, k, v, out, dout;
  float* lse;       // of row 0 of the sequence
  const float* d;   // the given D (BackwardProblem::softmax_d) of row 0, or null: computed

  HeadRows(const BackwardProblem& bp, int64_t b, int64_t h, const Sequence& seq) {
    const ForwardProblem& p = bp.fwd;
    const int64_t h_kv = h / (p.heads_q / p.heads_kv);
    q = rows_of(p.q, p.dtype, p.q_stride, b, seq.q_begin, h);
    k = rows_of(p.k, p.dtype, p.k_stride, b, seq.k_begin, h_kv);
    v = rows_of(p.v, p.dtype, p.v_stride, b, seq.k_begin, h_kv);
    out = rows_of(static_cast<const void*>(p.out), p.out_dtype, p.out_stride, b, seq.q_begin, h);
    dout = rows_of(bp.dout, p.dtype, bp.dout_stride, b, seq.q_begin, h);
    lse = p.lse + b * p.lse_batch_stride + h * p.lse_head_stride + seq.q_begin;
    d = bp.softmax_d == nullptr ? nullptr
                                : bp.softmax_d + b * bp.softmax_d_batch_stride +
                                      h * bp.softmax_d_head_stride + seq.q_begin;
  }

  // D = rowsum(dO∘O) of row i: given, or computed through the two staging rows.
  float row_d(const ForwardProblem& p, const Kernels& kernels, int64_t i, float* staging_o,
              float* staging_do) const {
    if (d != nullptr) return d[i];
    kernels.load(p.out_dtype, out.row(i), p.hdim_v, 1.0f, staging_o);
    kernels.load(p.dtype, dout.row(i), p.hdim_v, 1.0f, staging_do);
    return kernels.dot(staging_o, staging_do, p.hdim_v);
  }
};

// For rows [i_first, i_first + rows): D = rowsum(dO∘O) and the exp2-domain LSE shift.
void load_row_statistics(const ForwardProblem& p, const Kernels& kernels, const HeadRows& head,
                         int64_t i_first, int rows, float* staging_o, float* staging_do,
                         float* d, float* shift_high, float* shift_low) {
  for (int i = 0; i < rows; ++i) {
    d[i] = head.row_d(p, kernels, i_first + i, staging_o, staging_do);
    const Exp2Shift shift = lse_to_exp2_shift(head.lse[i_first + i]);
    shift_high[i] = shift.high;
    shift_low[i] = shift.low;
  }
}

// ---- key items: dK, dV ------------------------------------------------------------------

// Scratch both passes carve for a tile, beside their own operands: the tanh of the scores (the
// softcap's derivative), D and the LSE as an exp2 shift, and rows for dtype conversion.
struct TileScratch {
  ScratchCarver carver;
  float* tanh;                        // kRows × kKeys, in the pass's orientation
  float *d, *shift_high, *shift_low;  // kRows
  float *staging_a, *staging_b;       // max(hdim_qk, hdim_v)

  TileScratch(const ForwardProblem& fp, float* block) : carver(block) {
    const std::size_t widest = std::max<std::size_t>(fp.hdim_qk, fp.hdim_v);
    tanh = carver.take(std::size_t{kRows} * kKeys);
    d = carver.take(kRows);
    shift_high = carver.take(kRows);
    shift_low = carver.take(kRows);
    staging_a = carver.take(widest);
    staging_b = carver.take(widest);
  }
};

struct KeyTiles : TileScratch {
  float *k_t, *v_t;   // hdim × kKeys; Kᵀ scaled into the exp2 domain
  float *q, *dout;    // kRows × hdim: Q scaled into the exp2 domain; dO when converted
  float *p, *dp;      // kRows × kKeys: P, then dP and dS
  float *dk, *dv;     // kKeys × hdim accumulators

  explicit KeyTiles(const ForwardProblem& fp, float* block = nullptr) : TileScratch(fp, block) {
    const std::size_t dqk = fp.hdim_qk, dv_ = fp.hdim_v, tile = std::size_t{kRows} * kKeys;
    k_t = carver.take(dqk * kKeys);
    v_t = carver.take(dv_ * kKeys);
    q = carver.take(kRows * dqk);
    dout = carver.take(kRows * dv_);
    p = carver.take(tile);
    dp = carver.take(tile);
    dk = carver.take(kKeys * dqk);
    dv = carver.take(kKeys * dv_);
  }
};

void backward_key_tile(const BackwardProblem& bp, const Kernels& kernels, int64_t b, int64_t h_kv,
                       int64_t j_first, const Sequence& seq, KeyTiles& t) {
  const ForwardProblem& p = bp.fwd;
  const ScoreTransform transform(p);
  const KeyWindow window(p, seq);
  const int dqk = p.hdim_qk, dv = p.hdim_v;
  const int keys = static_cast<int>(std::min<int64_t>(kKeys, seq.seqlen_k - j_first));
  const int64_t j_last = j_first + keys - 1;
  const int64_t group = p.heads_q / p.heads_kv;

  {
    const HeadRows head(bp, b, h_kv * group, seq);
    load_transposed(kernels, p.dtype, head.k, j_first, keys, dqk, 1.0f, t.staging_a, t.k_t, kKeys);
    load_transposed(kernels, p.dtype, head.v, j_first, keys, dv, 1.0f, t.staging_a, t.v_t, kKeys);
  }
  std::fill(t.dk, t.dk + static_cast<int64_t>(keys) * dqk, 0.0f);
  std::fill(t.dv, t.dv + static_cast<int64_t>(keys) * dv, 0.0f);

  const int64_t row_first = window.first_row_seeing(j_first);
  const int64_t row_end = window.last_row_seeing(j_last) + 1;
  for (int64_t h = h_kv * group; h < (h_kv + 1) * group; ++h) {
    const HeadRows head(bp, b, h, seq);
    for (int64_t i_first = row_first; i_first < row_end; i_first += kRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows, row_end - i_first));
      const int64_t i_last = i_first + rows - 1;
      if (i_first + kRows < row_end) {
        const int next_rows = static_cast<int>(std::min<int64_t>(kRows, row_end - i_first - kRows));
        prefetch_rows(head.q, i_first + kRows, next_rows, dqk * element_size(p.dtype));
        prefetch_rows(head.dout, i_first + kRows, next_rows, dv * element_size(p.dtype));
        prefetch_rows(head.out, i_first + kRows, next_rows, dv * element_size(p.out_dtype));
      }
      // Q scaled exactly as the forward and the query items scale it, so that the scores (and
      // hence P against the forward's LSE) come out bit for bit the same.
      for (int r = 0; r < rows; ++r) {
        kernels.load(p.dtype, head.q.row(i_first + r), dqk, transform.qk_factor, t.q + r * dqk);
      }
      const FloatBlock dout = load_block(kernels, p.dtype, head.dout, i_first, rows, dv, t.dout);
      load_row_statistics(p, kernels, head, i_first, rows, t.staging_a, t.staging_b, t.d, t.shift_high, t.shift_low);

      kernels.gemm(rows, keys, dqk, t.q, dqk, t.k_t, kKeys, t.p, kKeys, false);
      const bool masked = !window.all_visible(i_first, i_last, j_first, j_last);
      for (int r = 0; r < rows; ++r) {
        float* p_row = t.p + r * kKeys;
        if (transform.softcap()) kernels.softcap(p_row, t.tanh + r * kKeys, keys, transform.softcap_log2);
        if (masked) {
          const int64_t i = i_first + r;
          mask_outside(p_row, keys, window.first(i) - j_first, window.last(i) - j_first);
        }
        kernels.exp2_shifted(p_row, keys, t.shift_high[r], t.shift_low[r]);
      }
      kernels.gemm(rows, keys, dv, dout.data, dout.ld, t.v_t, kKeys, t.dp, kKeys, false);
      for (int r = 0; r < rows; ++r) {
        kernels.softmax_grad(t.p + r * kKeys, t.dp + r * kKeys, keys, t.d[r]);
        if (transform.softcap()) kernels.tanh_grad(t.dp + r * kKeys, t.tanh + r * kKeys, keys);
      }
      kernels.gemm_at(keys, dv, rows, t.p, kKeys, dout.data, dout.ld, t.dv, dv, true);
      kernels.gemm_at(keys, dqk, rows, t.dp, kKeys, t.q, dqk, t.dk, dqk, true);
    }
  }

  // dK = scale·dSᵀ·Q, and the Q above carried qk_factor. A zero scale (valid) makes that Q and
  // dK zero: the factor is then 0, not 0 / 0.
  const float dk_factor =
      transform.qk_factor != 0.0f ? p.softmax_scale / transform.qk_factor : 0.0f;
  Rows<std::byte> dk_rows = rows_of(bp.dk, p.dtype, bp.dk_stride, b, seq.k_begin, h_kv);
  Rows<std::byte> dv_rows = rows_of(bp.dv, p.dtype, bp.dv_stride, b, seq.k_begin, h_kv);
  for (int r = 0; r < keys; ++r) {
    float* dk_row = t.dk + static_cast<int64_t>(r) * dqk;
    kernels.scale(dk_row, dqk, dk_factor);
    kernels.store(p.dtype, dk_row, dqk, dk_rows.row(j_first + r));
    kernels.store(p.dtype, t.dv + static_cast<int64_t>(r) * dv, dv, dv_rows.row(j_first + r));
  }
}

// ---- query items: dQ --------------------------------------------------------------------

struct QueryTiles : TileScratch {
  float *q_t, *dout_t;  // hdim × kRows; Qᵀ scaled into the exp2 domain
  float *k, *v;         // kKeys × hdim (when the inputs need converting)
  float *p_t, *dp_t;    // kKeys × kRows
  float* dq;            // kRows × hdim_qk accumulator

  explicit QueryTiles(const ForwardProblem& fp, float* block = nullptr) : TileScratch(fp, block) {
    const std::size_t dqk = fp.hdim_qk, dv_ = fp.hdim_v, tile = std::size_t{kRows} * kKeys;
    q_t = carver.take(dqk * kRows);
    dout_t = carver.take(dv_ * kRows);
    k = carver.take(kKeys * dqk);
    v = carver.take(kKeys * dv_);
    p_t = carver.take(tile);
    dp_t = carver.take(tile);
    dq = carver.take(kRows * dqk);
  }
};

void backward_query_tile(const BackwardProblem& bp, const Kernels& kernels, int64_t b, int64_t h,
                         int64_t i_first, const Sequence& seq, QueryTiles& t) {
  const ForwardProblem& p = bp.fwd;
  const ScoreTransform transform(p);
  const KeyWindow window(p, seq);
  const int dqk = p.hdim_qk, dv = p.hdim_v;
  const int rows = static_cast<int>(std::min<int64_t>(kRows, seq.seqlen_q - i_first));
  const int64_t i_last = i_first + rows - 1;
  const HeadRows head(bp, b, h, seq);

  load_transposed(kernels, p.dtype, head.q, i_first, rows, dqk, transform.qk_factor, t.staging_a, t.q_t, kRows);
  load_transposed(kernels, p.dtype, head.dout, i_first, rows, dv, 1.0f, t.staging_a, t.dout_t, kRows);
  load_row_statistics(p, kernels, head, i_first, rows, t.staging_a, t.staging_b, t.d, t.shift_high, t.shift_low);
  std::fill(t.dq, t.dq + static_cast<int64_t>(rows) * dqk, 0.0f);

  const int64_t key_end = window.last(i_last) + 1;
  for (int64_t j_first = window.first(i_first); j_first < key_end; j_first += kKeys) {
    const int keys = static_cast<int>(std::min<int64_t>(kKeys, key_end - j_first));
    const int64_t j_last = j_first + keys - 1;
    const FloatBlock k = load_block(kernels, p.dtype, head.k, j_first, keys, dqk, t.k);
    const FloatBlock v = load_block(kernels, p.dtype, head.v, j_first, keys, dv, t.v);
    if (j_first + kKeys < key_end) {
      const int next_keys = static_cast<int>(std::min<int64_t>(kKeys, key_end - j_first - kKeys));
      prefetch_rows(head.k, j_first + kKeys, next_keys, dqk * element_size(p.dtype));
      prefetch_rows(head.v, j_first + kKeys, next_keys, dv * element_size(p.dtype));
    }

    kernels.gemm(keys, rows, dqk, k.data, k.ld, t.q_t, kRows, t.p_t, kRows, false);
    const bool masked = !window.all_visible(i_first, i_last, j_first, j_last);
    for (int r = 0; r < keys; ++r) {
      float* p_row = t.p_t + r * kRows;
      if (transform.softcap()) kernels.softcap(p_row, t.tanh + r * kRows, rows, transform.softcap_log2);
      if (masked) {
        const int64_t j = j_first + r;
        mask_outside(p_row, rows, window.first_row_seeing(j) - i_first, window.last_row_seeing(j) - i_first);
      }
    }
    kernels.exp2_columns(t.p_t, keys, rows, kRows, t.shift_high, t.shift_low, nullptr);
    kernels.gemm(keys, rows, dv, v.data, v.ld, t.dout_t, kRows, t.dp_t, kRows, false);
    for (int r = 0; r < keys; ++r) {
      kernels.softmax_grad_columns(t.p_t + r * kRows, t.dp_t + r * kRows, t.d, rows);
      if (transform.softcap()) kernels.tanh_grad(t.dp_t + r * kRows, t.tanh + r * kRows, rows);
    }
    kernels.gemm_at(rows, dqk, keys, t.dp_t, kRows, k.data, k.ld, t.dq, dqk, true);
  }

  Rows<std::byte> dq_rows = rows_of(bp.dq, p.dtype, bp.dq_stride, b, seq.q_begin, h);
  for (int r = 0; r < rows; ++r) {
    float* dq_row = t.dq + static_cast<int64_t>(r) * dqk;
    kernels.scale(dq_row, dqk, p.softmax_scale);
    kernels.store(p.dtype, dq_row, dqk, dq_rows.row(i_first + r));
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
void sink_gradient(const BackwardProblem& bp, const Kernels& kernels, int64_t h, float* staging_o,
                   float* staging_do) {
  const ForwardProblem& p = bp.fwd;
  const double sink = p.sinks[h];
  double sum = 0.0;
  if (sink != -kInfinity) {
    for (int64_t b = 0; b < p.batch; ++b) {
      const Sequence seq = sequence_of(p, b);
      const HeadRows head(bp, b, h, seq);
      for (int64_t i = 0; i < seq.seqlen_q; ++i) {
        const double d = head.row_d(p, kernels, i, staging_o, staging_do);
        sum += std::exp(sink - double{head.lse[i]}) * d;
      }
    }
  }
  bp.dsinks[h] = static_cast<float>(-sum);
}

}  // namespace

Status tiled_backward(const BackwardProblem& bp) {
  const ForwardProblem& p = bp.fwd;
  const Kernels& kernels = active_kernels();
  const int64_t key_tiles = (longest_keys(p) + kKeys - 1) / kKeys;
  const int64_t query_tiles = (longest_queries(p) + kRows - 1) / kRows;
  const int64_t key_items = int64_t{p.batch} * p.heads_kv * key_tiles;
  const int64_t query_items = int64_t{p.batch} * p.heads_q * query_tiles;
  const std::size_t key_scratch = KeyTiles(p).carver.used();
  const std::size_t query_scratch = QueryTiles(p).carver.used();

  // Key items first: each covers a whole GQA group, so they are the long ones.
  ThreadPool::shared().parallel_for(key_items + query_items, [&](int64_t item, int) {
    if (item < key_items) {
      const int64_t b = item / (p.heads_kv * key_tiles);
      const int64_t h_kv = item / key_tiles % p.heads_kv;
      const int64_t j_first = item % key_tiles * kKeys;
      const Sequence seq = sequence_of(p, b);
      if (j_first >= seq.seqlen_k) return;
      KeyTiles tiles(p, thread_scratch(key_scratch));
      backward_key_tile(bp, kernels, b, h_kv, j_first, seq, tiles);
    } else {
      item -= key_items;
      const int64_t b = item / (p.heads_q * query_tiles);
      const int64_t h = item / query_tiles % p.heads_q;
      const int64_t i_first = item % query_tiles * kRows;
      const Sequence seq = sequence_of(p, b);
      if (i_first >= seq.seqlen_q) return;
      QueryTiles tiles(p, thread_scratch(query_scratch));
      backward_query_tile(bp, kernels, b, h, i_first, seq, tiles);
    }
  });

  if (p.seqused_q != nullptr || p.seqused_k != nullptr) {
    ThreadPool::shared().parallel_for(p.batch, [&](int64_t b, int) { zero_unused_rows(bp, b); });
  }
  if (bp.dsinks != nullptr && p.sinks != nullptr) {
    const std::size_t row = scratch_floats(static_cast<std::size_t>(p.hdim_v));
    ThreadPool::shared().parallel_for(p.heads_q, [&](int64_t h, int) {
      float* staging = thread_scratch(2 * row);
      sink_gradient(bp, kernels, h, staging, staging + row);
    });
  }
  return Status::ok();
}

}  // namespace hfa::cpu
