// One attention test case: its shape and options (AttentionCase), and host buffers for it with
// the backend problems over them (AttentionData). Inputs are fresh random normal values seeded
// per case; outputs start as NaN so that unwritten elements show.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/problem.hpp"
#include "host_tensor.hpp"

namespace hfa::test {

struct AttentionCase {
  DType dtype = DType::f32;
  // out's dtype when not the inputs' (the FP8 tests: bf16 or f16 out of the f32 values their
  // e4m3 inputs dequantize to).
  std::optional<DType> out_dtype;
  int32_t batch = 1;
  int32_t seqlen_q = 1;
  int32_t seqlen_k = 1;
  int32_t heads_q = 1;
  int32_t heads_kv = 1;
  int32_t hdim_qk = 64;
  int32_t hdim_v = 64;
  bool causal = false;
  int32_t window_left = -1;
  int32_t window_right = -1;
  float softcap = 0.0f;
  std::optional<float> softmax_scale;  // default 1/sqrt(hdim_qk)
  // Varlen when not empty: one length per sequence (batch = their count; 0 is allowed).
  std::vector<int32_t> varlen_q;
  std::vector<int32_t> varlen_k;
  // Used lengths (seqused_q/k), one per sequence, when not empty; <= the allocated lengths.
  std::vector<int32_t> seqused_q;
  std::vector<int32_t> seqused_k;
  bool sinks = false;        // random attention sinks (one logit per query head)
  // ALiBi slopes (hfa_options.alibi_slopes), random and positive: one per query head, or one per
  // (sequence, query head).
  enum class Alibi { none, per_head, per_sequence_head } alibi = Alibi::none;
  int64_t padding = 0;       // unused elements after every head row: non-contiguous tensors
  double input_scale = 1.0;  // stddev of q and k (large values stress the softmax)
  uint64_t seed = 1;

  bool is_varlen() const { return !varlen_q.empty(); }
  DType output_dtype() const { return out_dtype.value_or(dtype); }
  int32_t sequences() const { return is_varlen() ? static_cast<int32_t>(varlen_q.size()) : batch; }

  // The window as the backend sees it: causal is window_right = 0.
  int32_t effective_window_right() const { return causal ? 0 : window_right; }

  // A readable, gtest-safe name ([A-Za-z0-9_]).
  std::string name() const {
    std::ostringstream s;
    s << dtype_name(dtype);
    if (out_dtype) s << "_out_" << dtype_name(*out_dtype);
    s << "_b" << sequences();
    if (!is_varlen()) s << "_q" << seqlen_q << "_k" << seqlen_k;
    s << "_h" << heads_q << "x" << heads_kv << "_d" << hdim_qk;
    if (hdim_v != hdim_qk) s << "v" << hdim_v;
    if (causal) s << "_causal";
    if (window_left >= 0 || window_right >= 0) {
      s << "_win" << (window_left < 0 ? std::string("inf") : std::to_string(window_left)) << "_"
        << (window_right < 0 ? std::string("inf") : std::to_string(window_right));
    }
    if (softcap > 0.0f) s << "_cap" << static_cast<int>(softcap);
    if (is_varlen()) {
      s << "_varlen";
      for (std::size_t i = 0; i < varlen_q.size(); ++i) s << "_" << varlen_q[i] << "x" << varlen_k[i];
    }
    auto lengths = [&](const char* what, const std::vector<int32_t>& used) {
      if (used.empty()) return;
      s << "_" << what;
      for (int32_t n : used) s << "_" << n;
    };
    lengths("usedq", seqused_q);
    lengths("usedk", seqused_k);
    if (sinks) s << "_sinks";
    if (alibi != Alibi::none) s << (alibi == Alibi::per_head ? "_alibi" : "_alibi_per_sequence");
    if (padding > 0) s << "_padded";
    if (input_scale != 1.0) s << "_large";
    return s.str();
  }
};

// gtest prints a case by its name (in test listings and failures) rather than as raw bytes.
inline void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name(); }

