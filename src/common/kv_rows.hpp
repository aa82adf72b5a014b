// Decoding part of one (page, slot, head) row of a quantized KV-cache side, host and device:
// the one decoder of the CPU cache reads (cpu/kvcache_rows.hpp) and of hfa_dequantize_kv on
// either device. The codecs themselves are src/quant's.
#pragma once

#include <cstdint>

#include "common/kvcache_problem.hpp"
#include "quant/fp8_kv.hpp"
#include "quant/mla_fp8.hpp"
#include "quant/mxfp4.hpp"
#include "quant/nvfp4.hpp"

namespace hfa::detail {

// Values [first, first + count) of the row at (page, slot, head) of `side` into out[0, count).
// A quantized format (not plain); first is a multiple of 2 and first / count stay inside one
// scale block or cover whole blocks (the GPU's lanes: 2, 4 or 8 values; the CPU: the row).
HFA_HD inline void decode_columns(CacheFormat format, const CacheSide& side, int64_t page,
                                  int64_t slot, int64_t head, int first, int count, float* out) {
  const auto* codes = static_cast<const uint8_t*>(side.data) + side.stride.offset(page, slot, head);
  const int64_t scale_row = side.scale_stride.offset(page, slot, head);
  const auto* scales = static_cast<const uint8_t*>(side.scale) + scale_row;  // the byte scales
  switch (format) {
    case CacheFormat::fp8_per_head:
    case CacheFormat::fp8_per_token:
      quant::fp8_kv_dequantize_row(codes + first, count,
                                   static_cast<const float*>(side.scale)[scale_row], out);
      return;
    case CacheFormat::nvfp4:
      quant::nvfp4_dequantize_row(codes + first / 2, scales + first / quant::kNvfp4BlockSize, count,
                                  *side.global_scale, out);
      return;
    case CacheFormat::mxfp4:
      quant::mxfp4_dequantize_row(codes + first / 2, scales + first / quant::kMxfp4BlockSize, count,
                                  out);
      return;
    case CacheFormat::mla_fp8:  // the scales are inside the record
      quant::mla_fp8_decode_columns(codes, first, count, out);
      return;
    case CacheFormat::plain:
      return;  // not a quantized format: the callers read plain rows themselves
  }
}

}  // namespace hfa::detail
