// The score/mask policy: what happens to a score between Q·Kᵀ and the softmax, and which
// (query, key) pairs exist at all, stated once for every kernel (sm90 forward, backward, decode)
// and, host/device, for the CPU backend and its float64 oracle.
//
// A policy is chosen at compile time by the kernel list (kernel_list.def) per instantiation, so
// a kernel pays only for what it was compiled with. It has two parts:
//   - the score modifiers, ScoreMods<Cap, Bias>, applied in order to each score of a tile: none,
//     Softcap or Alibi on the GPU (ListedMods; both at once on the CPU only, Alibi after the
//     softcap);
//   - the mask rule: which key blocks a query block visits, whether a visited block needs
//     element masking, and the element mask. Today the window rule (causal, sliding, varlen
//     bounds: WindowRule; the kernels' switch kWindowed); BlockSparse below adds block lists
//     and per-block bit masks on top of it.
// Plus the rows' sinks (SinkLogit), a term of the softmax's denominator. The sm90 kernels apply
// the modifiers in one place each (sm90/common/score_mods.cuh says where) and the rule through
// sm90/common/window.cuh. Adding a modifier is one component here plus one option field
// (problem.hpp → Params).
//
// Units. The kernels multiply a score by scale_log2 inside the softmax's exp2 (the scale is not
// applied to the tile itself), so a modifier works in the tile's units: q·k without a softcap,
// tanh(q·k·scale/c) with one (scale_log2 = c·log2(e) then). A bias b in logits becomes b / unit
// in these units, unit = softmax_scale, or c under a softcap (score_unit below).
//
// The CPU backend uses the same pieces. Its window (cpu/sequence.hpp's KeyWindow: the oracle's,
// the tiled kernels' and the KV-cache forward's) is window_first_key/window_last_key and their
// inverses, clamped by clamp_window and to the sequence; the KV-cache oracle tests WindowRule
// pair by pair. Its scalar paths, the float64 oracle with its fp32 peer and the KV-cache forward
// (cpu/logit_mods.hpp), apply ScoreMods to the logit s = scale·q·k: ALiBi in logits, the softcap
// as c·tanh(s/c) in the score's precision (Softcap's float exponent factor, ~1e-8 relative,
// would show in the oracle's float64 checks) with Softcap's derivative for the backward's factor.
// The tiled kernels (cpu/tiled_common.hpp) keep their folding (scale into Q, c·log2(e) after:
// SoftcapLog2's form, a SIMD tanh) and apply the softcap and then Alibi per tile, as the GPU does.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/host_device.hpp"

namespace hfa::policy {

// ---- Where a score sits ---------------------------------------------------------------------

// Query i and key j of one sequence (varlen: relative to the sequence's start) and the offset
// of the bottom-right aligned diagonal: query i faces key i + diagonal (seqlen_k − seqlen_q).
struct ScorePosition {
  int query;
  int key;
  int diagonal;
  HFA_HD int distance() const {  // |i + seqlen_k − seqlen_q − j|: ALiBi's distance
    const int d = query + diagonal - key;
    return d < 0 ? -d : d;
  }
};

inline constexpr float kLog2e = 1.4426950408889634f;

// The logit unit of the tile's scores (see the header comment).
HFA_HD inline float score_unit(float softmax_scale, float softcap) {
  return softcap > 0.0f ? softcap : softmax_scale;
}

// ---- Score modifiers ------------------------------------------------------------------------
// Each has kPositional (whether its score needs the ScorePosition: the kernels compute no
// coordinates otherwise, so a position-free policy compiles to the code it had before),
// kScalesGrad (whether the backward multiplies dS by its derivative), score(s, at), and
// derivative(t) at its own output t. On the device a score is a float; the host also takes
// double (the oracle).

// Scores pass unchanged.
struct NoScoreMod {
  static constexpr bool kPositional = false;
  static constexpr bool kScalesGrad = false;
  template <typename T>
  HFA_HD T score(T s, const ScorePosition&) const {
    return s;
  }
  template <typename T>
  HFA_HD T derivative(T) const {
    return T(1);
  }
};

// Softcap (Gemma 2, Grok): s → c·tanh(s·scale/c). The factor c moves into scale_log2, so the
// tile's score becomes tanh(s·prescale), prescale = softmax_scale / c; its derivative in the
// tile's units is 1 − tanh² (taken before any mask: at −inf it would be NaN).
// tanh(x) = 1 − 2/(2^(2·log2(e)·x) + 1): on the GPU one MUFU exp2 and one reciprocal, each
// within a few ulp; tanh.approx.f32 errs by up to 2^-11, which c (30-50) turns into ~2 % on a
// probability, and the reciprocal by Newton steps on the FMA pipes was 5-12 % slower and spilled
// more (docs/decisions/021). Saturates to ±1 for large |x|.
struct Softcap {
  static constexpr bool kPositional = false;
  static constexpr bool kScalesGrad = true;
  static constexpr float kTwoLog2e = 2.8853900817779268f;