// Host buffers for a case. q, k, v, dout: random normal; out, lse, dq, dk, dv: NaN.
class AttentionData {
 public:
  explicit AttentionData(const AttentionCase& c) : case_(c) {
    if (c.is_varlen()) {
      cu_seqlens_q_ = prefix_sums(c.varlen_q);
      cu_seqlens_k_ = prefix_sums(c.varlen_k);
    }
    const int64_t b = c.batch, sq = c.seqlen_q, sk = c.seqlen_k;
    auto shape = [&](bool is_q, int32_t heads, int32_t hdim) -> std::vector<int64_t> {
      if (c.is_varlen()) return {is_q ? total_q() : total_k(), heads, hdim};
      return {b, is_q ? sq : sk, heads, hdim};
    };
    q = HostTensor(c.dtype, shape(true, c.heads_q, c.hdim_qk), c.padding);
    k = HostTensor(c.dtype, shape(false, c.heads_kv, c.hdim_qk), c.padding);
    v = HostTensor(c.dtype, shape(false, c.heads_kv, c.hdim_v), c.padding);
    out = HostTensor(c.output_dtype(), shape(true, c.heads_q, c.hdim_v), c.padding);
    dout = HostTensor(c.dtype, shape(true, c.heads_q, c.hdim_v), c.padding);
    dq = HostTensor(c.dtype, shape(true, c.heads_q, c.hdim_qk), c.padding);
    dk = HostTensor(c.dtype, shape(false, c.heads_kv, c.hdim_qk), c.padding);
    dv = HostTensor(c.dtype, shape(false, c.heads_kv, c.hdim_v), c.padding);
    lse = c.is_varlen() ? HostTensor(DType::f32, {c.heads_q, total_q()})
                        : HostTensor(DType::f32, {b, c.heads_q, sq});
    q.fill_normal(c.seed * 8 + 1, c.input_scale);
    k.fill_normal(c.seed * 8 + 2, c.input_scale);
    v.fill_normal(c.seed * 8 + 3);
    dout.fill_normal(c.seed * 8 + 4);
    out.fill_nan();
    lse.fill_nan();
    dq.fill_nan();
    dk.fill_nan();
    dv.fill_nan();
    if (c.sinks) {
      // Around the size of a score (stddev 2): some rows are dominated by their sink, some not.
      HostTensor draw(DType::f32, {c.heads_q});
      draw.fill_normal(c.seed * 8 + 5, 2.0);
      for (int64_t h = 0; h < c.heads_q; ++h) sinks.push_back(static_cast<float>(draw.get(h)));
      dsinks.assign(static_cast<std::size_t>(c.heads_q), std::numeric_limits<float>::quiet_NaN());
    }
    if (c.alibi != AttentionCase::Alibi::none) {
      // |N(0, 0.3)| + 0.01: a bias from a few hundredths to ~1 per key of distance, so that
      // near keys dominate some rows and not others.
      const int64_t rows = c.alibi == AttentionCase::Alibi::per_head ? 1 : c.sequences();
      HostTensor draw(DType::f32, {rows * c.heads_q});
      draw.fill_normal(c.seed * 8 + 6, 0.3);
      for (int64_t n = 0; n < rows * c.heads_q; ++n)
        alibi_slopes.push_back(static_cast<float>(std::fabs(draw.get(n)) + 0.01));
    }
  }

  const AttentionCase& spec() const { return case_; }
  int64_t total_q() const { return cu_seqlens_q_.empty() ? int64_t{case_.batch} * case_.seqlen_q : cu_seqlens_q_.back(); }
  int64_t total_k() const { return cu_seqlens_k_.empty() ? int64_t{case_.batch} * case_.seqlen_k : cu_seqlens_k_.back(); }
  const std::vector<int32_t>& cu_seqlens_q() const { return cu_seqlens_q_; }
  const std::vector<int32_t>& cu_seqlens_k() const { return cu_seqlens_k_; }

