// The (dtype, head dims) matrix the GPU feature tests run, one gtest parameter each: every
// dtype and head-dim pair a call may have on the GPU (96 runs padded on the 128 kernels).
#pragma once

#include <sstream>
#include <string>
#include <vector>

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

}  // namespace hfa::test
