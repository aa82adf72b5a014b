// The float64 oracle of the KV-cache forward, written to be read: no splits, no online softmax,
// its own cache addressing and mask.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/kvcache_rows.hpp"  // load_plain_row and the codecs
#include "cpu/reference.hpp"

namespace hfa::cpu {
namespace {

// Row (b, j, kv_head) of one side of the cache as float64, addressed and decoded here rather
// than through load_cache_row, so that a gather bug in the backend's path cannot hide in both.
// The element decoders are the codecs themselves (the values they define).
std::vector<double> cache_row(const detail::KVCacheProblem& p, const detail::CacheSide& side,
                              int64_t b, int64_t j, int64_t kv_head) {
  using detail::CacheFormat;
  const int64_t page = p.block_table ? p.block_table[b * p.block_table_stride + j / p.page_size] : b;
  const int64_t slot = j % p.page_size;
  const int64_t at = page * side.stride.page + slot * side.stride.slot + kv_head * side.stride.head;
  const int64_t scale_at = page * side.scale_stride.page + slot * side.scale_stride.slot +
                           kv_head * side.scale_stride.head;
  const auto* bytes = static_cast<const uint8_t*>(side.data);
  const auto* scale_bytes = static_cast<const uint8_t*>(side.scale);
  std::vector<float> row(static_cast<std::size_t>(side.hdim));
  switch (p.format) {
    case CacheFormat::plain:
      load_plain_row(p.cache_dtype, bytes + at * (p.cache_dtype == DType::f32 ? 4 : 2), side.hdim,
                     row.data());
      break;
    case CacheFormat::fp8_per_head:
    case CacheFormat::fp8_per_token:
      for (int c = 0; c < side.hdim; ++c)
        row[c] = quant::fp8_kv_decode(bytes[at + c], static_cast<const float*>(side.scale)[scale_at]);
      break;
    case CacheFormat::nvfp4:
      for (int c = 0; c < side.hdim; ++c) {
        const float multiplier = quant::nvfp4_multiplier(
            scale_bytes[scale_at + c / quant::kNvfp4BlockSize], *side.global_scale);
        row[c] = quant::nvfp4_decode(quant::e2m1_unpack(bytes[at + c / 2], c % 2), multiplier);
      }
      break;
    case CacheFormat::mxfp4:
      for (int c = 0; c < side.hdim; ++c)
        row[c] = quant::mxfp4_decode(quant::e2m1_unpack(bytes[at + c / 2], c % 2),
                                     scale_bytes[scale_at + c / quant::kMxfp4BlockSize]);
      break;
  }
  return {row.begin(), row.end()};
}

// Whether query row i of a sequence of seqlen_q rows sees cache key j: the bottom-right aligned
// window, spelled out.
bool visible(const detail::KVCacheProblem& p, int64_t seqlen_q, int64_t seqlen_k, int64_t i,
             int64_t j) {
  const int64_t diagonal = i + seqlen_k - seqlen_q;
  if (p.window_left >= 0 && j < diagonal - p.window_left) return false;
  if (p.window_right >= 0 && j > diagonal + p.window_right) return false;
  return true;
}

}  // namespace

void reference_forward_kvcache(const detail::KVCacheProblem& p, double* out, double* lse) {
  const int64_t group = p.heads_q / p.heads_kv;
  const std::size_t q_bytes = p.dtype == DType::f32 ? 4 : 2;
  std::vector<float> row(static_cast<std::size_t>(p.hdim_qk));
  int64_t first_token = 0;  // sequence b's first row in the packed outputs
  for (int64_t b = 0; b < p.batch; first_token += p.query_rows(b), ++b) {
    const int64_t seqlen_q = p.query_rows(b);
    const int64_t seqlen_k = std::clamp<int64_t>(p.cache_seqlens[b], 0, int64_t{p.max_pages} * p.page_size);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      // The cache rows of this head's kv-head, dequantized, widened to float64.
      const int64_t kv_head = h / group;
      std::vector<std::vector<double>> k, v;
      for (int64_t j = 0; j < seqlen_k; ++j) {
        k.push_back(cache_row(p, p.k, b, j, kv_head));
        v.push_back(cache_row(p, p.v, b, j, kv_head));
      }
      for (int64_t i = 0; i < seqlen_q; ++i) {
        const int64_t token = first_token + i;  // the row's index in the packed outputs
        const int64_t q_offset =
            b * p.q_stride.batch + (p.query_begin(b) + i) * p.q_stride.row + h * p.q_stride.head;
        load_plain_row(p.dtype, static_cast<const std::byte*>(p.q) + q_offset * q_bytes, p.hdim_qk,
                       row.data());
        std::vector<int64_t> keys;
        std::vector<double> scores;
        for (int64_t j = 0; j < seqlen_k; ++j) {
          if (!visible(p, seqlen_q, seqlen_k, i, j)) continue;
          double s = 0.0;
          for (int64_t c = 0; c < p.hdim_qk; ++c) s += double{row[c]} * k[j][c];
          s *= p.softmax_scale;
          if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
          if (p.vectors.alibi_slopes)  // after the softcap, as FlashAttention-2
            s -= p.vectors.alibi_slopes.at<float>(b, h) *
                 std::abs(static_cast<double>(i + seqlen_k - seqlen_q - j));
          keys.push_back(j);
          scores.push_back(s);
        }
        double* o = out + (token * p.heads_q + h) * p.hdim_v;
        std::fill(o, o + p.hdim_v, 0.0);
        double row_lse = -std::numeric_limits<double>::infinity();
        if (!scores.empty()) {
          const double max = *std::max_element(scores.begin(), scores.end());
          double sum = 0.0;
          for (double& s : scores) sum += (s = std::exp(s - max));
          for (std::size_t n = 0; n < scores.size(); ++n) {
            const std::vector<double>& value = v[keys[n]];
            for (int64_t c = 0; c < p.hdim_v; ++c) o[c] += scores[n] / sum * value[c];
          }
          row_lse = max + std::log(sum);
        }
        if (lse != nullptr)
          lse[p.is_varlen() ? h * p.total_q + token : (b * p.heads_q + h) * p.seqlen_q + i] = row_lse;
      }
    }
  }
}

}  // namespace hfa::cpu
