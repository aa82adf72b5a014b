// The (dtype, head dims) matrix the GPU feature tests run, one gtest parameter each: every
// dtype and head-dim pair a call may have on the GPU (96 runs padded on the 128 kernels); and
// the masks and layouts the forward and backward feature tests both combine.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "common/attention_case.hpp"
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

}  // namespace hfa::test