  float to_exponent;  // 2·log2(e)·prescale

  HFA_HD static Softcap from_prescale(float prescale) { return {prescale * kTwoLog2e}; }

  template <typename T>
  HFA_HD T score(T s, const ScorePosition& = {}) const {
#if defined(__CUDA_ARCH__)
    static_assert(std::is_same_v<T, float>, "device scores are fp32");
    return 1.0f - __fdividef(2.0f, exp2f(s * to_exponent) + 1.0f);
#else
    return T(1) - T(2) / (std::exp2(s * T(to_exponent)) + T(1));
#endif
  }
  template <typename T>
  HFA_HD T derivative(T tanh_value) const {
#if defined(__CUDA_ARCH__)
    return fmaf(-tanh_value, tanh_value, 1.0f);
#else
    return std::fma(-tanh_value, tanh_value, T(1));
#endif
  }
};

// Softcap in the decode kernels' form: one kernel serves both (a uniform runtime branch, which
// skips masked scores: they stay −inf), the score arrives as s·softmax_scale/c and leaves in the
// log2 domain, c·log2(e)·tanh(x), through the library's tanhf.
struct SoftcapLog2 {
  static constexpr bool kPositional = false;
  static constexpr bool kScalesGrad = false;  // decode has no backward

  float cap_log2;  // c·log2(e)

  template <typename T>
  HFA_HD T score(T x, const ScorePosition& = {}) const {
#if defined(__CUDA_ARCH__)
    static_assert(std::is_same_v<T, float>, "device scores are fp32");
    return cap_log2 * tanhf(x);
#else
    return T(cap_log2) * std::tanh(x);
#endif
  }
};

// ALiBi (FlashAttention-2's semantics): logits get −slope·|i + seqlen_k − seqlen_q − j|, after
// the scale and after the softcap; slope_in_units is the slope in the tile's units (in_units:
// divided by score_unit). Additive: the backward's dS needs no factor.
struct Alibi {
  static constexpr bool kPositional = true;
  static constexpr bool kScalesGrad = false;

  float slope_in_units;

  HFA_HD static Alibi in_units(float slope, float unit) { return {slope / unit}; }
  HFA_HD static Alibi for_problem(float slope, float softmax_scale, float softcap) {
    return in_units(slope, score_unit(softmax_scale, softcap));
  }

