// The (dtype, head dims) matrix the GPU feature tests run, one gtest parameter each: every
// dtype and head-dim pair a call may have on the GPU (96 runs padded on the 128 kernels); and
// the masks and layouts the forward and backward feature tests both combine.
#pragma once

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "common/attention_case.hpp"
#include "common/expected.hpp"
#include "hfa/hfa.hpp"

namespace hfa::test {

struct HeadDims {
  int qk, v;
};

struct Combination {
  DType dtype;
  HeadDims dims;
};

inline std::string combination_name(const Combination& c) {
  std::ostringstream name;
  name << dtype_name(c.dtype) << "_d" << c.dims.qk;
  if (c.dims.v != c.dims.qk) name << "v" << c.dims.v;
  return name.str();
}

inline std::vector<Combination> combinations() {
  std::vector<Combination> result;
  for (DType dtype : {DType::bf16, DType::f16})
    for (HeadDims dims : {HeadDims{64, 64}, HeadDims{96, 96}, HeadDims{128, 128},
                          HeadDims{192, 128}, HeadDims{192, 192}, HeadDims{256, 256}}) {
      result.push_back({dtype, dims});
    }
  return result;
}

enum class Mask { none, causal, sliding, window };

inline void set_mask(AttentionCase& c, Mask mask) {
  switch (mask) {
    case Mask::none: break;
    case Mask::causal: c.causal = true; break;
    case Mask::sliding: c.causal = true, c.window_left = 64; break;
    case Mask::window: c.window_left = 37, c.window_right = 9; break;
  }
}

// Lengths that fill no tile, seqlen_q != seqlen_k, empty sequences (varlen: no queries, no
// keys; seqused: no keys) and a one-token sequence; the short layouts have fewer queries than a
// forward tile's rows (GQA groups packed: PackGQA).
enum class Layout { fixed, varlen, seqused, short_fixed, short_varlen };

inline void set_layout(AttentionCase& c, Layout layout) {
  switch (layout) {
    case Layout::fixed: c.batch = 2, c.seqlen_q = 150, c.seqlen_k = 211; break;
    case Layout::varlen:
      c.varlen_q = {70, 0, 131, 1};
      c.varlen_k = {200, 3, 131, 0};
      break;
    case Layout::seqused:
      c.batch = 2, c.seqlen_q = 150, c.seqlen_k = 211;
      c.seqused_q = {97, 150};
      c.seqused_k = {211, 0};
      break;
    case Layout::short_fixed: c.batch = 2, c.seqlen_q = 5, c.seqlen_k = 211; break;
    case Layout::short_varlen:
      c.varlen_q = {1, 0, 37, 5};
      c.varlen_k = {200, 3, 131, 0};
      break;
  }
}

// The forward feature matrix: every mask × softcap × sinks × GQA × layout for one dtype and
// head-dim pair, each case handed to visit(case, index) with its rank in the walk. GQA groups of
// 4 with fewer queries than a tile's rows (the short layouts) run packed.
template <typename Visit>
void for_each_forward_feature_case(DType dtype, HeadDims dims, Visit&& visit) {
  int index = 0;
  for (Mask mask : {Mask::none, Mask::causal, Mask::sliding, Mask::window})
    for (bool softcap : {false, true})
      for (bool sinks : {false, true})
        for (bool gqa : {false, true})
          for (Layout layout : {Layout::fixed, Layout::varlen, Layout::seqused,
                                Layout::short_fixed, Layout::short_varlen}) {
            AttentionCase c;
            c.dtype = dtype;
            c.hdim_qk = dims.qk;
            c.hdim_v = dims.v;
            c.heads_q = gqa ? 8 : 4;
            c.heads_kv = gqa ? 2 : 4;
            set_mask(c, mask);
            if (softcap) c.softcap = 4.0f;  // small enough that tanh bends the scores
            c.sinks = sinks;
            set_layout(c, layout);
            visit(c, index++);
          }
}

// ALiBi's cases, which the forward and backward tests both run: each kernel family's head dims
// (64, 128, 192/128, 256), both dtypes, slopes per head and per (sequence, head), every mask,
// seqlen_q ≠ seqlen_k both ways (the bias is bottom-right aligned), varlen and seqused, GQA and
// MQA with few queries (PackGQA: a tile's rows of several heads, each with its slope), and the
// hdim 64 windowed tiles of both sizes (short rows up to 1024 keys). A handful, not a matrix:
// the kernels' ALiBi is one code path on top of the masks the feature matrices cover.
enum class Slopes {
  bloom,         // per head, 2^(−8(h+1)/heads): the slopes of BLOOM and MPT
  steep,         // per head, 0.5 · 2^h: a bias that leaves a row its nearest keys
  per_sequence,  // per (sequence, head), random (attention_case.hpp): 0.01 to ~1
};

struct AlibiCase {
  AttentionCase c;
  Slopes slopes;
  bool deterministic = false;  // the backward's deterministic mode (its own configuration at 256)
};

inline std::vector<AlibiCase> alibi_cases() {
  auto make = [](DType dtype, int qk, int v, Mask mask, Layout layout, int heads_q, int heads_kv,
                 Slopes slopes) {
    AlibiCase a;
    AttentionCase& c = a.c;
    c.dtype = dtype;
    c.hdim_qk = qk;
    c.hdim_v = v;
    c.heads_q = heads_q;
    c.heads_kv = heads_kv;
    set_mask(c, mask);
    set_layout(c, layout);
    c.alibi = slopes == Slopes::per_sequence ? AttentionCase::Alibi::per_sequence_head
                                             : AttentionCase::Alibi::per_head;
    a.slopes = slopes;
    return a;
  };
  std::vector<AlibiCase> cases = {
      make(DType::bf16, 64, 64, Mask::causal, Layout::fixed, 4, 4, Slopes::bloom),
      make(DType::f16, 64, 64, Mask::none, Layout::short_fixed, 8, 2, Slopes::steep),
      make(DType::f16, 128, 128, Mask::none, Layout::varlen, 8, 2, Slopes::per_sequence),
      make(DType::bf16, 128, 128, Mask::window, Layout::short_fixed, 8, 1, Slopes::per_sequence),
      make(DType::bf16, 128, 128, Mask::causal, Layout::seqused, 4, 4, Slopes::steep),
      make(DType::f16, 192, 128, Mask::causal, Layout::short_varlen, 8, 2, Slopes::bloom),
      make(DType::bf16, 256, 256, Mask::sliding, Layout::varlen, 4, 2, Slopes::per_sequence),
      make(DType::f16, 256, 256, Mask::none, Layout::fixed, 2, 2, Slopes::bloom),
  };
  // More queries than keys: the first rows face keys before the first (causal: they see none).
  AlibiCase taller = make(DType::bf16, 128, 128, Mask::causal, Layout::fixed, 4, 2, Slopes::bloom);
  taller.c.seqlen_q = 211, taller.c.seqlen_k = 150;
  cases.push_back(taller);
  // hdim 64's windowed standard tile (more than 1024 keys), sinks beside the bias.
  AlibiCase longer = make(DType::bf16, 64, 64, Mask::sliding, Layout::fixed, 2, 2, Slopes::bloom);
  longer.c.batch = 1, longer.c.seqlen_q = 700, longer.c.seqlen_k = 1300;
  longer.c.window_left = 300;
  longer.c.sinks = true;
  cases.push_back(longer);
  // The backward's deterministic configuration (hdim 256, head dims split).
  AlibiCase deterministic =
      make(DType::bf16, 256, 256, Mask::causal, Layout::fixed, 4, 2, Slopes::steep);
  deterministic.deterministic = true;
  cases.push_back(deterministic);
  // The backward's 80-key tile at head dims 192 (gradients transposed; 256's is the unmasked
  // case above): varlen and seqused, GQA.
  cases.push_back(make(DType::bf16, 192, 192, Mask::none, Layout::seqused, 8, 2, Slopes::steep));
  cases.push_back(make(DType::f16, 192, 128, Mask::none, Layout::varlen, 4, 2, Slopes::per_sequence));
  for (std::size_t i = 0; i < cases.size(); ++i) cases[i].c.seed = 300 + i;
  return cases;
}

// The case's slopes in its data: the random ones attention_case.hpp drew, or the per-head ones
// `slopes` names in their place.
inline void set_slopes(AttentionData& data, Slopes slopes) {
  const int heads = data.spec().heads_q;
  for (int h = 0; h < heads && slopes != Slopes::per_sequence; ++h) {
    data.alibi_slopes[h] = slopes == Slopes::bloom ? std::exp2(-8.0f * float(h + 1) / float(heads))
                                                   : 0.5f * std::exp2(float(h));
  }
}

// How far ALiBi moves the oracle's out: the largest difference between out_ref (with the
// case's slopes) and the oracle's out with every slope 0. The ALiBi tests want it far above
// their tolerance, so that they cannot pass with the bias ignored (the backward's gradients
// follow from the same probabilities).
inline double alibi_effect_on_out(AttentionData& data, const std::vector<double>& out_ref) {
  const std::vector<float> slopes = data.alibi_slopes;
  std::fill(data.alibi_slopes.begin(), data.alibi_slopes.end(), 0.0f);
  const ForwardExpectation unbiased = expected_forward(data);
  std::copy(slopes.begin(), slopes.end(), data.alibi_slopes.begin());
  double largest = 0.0;
  for (std::size_t i = 0; i < out_ref.size(); ++i)
    largest = std::max(largest, std::fabs(out_ref[i] - unbiased.out_ref[i]));
  return largest;
}

inline const char* slopes_name(Slopes slopes) {
  return slopes == Slopes::bloom ? "bloom" : slopes == Slopes::steep ? "steep" : "per_sequence";
}

}  // namespace hfa::test
