// hfa_quantize_kv / hfa_dequantize_kv as a backend sees them: validated, every tensor seen as
// rows (page, slot, head) of one cache side (src/api/quantize.cpp builds it); and
// hfa_quantize_fp8's and hfa_hadamard_signs' problems (src/api/quantize_fp8.cpp).
#pragma once

#include <cstdint>

#include "common/kvcache_problem.hpp"
#include "common/problem.hpp"

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

// hfa_quantize_fp8: rows (sequence b, row i of it, head h) of x, each of hdim values, quantized
// in groups that share a scale. scale is contiguous, so a group's number is its scale's index.
struct Fp8QuantizeProblem {
  Fp8Granularity granularity = Fp8Granularity::per_tensor;
  int32_t block_rows = 0;  // per_block only
  int64_t num_blocks = 1;  // per_block: scale's blocks per sequence; 1 otherwise
  int64_t batch = 0;       // sequences
  int64_t seqlen = 0;      // fixed length; varlen: 0
  int64_t total = 0;       // rows of all sequences: batch · seqlen, or cu_seqlens[batch]
  int64_t heads = 0;
  int32_t hdim = 0;
  const int32_t* cu_seqlens = nullptr;  // varlen (batch + 1), on the tensors' device

  DType x_dtype = DType::bf16;  // f32, f16 or bf16
  const void* x = nullptr;
  uint8_t* codes = nullptr;  // e4m3
  Strides x_stride, codes_stride;  // in elements; varlen: batch 0, rows counted in total
  float* scale = nullptr;
  const float* signs = nullptr;  // fp32 (hdim) of ±1; null: no rotation
  Device device;
  void* stream = nullptr;
  // The GPU's persistent grids: at most this many CTAs (0: as many as its SMs hold at once).
  // Only tests set it, to run many turns per CTA on small inputs; the API leaves it 0.
  int64_t max_ctas = 0;

  HFA_HD int64_t first_row(int64_t b) const { return cu_seqlens ? cu_seqlens[b] : b * seqlen; }
  HFA_HD int64_t rows_of(int64_t b) const { return first_row(b + 1) - first_row(b); }
  HFA_HD int64_t scale_count() const {
    return granularity == Fp8Granularity::per_tensor ? 1 : batch * num_blocks * heads;
  }
  HFA_HD int64_t group(int64_t b, int64_t i, int64_t h) const {
    if (granularity == Fp8Granularity::per_tensor) return 0;
    const int64_t block = granularity == Fp8Granularity::per_block ? i / block_rows : 0;
    return (b * num_blocks + block) * heads + h;
  }
  // Element offset of row i of sequence b, head h, in a tensor with these strides.
  HFA_HD int64_t offset(const Strides& s, int64_t b, int64_t i, int64_t h) const {
    const int64_t row = cu_seqlens ? cu_seqlens[b] + i : i;
    return b * s.batch + row * s.row + h * s.head;
  }
};

// hfa_hadamard_signs: count fp32 signs (±1) of the rotation seeded by seed (quant/hadamard.hpp).
struct HadamardSignsProblem {
  uint64_t seed = 0;
  float* signs = nullptr;
  int64_t count = 0;
  Device device;
  void* stream = nullptr;
};

}  // namespace hfa::detail