  template <typename T>
  HFA_HD T score(T s, const ScorePosition& at) const {
    return s - T(slope_in_units) * T(at.distance());
  }
  // The same from the signed offset i + diagonal − j, held in a float (exact below 2^24): the
  // GPU kernels' form, one FMA whose |·| is an operand modifier in SASS.
  HFA_HD float score_at_offset(float s, float offset) const {
#if defined(__CUDA_ARCH__)
    return fmaf(-slope_in_units, fabsf(offset), s);
#else
    return std::fma(-slope_in_units, std::fabs(offset), s);
#endif
  }
  template <typename T>
  HFA_HD T derivative(T) const {
    return T(1);
  }
};

// The modifiers of a policy, in their order: a cap (NoScoreMod or Softcap: the one that may
// scale the gradient) and then a bias (NoScoreMod or Alibi: additive, positional). The backward
// keeps one factor per score, the cap's derivative at the cap's output, which the bias leaves
// alone; a second non-additive modifier would need a product of factors.
template <typename Cap = NoScoreMod, typename Bias = NoScoreMod>
struct ScoreMods {
  static_assert(!Bias::kScalesGrad, "the bias slot holds additive modifiers");
  static constexpr bool kIdentity =
      std::is_same_v<Cap, NoScoreMod> && std::is_same_v<Bias, NoScoreMod>;
  static constexpr bool kPositional = Cap::kPositional || Bias::kPositional;
  static constexpr bool kScalesGrad = Cap::kScalesGrad;

  Cap cap;
  Bias bias;

  // The tile's score of s; `factor` receives the backward's dS factor when kScalesGrad.
  template <typename T>
  HFA_HD T score(T s, const ScorePosition& at = {}) const {
    return bias.score(cap.score(s, at), at);
  }
  template <typename T>
  HFA_HD T score(T s, const ScorePosition& at, T& factor) const {
    const T capped = cap.score(s, at);
    factor = cap.derivative(capped);
    return bias.score(capped, at);
  }
  // A positional bias's GPU form (Alibi::score_at_offset): the signed offset i + diagonal − j.
  HFA_HD float score_at_offset(float s, float offset) const {
    return bias.score_at_offset(cap.score(s, ScorePosition{}), offset);
  }
};

// The modifiers the GPU kernels are compiled with (their launch's switches): none, Softcap or
// Alibi. Not both: ALiBi models (BLOOM, MPT) do not softcap and softcapped ones (Gemma 2, Grok)
// have no ALiBi, so the pair would double the kernels for no model; the sm90 backend refuses it
// by name and the CPU backend runs it.
template <bool kSoftcap, bool kAlibi = false>
using ListedMods =
    std::conditional_t<kSoftcap, ScoreMods<Softcap>,
                       std::conditional_t<kAlibi, ScoreMods<NoScoreMod, Alibi>, ScoreMods<>>>;

// ALiBi's slopes as a kernel reads them: the option's (sequence, query head) view
// (hfa_options.alibi_slopes; a stride is 0 over a dim its shape lacks) and the tile's unit
// (score_unit), so that of(b, h) is the modifier of sequence b's rows of query head h.
struct AlibiSlopes {
  const float* slopes;  // null: no ALiBi
  int64_t batch_stride;
  int64_t head_stride;
  float unit;

