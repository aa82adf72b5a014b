#include "cpu/kvcache_append.hpp"

#include <cstddef>
#include <vector>

#include "common/rotary.hpp"
#include "cpu/kvcache_rows.hpp"

namespace hfa::cpu {
namespace {

using detail::KVCacheProblem;

std::size_t plain_bytes(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

float table_value(const KVCacheProblem& p, const void* table, int64_t stride, int64_t position,
                  int64_t j) {
  float value = 0.0f;
  load_plain_row(p.rotary_dtype,
                 static_cast<const std::byte*>(table) +
                     (position * stride + j) * static_cast<int64_t>(plain_bytes(p.rotary_dtype)),
                 1, &value);
  return value;
}

}  // namespace

void apply_rotary(const KVCacheProblem& p, int64_t position, float* row) {
  for (int j = 0; j < p.rotary_dim / 2; ++j) {
    const detail::RotaryPair pair = detail::rotary_pair(j, p.rotary_dim, p.rotary_interleaved);
    const detail::RotatedPair r = detail::rotate_pair(
        row[pair.first], row[pair.second],
        table_value(p, p.rotary_cos, p.rotary_cos_stride, position, j),
        table_value(p, p.rotary_sin, p.rotary_sin_stride, position, j));
    row[pair.first] = r.first;
    row[pair.second] = r.second;
  }
}

int64_t query_position(const KVCacheProblem& p, int64_t b, int64_t i) {
  return detail::rotary_query_position(p.cache_seqlens[b], i, p.window_left, p.window_right);
}

void append_new_tokens(const KVCacheProblem& p) {
  const std::size_t bytes = plain_bytes(p.dtype);
  std::vector<float> k(static_cast<std::size_t>(p.hdim_qk)), v(static_cast<std::size_t>(p.hdim_v));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.new_tokens(b); ++i) {
      const int64_t position = int64_t{p.cache_seqlens[b]} + i;
      const int64_t page = p.page_of(b, position / p.page_size);
      const int64_t slot = position % p.page_size;
      const int64_t row = p.new_begin(b) + i;  // of k_new / v_new: i, or a packed token
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        const int64_t k_at = b * p.k_new_stride.batch + row * p.k_new_stride.row + h * p.k_new_stride.head;
        const int64_t v_at = b * p.v_new_stride.batch + row * p.v_new_stride.row + h * p.v_new_stride.head;
        load_plain_row(p.dtype, static_cast<const std::byte*>(p.k_new) + k_at * static_cast<int64_t>(bytes),
                       p.hdim_qk, k.data());
        if (p.rotary_cos != nullptr) apply_rotary(p, position, k.data());
        encode_row(p.format, p.cache_dtype, p.k, page, slot, h, k.data());
        if (p.v_new == nullptr) continue;  // MLA: V's columns are K's row, written above
        load_plain_row(p.dtype,
                       static_cast<const std::byte*>(p.v_new) + v_at * static_cast<int64_t>(bytes),
                       p.hdim_v, v.data());
        encode_row(p.format, p.cache_dtype, p.v, page, slot, h, v.data());
      }
    }
}

}  // namespace hfa::cpu
