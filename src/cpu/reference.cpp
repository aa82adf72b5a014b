#include "cpu/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/half_float.hpp"
#include "cpu/logit_mods.hpp"
#include "cpu/sequence.hpp"
#include "cpu/thread_pool.hpp"
#include "quant/e4m3.hpp"

namespace hfa::cpu {
namespace {

using detail::BackwardProblem;
using detail::ForwardProblem;

double to_double(DType dtype, const std::byte* row, int64_t c) {
  switch (dtype) {
    case DType::f32: {
      float value;
      std::memcpy(&value, row + 4 * c, sizeof value);
      return value;
    }
    case DType::f16:
    case DType::bf16: {
      uint16_t bits;
      std::memcpy(&bits, row + 2 * c, sizeof bits);
      return dtype == DType::f16 ? detail::fp16_to_float(bits) : detail::bf16_to_float(bits);
    }
    case DType::e4m3: return quant::e4m3_decode(static_cast<uint8_t>(row[c]));
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}

// value as `dtype` (f32, f16, bf16) holds it.
float round_to_dtype(DType dtype, float value) {
  switch (dtype) {
    case DType::f16: return detail::fp16_to_float(detail::float_to_fp16(value));
    case DType::bf16: return detail::bf16_to_float(detail::float_to_bf16(value));
    default: return value;
  }
}

// rows × cols of one (batch, head) of a strided tensor, as a dense matrix of Real. FP8 codes are
// multiplied by their descale (in float64: the oracle of every FP8 forward).
template <class Real>
std::vector<Real> read_matrix(const void* data, DType dtype, const detail::Strides& strides,
                                int64_t b, int64_t token_begin, int64_t head, int64_t rows,
                                int64_t cols, const detail::ScaleView& descale = {}) {
  const auto source = rows_of(data, dtype, strides, b, token_begin, head);
  std::vector<Real> matrix(static_cast<std::size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    const double scale = detail::scale_at(descale, int(b), int(i), int(head));
    for (int64_t c = 0; c < cols; ++c) {
      matrix[i * cols + c] = static_cast<Real>(to_double(dtype, source.row(i), c) * scale);
    }
  }
  return matrix;
}

// Index of token row i of sequence b in a contiguous (batch, seqlen, heads, dim) or
// (total, heads, dim) array.
int64_t token_index(const ForwardProblem& p, int64_t b, int64_t seqlen, int64_t begin, int64_t i) {
  return p.is_varlen() ? begin + i : b * seqlen + i;
}

// The attention of one query head of one sequence, computed in Real.
template <class Real>
struct HeadAttention {
  const ForwardProblem& p;
  Sequence seq;
  KeyWindow window;
  std::vector<Real> q, k, v;  // (seqlen, hdim)
  LogitMods mods;
  bool has_sink = false;
  Real sink = 0;  // the head's sink logit, when has_sink
  int64_t batch_index = 0, head = 0;

  HeadAttention(const ForwardProblem& problem, int64_t b, int64_t head_q)
      : p(problem), seq(sequence_of(problem, b)), window(problem, seq),
        mods(p, b, head_q),
        batch_index(b), head(head_q) {
    has_sink = p.sinks != nullptr;
    if (has_sink) sink = static_cast<Real>(p.sinks[head_q]);
    const int64_t head_kv = head_q / (p.heads_q / p.heads_kv);
    q = read_matrix<Real>(p.q, p.dtype, p.q_stride, b, seq.q_begin, head_q, seq.seqlen_q, p.hdim_qk,
                          p.q_descale);
    k = read_matrix<Real>(p.k, p.dtype, p.k_stride, b, seq.k_begin, head_kv, seq.seqlen_k, p.hdim_qk,
                          p.k_descale);
    v = read_matrix<Real>(p.v, p.dtype, p.v_stride, b, seq.k_begin, head_kv, seq.seqlen_k, p.hdim_v,
                          p.v_descale);
  }

  // The logit of (i, j) before the softmax, the modifiers' (LogitMods) on scale·q·k; factor
  // gets the backward's dS factor of the score.
  Real score(int64_t i, int64_t j, Real& factor) const {
    Real s = 0;
    for (int64_t c = 0; c < p.hdim_qk; ++c) s += q[i * p.hdim_qk + c] * k[j * p.hdim_qk + c];
    s *= static_cast<Real>(p.softmax_scale);
    const policy::ScorePosition at{static_cast<int>(i), static_cast<int>(j),
                                   static_cast<int>(seq.seqlen_k - seq.seqlen_q)};
    return mods.logit(s, at, factor);
  }

  // Whether the block-sparse mask lets row i see key j, by the definition in hfa/options.def:
  // j's key block listed among i's query block's full blocks, or among its partial ones with
  // the pair's bit set, in the mask's coordinates (packed: the sequence's first tokens added).
  // Read pair by pair from the lists, apart from the tiled kernels' walk.
  bool block_mask_sees(int64_t i, int64_t j) const {
    const detail::BlockSparse& s = p.block_sparse;
    if (!s) return true;
    const detail::BlockSparse::Origin o = s.origin(batch_index, seq.q_begin, seq.k_begin);
    const int64_t row = o.row + i, key = o.key + j;
    const int64_t m = row / s.block_q, key_block = key / s.block_kv;
    const int64_t b = o.batch;
    if (s.full_kv_num_blocks) {
      for (int32_t slot = 0; slot < *s.full_kv_num_blocks.at(b, head, m); ++slot)
        if (*s.full_kv_indices.at(b, head, m, slot) == key_block) return true;
    }
    for (int32_t slot = 0; slot < *s.kv_num_blocks.at(b, head, m); ++slot) {
      if (*s.kv_indices.at(b, head, m, slot) != key_block) continue;
      const int64_t r = row % s.block_q, c = key % s.block_kv;
      const int64_t words_per_row = (s.block_kv + 31) / 32;
      const int64_t word = (slot * s.block_q + r) * words_per_row + c / 32;
      const auto bits = static_cast<uint32_t>(*s.kv_mask_bits.at(b, head, m, word));
      return ((bits >> (c % 32)) & 1u) != 0;
    }
    return false;
  }

  // Softmax probabilities of row i over its visible keys [first, last] (p[j − first]), with the
  // dS factor of each score; returns the log-sum-exp. A sink is one more logit in the denominator
  // (no entry in prob: it has no value vector). A row that sees nothing gets the sink's logit
  // as its LSE, or −inf without a sink.
  Real probabilities(int64_t i, std::vector<Real>& prob, std::vector<Real>& factor) const {
    const int64_t first = window.first(i), last = window.last(i);
    const int64_t count = std::max<int64_t>(0, last - first + 1);
    prob.assign(static_cast<std::size_t>(count), Real{0});
    factor.assign(static_cast<std::size_t>(count), Real{0});
    const Real no_logit = -std::numeric_limits<Real>::infinity();
    if (count == 0) return has_sink ? sink : no_logit;
    Real max_score = has_sink ? sink : no_logit;
    bool sees_some = false;  // the block-sparse mask may hide every key of the window
    for (int64_t j = 0; j < count; ++j) {
      if (!block_mask_sees(i, first + j)) {
        prob[j] = no_logit;  // exp gives 0 below
        continue;
      }
      prob[j] = score(i, first + j, factor[j]);
      max_score = std::max(max_score, prob[j]);
      sees_some = true;
    }
    if (!sees_some) {
      std::fill(prob.begin(), prob.end(), Real{0});
      return has_sink ? sink : no_logit;
    }
    // max_score is finite here (a score is); exp(−inf − max) = 0 for a sink of −inf.
    Real sum = has_sink ? std::exp(sink - max_score) : Real{0};
    for (Real& x : prob) sum += (x = std::exp(x - max_score));
    for (Real& x : prob) x /= sum;
    return max_score + std::log(sum);
  }
};

// prob as the peer's tensor cores would see it (reference_forward_f32's rounding). Returns what
// the rounding adds to the row's LSE: e4m3 weights are also their own denominator (the FP8
// forward sums the probabilities it rounded, P·1 on its tensor cores), so they are renormalized,
// the sink's share (1 − Σ prob) kept as it was.
template <class Real>
Real round_probabilities(std::vector<Real>& prob, DType dtype, ProbabilityRounding rounding) {
  if (rounding == ProbabilityRounding::input_dtype) {
    for (Real& x : prob) x = static_cast<Real>(round_to_dtype(dtype, static_cast<float>(x)));
  } else if (rounding == ProbabilityRounding::e4m3 && !prob.empty()) {
    const Real largest = *std::max_element(prob.begin(), prob.end());
    if (!(largest > 0)) return Real{0};
    const Real to_range = Real{256} / largest;
    Real exact = 0, kept = 0;
    for (Real& x : prob) {
      exact += x;
      x = static_cast<Real>(quant::e4m3_decode(quant::e4m3_encode(static_cast<float>(x * to_range)))) /
          to_range;
      kept += x;
    }
    const Real total = kept + (Real{1} - exact);
    for (Real& x : prob) x /= total;
    return std::log(total);
  }
  return Real{0};
}

template <class Real>
void forward(const ForwardProblem& p, Real* out, Real* lse,
             ProbabilityRounding rounding = ProbabilityRounding::none) {
  ThreadPool::shared().parallel_for(int64_t{p.batch} * p.heads_q, [&](int64_t item, int) {
    const int64_t b = item / p.heads_q, h = item % p.heads_q;
    const HeadAttention<Real> head(p, b, h);
    std::vector<Real> prob, factor;
    for (int64_t i = 0; i < head.seq.seqlen_q; ++i) {
      Real row_lse = head.probabilities(i, prob, factor);
      row_lse += round_probabilities(prob, p.dtype, rounding);
      const int64_t token = token_index(p, b, p.seqlen_q, head.seq.q_begin, i);
      Real* out_row = out + (token * p.heads_q + h) * p.hdim_v;
      for (int64_t c = 0; c < p.hdim_v; ++c) {
        Real sum = 0;
        for (std::size_t j = 0; j < prob.size(); ++j) {
          sum += prob[j] * head.v[(head.window.first(i) + static_cast<int64_t>(j)) * p.hdim_v + c];
        }
        out_row[c] = sum;
      }
      if (lse != nullptr) {
        const int64_t index = p.is_varlen() ? h * p.total_q + token
                                            : (b * p.heads_q + h) * p.seqlen_q + i;
        lse[index] = row_lse;
      }
    }
  });
}

template <class Real>
void backward(const BackwardProblem& problem, Real* dq, Real* dk, Real* dv, Real* dsinks,
              bool round_operands = false) {
  const ForwardProblem& p = problem.fwd;
  const int64_t group = p.heads_q / p.heads_kv;
  // dL/dsink of each (batch, head), summed over the batch after the parallel part so that the
  // order of the sum does not depend on the threads.
  const bool want_dsinks = dsinks != nullptr && p.sinks != nullptr;
  std::vector<Real> dsink_parts(want_dsinks ? static_cast<std::size_t>(p.batch) * p.heads_q : 0);
  // One item per (batch, kv head): it owns dk and dv of that head and dq of its query heads.
  ThreadPool::shared().parallel_for(int64_t{p.batch} * p.heads_kv, [&](int64_t item, int) {
    const int64_t b = item / p.heads_kv, h_kv = item % p.heads_kv;
    const Sequence seq = sequence_of(p, b);
    auto dq_row = [&](int64_t h, int64_t i) {
      return dq + (token_index(p, b, p.seqlen_q, seq.q_begin, i) * p.heads_q + h) * p.hdim_qk;
    };
    auto dk_row = [&](int64_t j) {
      return dk + (token_index(p, b, p.seqlen_k, seq.k_begin, j) * p.heads_kv + h_kv) * p.hdim_qk;
    };
    auto dv_row = [&](int64_t j) {
      return dv + (token_index(p, b, p.seqlen_k, seq.k_begin, j) * p.heads_kv + h_kv) * p.hdim_v;
    };
    // Every allocated row: the gradient of a key beyond seqused_k (and of a query row beyond
    // seqused_q, below) is 0.
    for (int64_t j = 0; j < seq.allocated_k; ++j) {
      std::fill(dk_row(j), dk_row(j) + p.hdim_qk, Real{0});
      std::fill(dv_row(j), dv_row(j) + p.hdim_v, Real{0});
    }
    for (int64_t h = h_kv * group; h < (h_kv + 1) * group; ++h) {
      for (int64_t i = seq.seqlen_q; i < seq.allocated_q; ++i) {
        std::fill(dq_row(h, i), dq_row(h, i) + p.hdim_qk, Real{0});
      }
    }
    const Real scale = p.softmax_scale;
    std::vector<Real> prob, factor, dprob;
    for (int64_t h = h_kv * group; h < (h_kv + 1) * group; ++h) {
      const HeadAttention<Real> head(p, b, h);
      const std::vector<Real> dout =
          read_matrix<Real>(problem.dout, p.dtype, problem.dout_stride, b, seq.q_begin, h, seq.seqlen_q,
                      p.hdim_v);
      for (int64_t i = 0; i < seq.seqlen_q; ++i) {
        Real* dq_i = dq_row(h, i);
        std::fill(dq_i, dq_i + p.hdim_qk, Real{0});
        const Real row_lse = head.probabilities(i, prob, factor);
        const int64_t first = head.window.first(i);
        // dP = dO·Vᵀ, and D = Σ P∘dP (= rowsum(dO∘O)).
        dprob.assign(prob.size(), Real{0});
        Real d = 0;
        for (std::size_t jj = 0; jj < prob.size(); ++jj) {
          const int64_t j = first + static_cast<int64_t>(jj);
          for (int64_t c = 0; c < p.hdim_v; ++c) {
            dprob[jj] += dout[i * p.hdim_v + c] * head.v[j * p.hdim_v + c];
          }
          d += prob[jj] * dprob[jj];
        }
        if constexpr (std::is_same_v<Real, float>) {
          // The peer gets D the way every FlashAttention-style backward does: from the out the
          // forward stored, rounded to its dtype. So its error includes what that rounding
          // costs (visible in dsinks above all, which is fp32 and not rounded again). With
          // round_operands (the GPU kernels' peer) that out is the one the backward under test
          // is given (p.fwd.out): the same inputs for both, so that the comparison measures the
          // backward, not the forward that made out.
          d = 0;
          if (round_operands) {
            const auto given = rows_of(static_cast<const void*>(p.out), p.out_dtype, p.out_stride, b,
                                       seq.q_begin, h);
            for (int64_t c = 0; c < p.hdim_v; ++c) {
              d += dout[i * p.hdim_v + c] * static_cast<Real>(to_double(p.out_dtype, given.row(i), c));
            }
          } else {
            for (int64_t c = 0; c < p.hdim_v; ++c) {
              Real o = 0;
              for (std::size_t jj = 0; jj < prob.size(); ++jj) {
                o += prob[jj] * head.v[(first + static_cast<int64_t>(jj)) * p.hdim_v + c];
              }
              d += dout[i * p.hdim_v + c] * round_to_dtype(p.out_dtype, o);
            }
          }
        }
        // The sink's probability exp(sink − LSE) enters the loss only through the denominator:
        // dL/dsink = −P_sink·D.
        if (want_dsinks && head.has_sink && head.sink != -std::numeric_limits<Real>::infinity()) {
          dsink_parts[b * p.heads_q + h] -= std::exp(head.sink - row_lse) * d;
        }
        for (std::size_t jj = 0; jj < prob.size(); ++jj) {
          const int64_t j = first + static_cast<int64_t>(jj);
          // dL/ds for the raw score s = scale·q·k, through the softmax and the modifiers.
          Real ds = prob[jj] * (dprob[jj] - d) * factor[jj];
          Real p_operand = prob[jj];
          if (round_operands) {
            ds = static_cast<Real>(round_to_dtype(p.dtype, static_cast<float>(ds)));
            p_operand = static_cast<Real>(round_to_dtype(p.dtype, static_cast<float>(p_operand)));
          }
          Real* dk_j = dk_row(j);
          Real* dv_j = dv_row(j);
          for (int64_t c = 0; c < p.hdim_qk; ++c) {
            dq_i[c] += ds * scale * head.k[j * p.hdim_qk + c];
            dk_j[c] += ds * scale * head.q[i * p.hdim_qk + c];
          }
          for (int64_t c = 0; c < p.hdim_v; ++c) dv_j[c] += p_operand * dout[i * p.hdim_v + c];
        }
      }
    }
  });
  if (want_dsinks) {
    for (int64_t h = 0; h < p.heads_q; ++h) {
      Real sum = 0;
      for (int64_t b = 0; b < p.batch; ++b) sum += dsink_parts[b * p.heads_q + h];
      dsinks[h] = sum;
    }
  }
}

}  // namespace

void reference_forward(const ForwardProblem& p, double* out, double* lse) { forward(p, out, lse); }
void reference_backward(const BackwardProblem& p, double* dq, double* dk, double* dv,
                        double* dsinks) {
  backward(p, dq, dk, dv, dsinks);
}
void reference_forward_f32(const ForwardProblem& p, float* out, float* lse,
                           ProbabilityRounding rounding) {
  forward(p, out, lse, rounding);
}
void reference_backward_f32(const BackwardProblem& p, float* dq, float* dk, float* dv,
                            float* dsinks, bool round_operands) {
  backward(p, dq, dk, dv, dsinks, round_operands);
}

}  // namespace hfa::cpu
