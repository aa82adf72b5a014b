// The float64 oracle of the KV-cache forward, written to be read: no splits, no online softmax,
// its own cache addressing; the mask and the modifiers are the score policy's, pair by pair.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/score_policy.hpp"
#include "cpu/kvcache_rows.hpp"  // load_plain_row and the codecs
#include "cpu/logit_mods.hpp"
#include "cpu/reference.hpp"

namespace hfa::cpu {
namespace {

// Row (b, j, kv_head) of one side of the cache as float64, addressed and decoded here rather
// than through load_cache_row, so that a gather bug in the backend's path cannot hide in both.
// The element decoders are the codecs themselves (the values they define).
// The row at (page, slot, kv_head) of one side; cache_row below finds a sequence's token.
std::vector<double> row_at(const detail::KVCacheProblem& p, const detail::CacheSide& side,
                           int64_t page, int64_t slot, int64_t kv_head) {
  using detail::CacheFormat;
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
    case CacheFormat::mla_fp8:  // V's row is K's record, read up to its 512 latent values
      quant::mla_fp8_decode_columns(bytes + at, 0, side.hdim, row.data());
      break;
  }
  return {row.begin(), row.end()};
}

std::vector<double> cache_row(const detail::KVCacheProblem& p, const detail::CacheSide& side,
                              int64_t b, int64_t j, int64_t kv_head) {
  const int64_t page =
      p.block_table ? p.block_table[b * p.block_table_stride + j / p.page_size] : b;
  return row_at(p, side, page, j % p.page_size, kv_head);
}

// One query row's attention over its keys k[n], v[n] (already chosen and masked), in float64:
// out[0, hdim_v) and the row's LSE (O = 0 and -inf for no key). Key n's logit is the modifiers'
// at at[n].
double attend_row(const detail::KVCacheProblem& p, const LogitMods& mods,
                  const std::vector<float>& q, const std::vector<const std::vector<double>*>& k,
                  const std::vector<const std::vector<double>*>& v,
                  const std::vector<policy::ScorePosition>& at, double* o) {
  std::fill(o, o + p.hdim_v, 0.0);
  if (k.empty()) return -std::numeric_limits<double>::infinity();
  std::vector<double> scores;
  for (const std::vector<double>* key : k) {
    double s = 0.0;
    for (int64_t c = 0; c < p.hdim_qk; ++c) s += double{q[c]} * (*key)[c];
    s *= p.softmax_scale;
    scores.push_back(mods.logit(s, at[scores.size()]));
  }
  const double max = *std::max_element(scores.begin(), scores.end());
  double sum = 0.0;
  for (double& s : scores) sum += (s = std::exp(s - max));
  for (std::size_t n = 0; n < scores.size(); ++n)
    for (int64_t c = 0; c < p.hdim_v; ++c) o[c] += scores[n] / sum * (*v[n])[c];
  return max + std::log(sum);
}

// Sparse attention: each query row over the tokens its indices list (-1 skipped), each token
// read by its page and slot.
// With varlen queries the rows are the packed q's tokens, each with its own list.
void reference_sparse(const detail::KVCacheProblem& p, double* out, double* lse) {
  const int64_t group = p.heads_q / p.heads_kv;
  const std::size_t q_bytes = p.dtype == DType::f32 ? 4 : 2;
  std::vector<float> row(static_cast<std::size_t>(p.hdim_qk));
  int64_t first_token = 0;  // sequence b's first row in the packed outputs
  for (int64_t b = 0; b < p.batch; first_token += p.query_rows(b), ++b)
    for (int64_t i = 0; i < p.query_rows(b); ++i)
      for (int64_t kv_head = 0; kv_head < p.heads_kv; ++kv_head) {
        const int64_t q_row = p.query_begin(b) + i;  // in q and indices
        const int64_t token = first_token + i;       // in out
        // The row's listed tokens of this kv-head, in their order, repeats kept.
        std::vector<std::vector<double>> k, v;
        const int32_t* listed =
            p.indices + b * p.indices_batch_stride + q_row * p.indices_row_stride;
        for (int64_t n = 0; n < p.topk; ++n) {
          if (listed[n] == -1) continue;
          const int64_t page = listed[n] / p.page_size, slot = listed[n] % p.page_size;
          k.push_back(row_at(p, p.k, page, slot, kv_head));
          v.push_back(row_at(p, p.v, page, slot, kv_head));
        }
        std::vector<const std::vector<double>*> keys, values;
        for (std::size_t n = 0; n < k.size(); ++n) {
          keys.push_back(&k[n]);
          values.push_back(&v[n]);
        }
        // No ALiBi with indices (validate_kvcache refuses the pair): no positions needed.
        const LogitMods mods(p.softcap, 0.0f);
        const std::vector<policy::ScorePosition> unplaced(keys.size());
        for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
          const int64_t q_offset =
              b * p.q_stride.batch + q_row * p.q_stride.row + h * p.q_stride.head;
          load_plain_row(p.dtype, static_cast<const std::byte*>(p.q) + q_offset * q_bytes,
                         p.hdim_qk, row.data());
          const double row_lse =
              attend_row(p, mods, row, keys, values, unplaced, out + (token * p.heads_q + h) * p.hdim_v);
          if (lse != nullptr)
            lse[p.is_varlen() ? h * p.total_q + token : (b * p.heads_q + h) * p.seqlen_q + i] =
                row_lse;
        }
      }
}

}  // namespace