  // The problem the API layer would build for hfa::forward(q, k, v, out, &lse, options).
  detail::ForwardProblem forward_problem() {
    const AttentionCase& c = case_;
    detail::ForwardProblem p;
    p.dtype = c.dtype;
    p.out_dtype = c.output_dtype();
    p.batch = c.sequences();
    p.seqlen_q = c.is_varlen() ? max_of(c.varlen_q) : c.seqlen_q;
    p.seqlen_k = c.is_varlen() ? max_of(c.varlen_k) : c.seqlen_k;
    p.heads_q = c.heads_q;
    p.heads_kv = c.heads_kv;
    p.hdim_qk = c.hdim_qk;
    p.hdim_v = c.hdim_v;
    if (c.is_varlen()) {
      p.cu_seqlens_q = cu_seqlens_q_.data();
      p.cu_seqlens_k = cu_seqlens_k_.data();
      p.total_q = total_q();
      p.total_k = total_k();
    }
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.out = out.data();
    p.q_stride = strides_of(q);
    p.k_stride = strides_of(k);
    p.v_stride = strides_of(v);
    p.out_stride = strides_of(out);
    p.lse = static_cast<float*>(lse.data());
    p.lse_batch_stride = c.is_varlen() ? 0 : lse.stride(0);
    p.lse_head_stride = c.is_varlen() ? lse.stride(0) : lse.stride(1);
    if (c.sinks) p.sinks = sinks.data();
    if (c.alibi != AttentionCase::Alibi::none) {
      p.vectors.alibi_slopes.data = alibi_slopes.data();
      p.vectors.alibi_slopes.head_stride = 1;
      if (c.alibi == AttentionCase::Alibi::per_sequence_head)
        p.vectors.alibi_slopes.batch_stride = c.heads_q;
    }
    if (!c.seqused_q.empty()) p.seqused_q = c.seqused_q.data();
    if (!c.seqused_k.empty()) p.seqused_k = c.seqused_k.data();
    p.softmax_scale = c.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(c.hdim_qk)));
    p.softcap = c.softcap;
    p.window_left = c.window_left;
    p.window_right = c.effective_window_right();
    p.causal = c.causal;
    return p;
  }

  // The backward over the same buffers; out and lse are what the forward wrote.
  detail::BackwardProblem backward_problem() {
    detail::BackwardProblem p;
    p.fwd = forward_problem();
    p.dout = dout.data();
    p.dq = dq.data();
    p.dk = dk.data();
    p.dv = dv.data();
    p.dout_stride = strides_of(dout);
    p.dq_stride = strides_of(dq);
    p.dk_stride = strides_of(dk);
    p.dv_stride = strides_of(dv);
    if (case_.sinks) p.dsinks = dsinks.data();
    return p;
  }

  // Whether query (key) token t of the q (k) tensors is used: inside seqused of its sequence.
  std::vector<bool> used_tokens(bool queries) const {
    const AttentionCase& c = case_;
    const std::vector<int32_t>& used = queries ? c.seqused_q : c.seqused_k;
    const std::vector<int32_t>& cu = queries ? cu_seqlens_q_ : cu_seqlens_k_;
    const int64_t total = queries ? total_q() : total_k();
    std::vector<bool> result(static_cast<std::size_t>(total), true);
    if (used.empty()) return result;
    for (int64_t b = 0; b < c.sequences(); ++b) {
      const int64_t begin = c.is_varlen() ? cu[b] : b * (queries ? c.seqlen_q : c.seqlen_k);
      const int64_t end = c.is_varlen() ? cu[b + 1] : begin + (queries ? c.seqlen_q : c.seqlen_k);
      for (int64_t t = begin + used[b]; t < end; ++t) result[t] = false;
    }
    return result;
  }

  HostTensor q, k, v, out, lse, dout, dq, dk, dv;
  std::vector<float> sinks, dsinks;  // (heads_q) when the case has sinks; dsinks starts NaN
  std::vector<float> alibi_slopes;   // (heads_q) or (sequences, heads_q), as the case says
  // The slope of sequence b's head h.
  float alibi_slope(int64_t b, int64_t h) const {
    if (alibi_slopes.empty()) return 0.0f;
    return alibi_slopes[static_cast<std::size_t>(
        (case_.alibi == AttentionCase::Alibi::per_head ? 0 : b * case_.heads_q) + h)];
  }

 private:
  static std::vector<int32_t> prefix_sums(const std::vector<int32_t>& lengths) {
    std::vector<int32_t> sums{0};
    for (int32_t length : lengths) sums.push_back(sums.back() + length);
    return sums;
  }
  static int32_t max_of(const std::vector<int32_t>& values) {
    int32_t result = 0;
    for (int32_t value : values) result = std::max(result, value);
    return result;
  }
  // (batch, row, head) strides of a (b, s, h, d) or varlen (total, h, d) tensor.
  static detail::Strides strides_of(const HostTensor& t) {
    if (t.shape().size() == 3) return {0, t.stride(0), t.stride(1)};
    return {t.stride(0), t.stride(1), t.stride(2)};
  }

  AttentionCase case_;
  std::vector<int32_t> cu_seqlens_q_;
  std::vector<int32_t> cu_seqlens_k_;
};

}  // namespace hfa::test
