// hfa_quantize_kv / hfa_dequantize_kv on the CPU: row by row through the cache codecs the CPU
// append and the CPU attention use (cpu/kvcache_rows.hpp).
#include <cstddef>
#include <vector>

#include "cpu/kvcache_rows.hpp"
#include "cpu/operations.hpp"

namespace hfa::cpu {

Status quantize_kv(const detail::QuantizeProblem& p) {
  const int64_t value_bytes = p.values_dtype == DType::f32 ? 4 : 2;
  std::vector<float> row(static_cast<std::size_t>(p.side.hdim));
  for (int64_t page = 0; page < p.pages; ++page)
    for (int64_t slot = 0; slot < p.slots; ++slot)
      for (int64_t head = 0; head < p.heads; ++head) {
        std::byte* values =
            static_cast<std::byte*>(p.values) + p.values_stride.offset(page, slot, head) * value_bytes;
        if (p.dequantize) {
          decode_row(p.format, DType::e4m3, p.side, page, slot, head, row.data());
          store_plain_row(p.values_dtype, row.data(), p.side.hdim, values);
        } else {
          load_plain_row(p.values_dtype, values, p.side.hdim, row.data());
          encode_row(p.format, DType::e4m3, p.side, page, slot, head, row.data());
        }
      }
  return Status::ok();
}

}  // namespace hfa::cpu
