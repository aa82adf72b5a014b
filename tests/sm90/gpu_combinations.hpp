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

}  // namespace hfa::test
