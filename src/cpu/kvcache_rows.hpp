// Reading one (token, kv-head) row of a KV cache as fp32 values: through the block table, then
// through the format's codec (src/quant), for the CPU decode path (kvcache.cpp). The float64
// reference addresses the cache on its own and shares only the codecs and load_plain_row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/half_float.hpp"
#include "common/kvcache_problem.hpp"
#include "quant/fp8_kv.hpp"
#include "quant/mxfp4.hpp"
#include "quant/nvfp4.hpp"

namespace hfa::cpu {

// n values of a plain f32/f16/bf16 row as fp32.
inline void load_plain_row(DType dtype, const void* row, int64_t n, float* out) {
  if (dtype == DType::f32) {
    std::memcpy(out, row, static_cast<std::size_t>(n) * sizeof(float));
    return;
  }
  const auto* bits = static_cast<const uint16_t*>(row);
  for (int64_t c = 0; c < n; ++c)
    out[c] = dtype == DType::f16 ? detail::fp16_to_float(bits[c]) : detail::bf16_to_float(bits[c]);
}

// n fp32 values into a plain f32/f16/bf16 row (round to nearest even).
inline void store_plain_row(DType dtype, const float* values, int64_t n, void* row) {
  if (dtype == DType::f32) {
    std::memcpy(row, values, static_cast<std::size_t>(n) * sizeof(float));
    return;
  }
  auto* bits = static_cast<uint16_t*>(row);
  for (int64_t c = 0; c < n; ++c)
    bits[c] = dtype == DType::f16 ? detail::float_to_fp16(values[c]) : detail::float_to_bf16(values[c]);
}

// Token j of sequence b, kv-head `head`, of one side of the cache, into out[0, side.hdim).
inline void load_cache_row(const detail::KVCacheProblem& p, const detail::CacheSide& side,
                           int64_t b, int64_t j, int64_t head, float* out) {
  using detail::CacheFormat;
  const int64_t page = p.page_of(b, j / p.page_size);
  const int64_t slot = j % p.page_size;
  const int64_t offset = page * side.stride.page + slot * side.stride.slot + head * side.stride.head;
  const int64_t scale_offset =
      page * side.scale_stride.page + slot * side.scale_stride.slot + head * side.scale_stride.head;
  const auto* codes = static_cast<const uint8_t*>(side.data) + offset;  // the byte formats
  switch (p.format) {
    case CacheFormat::plain: {
      const std::size_t size = p.cache_dtype == DType::f32 ? 4 : 2;
      load_plain_row(p.cache_dtype, static_cast<const std::byte*>(side.data) + offset * size,
                     side.hdim, out);
      return;
    }
    case CacheFormat::fp8_per_head:
    case CacheFormat::fp8_per_token:
      quant::fp8_kv_dequantize_row(codes, side.hdim,
                                   static_cast<const float*>(side.scale)[scale_offset], out);
      return;
    case CacheFormat::nvfp4:
      quant::nvfp4_dequantize_row(codes, static_cast<const uint8_t*>(side.scale) + scale_offset,
                                  side.hdim, *side.global_scale, out);
      return;
    case CacheFormat::mxfp4:
      quant::mxfp4_dequantize_row(codes, static_cast<const uint8_t*>(side.scale) + scale_offset,
                                  side.hdim, out);
      return;
  }
}

// The keys query row i of a sequence with `seqlen_q` query rows and `seqlen_k` cache tokens
// sees, [first, last] (empty when first > last): bottom-right aligned, as sequence.hpp's KeyWindow.
struct CacheKeyRange {
  int64_t first = 0;
  int64_t last = -1;
};

inline CacheKeyRange cache_keys_seen(const detail::KVCacheProblem& p, int64_t seqlen_q,
                                     int64_t seqlen_k, int64_t i) {
  const int64_t diagonal = i + seqlen_k - seqlen_q;
  CacheKeyRange r;
  r.first = p.window_left < 0 ? 0 : (diagonal - p.window_left > 0 ? diagonal - p.window_left : 0);
  r.last = seqlen_k - 1;
  if (p.window_right >= 0 && diagonal + p.window_right < r.last) r.last = diagonal + p.window_right;
  return r;
}

}  // namespace hfa::cpu