void reference_forward_kvcache(const detail::KVCacheProblem& p, double* out, double* lse) {
  if (p.indices != nullptr) return reference_sparse(p, out, lse);
  const int64_t group = p.heads_q / p.heads_kv;
  const std::size_t q_bytes = p.dtype == DType::f32 ? 4 : 2;
  std::vector<float> row(static_cast<std::size_t>(p.hdim_qk));
  int64_t first_token = 0;  // sequence b's first row in the packed outputs
  for (int64_t b = 0; b < p.batch; first_token += p.query_rows(b), ++b) {
    const int64_t seqlen_q = p.query_rows(b);
    const int64_t seqlen_k = std::clamp<int64_t>(p.cache_seqlens[b], 0, int64_t{p.max_pages} * p.page_size);
    // The score policy's rule, each pair tested.
    const int reach = static_cast<int>(seqlen_q + seqlen_k);
    const policy::WindowRule window{policy::clamp_window(p.window_left, reach),
                                    policy::clamp_window(p.window_right, reach)};
    for (int64_t kv_head = 0; kv_head < p.heads_kv; ++kv_head) {
      // The cache rows of this kv-head, dequantized, widened to float64.
      std::vector<std::vector<double>> k, v;
      for (int64_t j = 0; j < seqlen_k; ++j) {
        k.push_back(cache_row(p, p.k, b, j, kv_head));
        v.push_back(cache_row(p, p.v, b, j, kv_head));
      }
      for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
        const LogitMods mods(p, b, h);
        for (int64_t i = 0; i < seqlen_q; ++i) {
          const int64_t token = first_token + i;  // the row's index in the packed outputs
          const int64_t q_offset =
              b * p.q_stride.batch + (p.query_begin(b) + i) * p.q_stride.row + h * p.q_stride.head;
          load_plain_row(p.dtype, static_cast<const std::byte*>(p.q) + q_offset * q_bytes,
                         p.hdim_qk, row.data());
          std::vector<const std::vector<double>*> keys, values;
          std::vector<policy::ScorePosition> at;
          for (int64_t j = 0; j < seqlen_k; ++j) {
            const policy::ScorePosition pair{static_cast<int>(i), static_cast<int>(j),
                                             static_cast<int>(seqlen_k - seqlen_q)};
            if (!window.visible(pair, static_cast<int>(seqlen_k))) continue;
            keys.push_back(&k[j]);
            values.push_back(&v[j]);
            at.push_back(pair);
          }
          const double row_lse =
              attend_row(p, mods, row, keys, values, at, out + (token * p.heads_q + h) * p.hdim_v);
          if (lse != nullptr)
            lse[p.is_varlen() ? h * p.total_q + token : (b * p.heads_q + h) * p.seqlen_q + i] =
                row_lse;
        }
      }
    }
  }
}

}  // namespace hfa::cpu