  HFA_HD Alibi of(int batch, int head) const {
    return Alibi::in_units(slopes[batch * batch_stride + head * head_stride], unit);
  }
};

// ---- Row terms ------------------------------------------------------------------------------

// Attention sinks: per query head one more logit (in logits, problem.hpp) that joins every row's
// softmax denominator and no value. In the kernels' log2 domain sink·log2(e); −inf without
// sinks, so that a row that sees no key still gets O = 0 and LSE = −inf.
struct SinkLogit {
  const float* sinks;  // [heads_q]; null: none
  HFA_HD float log2(int head) const { return sinks != nullptr ? sinks[head] * kLog2e : -INFINITY; }
};

// ---- The mask rule --------------------------------------------------------------------------

// The bottom-right aligned window, the one visibility rule of every kernel and of the oracle:
// query i sees key j iff j < seqlen_k and
//   (left  < 0 || j >= i + diagonal − left) and (right < 0 || j <= i + diagonal + right).
// Causal is (−1, 0); varlen bounds enter as the sequence's seqlen_q / seqlen_k (and diagonal).
// The block ranges built on it live with each backend (sm90/common/window.cuh for the GPU,
// rounded to its tiles); the bounds below are what they round.
HFA_HD inline int window_first_key(int window_left, int diagonal_key) {
  return diagonal_key - window_left;
}
HFA_HD inline int window_last_key(int window_right, int diagonal_key) {
  return diagonal_key + window_right;
}
// The inverse, for walks over the queries of a key (the backward): the first and last query that
// see key j, from the query on its diagonal (j − diagonal).
HFA_HD inline int window_first_query(int window_right, int diagonal_query) {
  return diagonal_query - window_right;
}
HFA_HD inline int window_last_query(int window_left, int diagonal_query) {
  return diagonal_query + window_left;
}
// A bound as the functions above take it: −1 (unbounded), or at most `reach` = seqlen_q +
// seqlen_k, beyond which no bound cuts off a key (the first key would be < 0 and the last >=
// seqlen_k), so that query + diagonal ± window cannot overflow an int.
HFA_HD inline int clamp_window(int window, int reach) {
  return window < 0 ? -1 : (window < reach ? window : reach);
}
struct WindowRule {
  int left;   // −1: unbounded
  int right;  // −1: unbounded
  HFA_HD bool visible(const ScorePosition& at, int seqlen_k) const {
    const int facing = at.query + at.diagonal;
    return at.key < seqlen_k && (left < 0 || at.key >= window_first_key(left, facing)) &&
           (right < 0 || at.key <= window_last_key(right, facing));
  }
};

// Block-sparse masks in FlexAttention's BlockMask layout, on top of the window rule: per
// (batch, head, query block) a list of key blocks to visit, split into full blocks (no element
// mask: full_kv_num_blocks, full_kv_indices) and partial blocks (kv_num_blocks, kv_indices),
// each partial block with one bit per (query, key) pair. The backward's transposed lists (per
// key block, the query blocks) have the same layout. The backends read the API's views
// (common/block_sparse.hpp) rather than this struct; the sm90 forward walks them as stated here
// (sm90/common/block_sparse.cuh): the walk over a BlockRange becomes a walk over the listed
// blocks, block_needs_mask becomes `partial ||` the window's test, and the element mask ANDs
// the partial block's bits into the window's.
struct BlockSparse {
  // [batch·heads·row_blocks]: how many partial / full blocks a query block visits.
  const int32_t* partial_count;
  const int32_t* full_count;
  // [batch·heads·row_blocks·max_blocks]: their key block indices, ascending.
  const int32_t* partial_blocks;
  const int32_t* full_blocks;
  // Per partial-list entry (same index as partial_blocks): block_rows × block_cols bits, row-major,
  // one 64-bit word per 64 columns of a row.
  const uint64_t* partial_bits;
  int max_blocks;   // stride of the lists
  int block_rows;   // 128 in FlexAttention's default
  int block_cols;

  // The list of one query block: batch_head = batch·heads + head.
  HFA_HD int64_t list_index(int batch_head, int row_block, int row_blocks) const {
    return static_cast<int64_t>(batch_head) * row_blocks + row_block;
  }
  // The key blocks the query block visits: full ones first, then partial ones; visit k of
  // count() gives the key block and whether it needs its bits.
  struct Visit {
    int block;
    bool partial;
    int64_t bits_entry;  // index into partial_bits' blocks when partial
  };
  HFA_HD int count(int64_t list) const { return full_count[list] + partial_count[list]; }
  HFA_HD Visit visit(int64_t list, int k) const {
    const int full = full_count[list];
    if (k < full) return {full_blocks[list * max_blocks + k], false, -1};
    const int64_t entry = list * max_blocks + (k - full);
    return {partial_blocks[entry], true, entry};
  }
  // The bit of (row, column) inside a partial block, both relative to the block.
  HFA_HD bool visible(int64_t bits_entry, int row, int column) const {
    const int words_per_row = (block_cols + 63) / 64;
    const uint64_t* block = partial_bits + bits_entry * block_rows * words_per_row;
    return (block[row * words_per_row + column / 64] >> (column % 64)) & 1u;
  }
};

}  // namespace hfa::policy
