// Pieces shared by the tiled forward and backward: tile sizes, the score transform into the
// exp2 domain, moving row blocks between tensors and fp32 tiles, and masking.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/problem.hpp"
#include "common/score_policy.hpp"
#include "cpu/kernels.hpp"
#include "cpu/logit_mods.hpp"
#include "cpu/sequence.hpp"
#include "cpu/thread_pool.hpp"

namespace hfa::cpu {

// Tile sizes. Query tiles are 64 wide: one row of four zmm vectors in the gemm micro-kernel.
// Key tiles trade the per-tile softmax bookkeeping against the L1/L2 footprint. A forward work
// item holds up to 4 query tiles that share each K/V tile (converting 16-bit K/V once per
// block instead of once per tile saved a fifth of the bf16 time), about 400 KB of L2 at d 128.
constexpr int kForwardQueryRows = 64;
constexpr int kForwardKeys = 128;
constexpr int kForwardQueryTilesPerItem = 4;
// A backward block is 64 query rows × 128 keys: 128-key tiles ran 3-10 % faster than 64-key
// ones (half the Q/dO loads and dQ read-modify-writes a key) with the five products' operands
// (480 KB at d 128) still in L2.
constexpr int kBackwardQueryRows = 64;
constexpr int kBackwardKeys = 128;

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;
constexpr float kInfinity = std::numeric_limits<float>::infinity();

// Scores in the exp2 domain: x = log2(e)·s with s = scale·q·k, or log2(e)·softcap·tanh(s/softcap):
// the logit unit (policy::score_unit: the scale, or the softcap) times log2(e). Its first factor
// is folded into the packed Q (or K): the whole of it, or, under a softcap, the prescale
// scale/softcap, so that the tile arrives as the argument of policy::SoftcapLog2, which leaves it
// in the exp2 domain.
struct ScoreTransform {
  float qk_factor;              // multiplies q·k
  policy::SoftcapLog2 softcap;  // cap_log2 = softcap·log2(e); 0 = off

  explicit ScoreTransform(const detail::ForwardProblem& p)
      : qk_factor(p.softcap > 0.0f ? p.softmax_scale / p.softcap : unit_log2(p)),
        softcap{p.softcap > 0.0f ? unit_log2(p) : 0.0f} {}
  bool softcapped() const { return softcap.cap_log2 > 0.0f; }

 private:
  static float unit_log2(const detail::ForwardProblem& p) {
    return static_cast<float>(policy::score_unit(p.softmax_scale, p.softcap) * kLog2e);
  }
};

// The score policy's modifiers of one (sequence, head) on runs of scores in the exp2 domain, in
// the policy's order (policy::ScoreMods): the softcap, a run at a time by the SIMD kernel in
// SoftcapLog2's form, then ALiBi (policy::Alibi, its slope in the exp2 domain's units: times
// log2(e)). The forward runs them down a key's column of queries, the backward along a query's
// row of keys.
class TileMods {
 public:
  TileMods(const detail::ForwardProblem& p, const Kernels& kernels, const ScoreTransform& transform,
           int64_t b, int64_t h, const Sequence& seq)
      : kernels_(kernels),
        transform_(transform),
        alibi_{static_cast<float>(alibi_slope(p, b, h) * kLog2e)},
        diagonal_(static_cast<int>(seq.seqlen_k - seq.seqlen_q)) {}

  bool on() const { return transform_.softcapped() || alibi_.slope_in_units != 0.0f; }
  // Keys [j_first, j_first + n) of row i; tanh_out (may be null) gets the softcap's tanh.
  void row(float* x, float* tanh_out, int n, int64_t i, int64_t j_first) const {
    if (transform_.softcapped()) kernels_.softcap(x, tanh_out, n, transform_.softcap.cap_log2);
    if (alibi_.slope_in_units == 0.0f) return;
    for (int c = 0; c < n; ++c) x[c] = alibi_.score(x[c], at(i, j_first + c));
  }
  // Rows [i_first, i_first + n) of key j (a column of transposed scores).
  void column(float* x, int n, int64_t i_first, int64_t j) const {
    if (transform_.softcapped()) kernels_.softcap(x, nullptr, n, transform_.softcap.cap_log2);
    if (alibi_.slope_in_units == 0.0f) return;
    for (int c = 0; c < n; ++c) x[c] = alibi_.score(x[c], at(i_first + c, j));
  }

