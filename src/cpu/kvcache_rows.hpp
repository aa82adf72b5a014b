// Reading one (token, kv-head) row of a KV cache as fp32 values: through the block table, then
// through the format's codec (src/quant), for the CPU decode path (kvcache.cpp). The float64
// reference addresses the cache on its own and shares only the codecs and load_plain_row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/half_float.hpp"
#include "common/kv_rows.hpp"
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

// The row at (page, slot, head) of one side of a cache in `format` (plain rows of cache_dtype),
// into out[0, side.hdim). The CPU attention's reads and hfa_dequantize_kv's.
inline void decode_row(detail::CacheFormat format, DType cache_dtype, const detail::CacheSide& side,
                       int64_t page, int64_t slot, int64_t head, float* out) {
  if (format != detail::CacheFormat::plain) {
    detail::decode_columns(format, side, page, slot, head, 0, side.hdim, out);
    return;
  }
  const std::size_t size = cache_dtype == DType::f32 ? 4 : 2;
  load_plain_row(cache_dtype,
                 static_cast<const std::byte*>(side.data) + side.stride.offset(page, slot, head) * size,
                 side.hdim, out);
}

// fp32 values[0, side.hdim) written as the row at (page, slot, head) of one side, in `format`
// (computing the row's or blocks' scales where the format does): the CPU append's writes and
// hfa_quantize_kv's. side.data and side.scale are the caller's memory, written in place.
inline void encode_row(detail::CacheFormat format, DType cache_dtype, const detail::CacheSide& side,
                       int64_t page, int64_t slot, int64_t head, const float* values) {
  using detail::CacheFormat;
  const int64_t offset = side.stride.offset(page, slot, head);
  const int64_t scale_offset = side.scale_stride.offset(page, slot, head);
  auto* codes = static_cast<uint8_t*>(const_cast<void*>(side.data)) + offset;  // byte formats
  auto* scales = static_cast<uint8_t*>(const_cast<void*>(side.scale));
  const int d = side.hdim;
  switch (format) {
    case CacheFormat::plain:
      store_plain_row(cache_dtype, values, d,
                      static_cast<std::byte*>(const_cast<void*>(side.data)) +
                          offset * static_cast<int64_t>(cache_dtype == DType::f32 ? 4 : 2));
      return;
    case CacheFormat::fp8_per_head:
      quant::fp8_kv_quantize_row(values, d, static_cast<const float*>(side.scale)[scale_offset], codes);
      return;
    case CacheFormat::fp8_per_token:
      reinterpret_cast<float*>(scales)[scale_offset] = quant::fp8_kv_quantize_row_per_token(values, d, codes);
      return;
    case CacheFormat::nvfp4:
      quant::nvfp4_quantize_row(values, d, *side.global_scale, codes, scales + scale_offset);
      return;
    case CacheFormat::mxfp4:
      quant::mxfp4_quantize_row(values, d, codes, scales + scale_offset);
      return;
    case CacheFormat::mla_fp8:
      // K's side writes the whole record; V's is that record's prefix, nothing of its own.
      if (d == quant::kMlaHeadDim) quant::mla_fp8_quantize_row(values, codes);
      return;
  }
}

// Token j of sequence b, kv-head `head`, of one side of the cache, into out[0, side.hdim).
inline void load_cache_row(const detail::KVCacheProblem& p, const detail::CacheSide& side,
                           int64_t b, int64_t j, int64_t head, float* out) {
  decode_row(p.format, p.cache_dtype, side, p.page_of(b, j / p.page_size), j % p.page_size, head, out);
}

}  // namespace hfa::cpu
