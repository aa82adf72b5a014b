// hfa_quantize_kv / hfa_dequantize_kv as a backend sees them: validated, every tensor seen as
// rows (page, slot, head) of one cache side (src/api/quantize.cpp builds it).
#pragma once

#include <cstdint>

#include "common/kvcache_problem.hpp"

namespace hfa::detail {

struct QuantizeProblem {
  CacheFormat format = CacheFormat::fp8_per_token;  // a quantized one, never plain
  bool dequantize = false;  // false: values -> codes (and scales); true: codes -> values
  DType values_dtype = DType::f32;  // f32, f16 or bf16
  void* values = nullptr;           // x (read) or out (written)
  PagedStrides values_stride;       // in elements
  // The rows: pages · slots · heads, each side.hdim values (leading dims a rank below 4 lacks
  // have extent 1).
  int64_t pages = 1, slots = 1, heads = 0;
  CacheSide side;  // codes, scales (and the NVFP4 global scale)
  Device device;
  void* stream = nullptr;

  HFA_HD int64_t rows() const { return pages * slots * heads; }
};

}  // namespace hfa::detail