 private:
  policy::ScorePosition at(int64_t i, int64_t j) const {
    return {static_cast<int>(i), static_cast<int>(j), diagonal_};
  }
  const Kernels& kernels_;
  const ScoreTransform& transform_;
  policy::Alibi alibi_;  // slope 0: none
  int diagonal_;
};

// LSE (natural log) into the exp2 domain as a shift for exp2((x − high) − low), carried as two
// floats: one rounding of lse·log2(e) would cost up to 4e-6 relative in P when |lse| ~ 100.
// A row that saw no key (LSE −inf) gets +inf, so that its probabilities come out 0, not NaN.
struct Exp2Shift {
  float high, low;
};
inline Exp2Shift lse_to_exp2_shift(float lse) {
  if (lse == -kInfinity) return {kInfinity, 0.0f};
  const double shift = static_cast<double>(lse) * kLog2e;
  const auto high = static_cast<float>(shift);
  return {high, static_cast<float>(shift - high)};
}

// Carves consecutive 64-byte aligned pieces out of one scratch block (or, with a null block,
// only counts the floats they need).
class ScratchCarver {
 public:
  explicit ScratchCarver(float* block) : next_(block) {}
  float* take(std::size_t count) {
    float* piece = next_;
    used_ += scratch_floats(count);
    if (next_ != nullptr) next_ += scratch_floats(count);
    return piece;
  }
  std::size_t used() const { return used_; }

 private:
  float* next_;
  std::size_t used_ = 0;
};

using InputRows = Rows<const std::byte>;

// rows [first, first + count) × cols of a tensor as fp32 with leading dimension `ld`: the tensor
// itself when it is f32 (no copy), else converted into buffer.
struct FloatBlock {
  const float* data;
  int ld;
};

inline FloatBlock load_block(const Kernels& kernels, DType dtype, const InputRows& rows,
                             int64_t first, int count, int cols, float* buffer) {
  if (dtype == DType::f32 && rows.row_bytes % static_cast<int64_t>(sizeof(float)) == 0) {
    return {reinterpret_cast<const float*>(rows.row(first)),
            static_cast<int>(rows.row_bytes / static_cast<int64_t>(sizeof(float)))};
  }
  for (int r = 0; r < count; ++r) kernels.load(dtype, rows.row(first + r), cols, 1.0f, buffer + static_cast<int64_t>(r) * cols);
  return {buffer, cols};
}

// The input rows of one (batch, query head): q's, and k's and v's of its kv head.
struct HeadInputs {
  InputRows q, k, v;

  HeadInputs(const detail::ForwardProblem& p, int64_t b, int64_t h, const Sequence& seq) {
    const int64_t h_kv = h / (p.heads_q / p.heads_kv);
    q = rows_of(p.q, p.dtype, p.q_stride, b, seq.q_begin, h);
    k = rows_of(p.k, p.dtype, p.k_stride, b, seq.k_begin, h_kv);
    v = rows_of(p.v, p.dtype, p.v_stride, b, seq.k_begin, h_kv);
  }
};

// Asks the caches for the next tile's rows, [first, min(first + tile, end)) of `row_bytes`
// each, ahead of their use: tiles stream from L3 or memory, and the loads that convert them
// otherwise wait on every miss. Nothing when first >= end (no next tile).
inline void prefetch_tile(const InputRows& rows, int64_t first, int64_t end, int tile,
                          int64_t row_bytes) {
  constexpr int64_t kCacheLine = 64;
  for (int64_t i = first; i < std::min(end, first + tile); ++i) {
    const std::byte* row = rows.row(i);
    for (int64_t offset = 0; offset < row_bytes; offset += kCacheLine) __builtin_prefetch(row + offset);
  }
}

// dst[c·ld + r] = factor·(row first + r)[c]: a transposed, scaled copy through one staging row.
inline void load_transposed(const Kernels& kernels, DType dtype, const InputRows& rows,
                            int64_t first, int count, int cols, float factor, float* staging,
                            float* dst, int ld) {
  for (int r = 0; r < count; ++r) {
    kernels.load(dtype, rows.row(first + r), cols, factor, staging);
    for (int c = 0; c < cols; ++c) dst[static_cast<int64_t>(c) * ld + r] = staging[c];
  }
}

// Sets x[j] = −inf outside the visible columns [visible_first, visible_last] (may be empty).
// Two fills rather than a test per element: diagonal tiles are masked row after row.
inline void mask_outside(float* x, int n, int64_t visible_first, int64_t visible_last) {
  const int64_t first = std::clamp<int64_t>(visible_first, 0, n);
  const int64_t end = std::clamp<int64_t>(visible_last + 1, first, n);
  std::fill(x, x + first, -kInfinity);
  std::fill(x + end, x + n, -kInfinity);
}

}  // namespace hfa::cpu
