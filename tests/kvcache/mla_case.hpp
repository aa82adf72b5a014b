// An MLA decode call on CPU tensors as a serving engine makes it (FlashMLA's shapes): q
// (batch, seqlen_q, heads_q, 576), one paged latent cache (num_pages, 64, 1, 576) in bf16 or
// FlashMLA's FP8 records (num_pages, 64, 1, 656), v_cache the view of its first 512 columns, out
// (batch, seqlen_q, heads_q, 512). Pages are shuffled, and every cache slot no sequence uses
// (spare pages, the tail of each last page) holds NaN, so a read past a sequence shows. Sparse
// calls list each row's tokens in indices (random tokens of its sequence, -1 padding mixed in)
// instead of cache_seqlens and a block table. Outputs start as NaN.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "api/validate_kvcache.hpp"
#include "cpu/reference.hpp"
#include "hfa/hfa.hpp"
#include "kvcache/kv_case.hpp"
#include "quant/mla_fp8.hpp"

namespace hfa::test {

struct MlaCase {
  static constexpr int64_t kD = 576, kDv = 512, kRecord = 656;
  bool fp8 = false;
  // q, out and a 16-bit cache's dtype (bf16 or f16); an FP8 cache's q and out are bf16.
  DType dtype = DType::bf16;
  int64_t page_size = 64;
  int64_t heads_q = 16;
  int64_t seqlen_q = 1;
  std::vector<int32_t> cache_seqlens = {0, 1, 65, 300};
  int32_t topk = 0;  // > 0: sparse, that many indices per query row
  uint32_t seed = 1;
  int64_t slot_pad = 8;  // unused elements after each bf16 cache row (FP8 records are packed)
  // Each 128-value latent tile of a token gets a magnitude of its own too, so that an FP8
  // record's 4 scales differ (a reader that takes another tile's scale shows).
  bool tile_gains = false;
  KVCacheOptions options;

  Storage q, cache, out, lse, seqlens, table, indices;
  Tensor v{};  // the view of cache's first 512 columns
  // Every sequence's keys as the cache holds them (bf16-rounded or FP8-decoded), for tests that
  // build a second cache of the same values: values[b][j] is 576 floats.
  std::vector<std::vector<std::vector<float>>> values;
  // Where token j of sequence b lives.
  std::vector<std::vector<int32_t>> pages_of;

  bool sparse() const { return topk > 0; }
  int64_t batch() const { return static_cast<int64_t>(cache_seqlens.size()); }
  int32_t flat_token(int64_t b, int64_t j) const {
    return static_cast<int32_t>(pages_of[b][j / page_size] * page_size + j % page_size);
  }

  std::string describe() const {
    std::string s = fp8 ? "fp8_mla" : dtype_name(dtype);
    s += " heads " + std::to_string(heads_q) + " seqlen_q " + std::to_string(seqlen_q);
    if (sparse()) s += " topk " + std::to_string(topk);
    if (options.causal) s += " causal";
    s += " splits " + std::to_string(options.num_splits) + " lengths";
    for (int32_t n : cache_seqlens) {
      s += ' ';
      s += std::to_string(n);
    }
    return s;
  }

  void build() {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t batch = this->batch();
    q.make(dtype, {batch, seqlen_q, heads_q, kD}, 8);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < seqlen_q; ++i)
        for (int64_t h = 0; h < heads_q; ++h)
          for (int64_t c = 0; c < kD; ++c)
            store_float(dtype, normal(rng), q.at<uint8_t>({b, i, h, c}));
    out.make(dtype, {batch, seqlen_q, heads_q, kDv});
    lse.make(DType::f32, {batch, heads_q, seqlen_q});  // 0xff bytes: NaN everywhere

    // Pages: each sequence's, plus two no one uses, shuffled.
    int64_t num_pages = 2, max_pages = 1;
    for (int32_t n : cache_seqlens) {
      num_pages += (n + page_size - 1) / page_size;
      max_pages = std::max<int64_t>(max_pages, (n + page_size - 1) / page_size);
    }
    std::vector<int32_t> order(static_cast<std::size_t>(num_pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    pages_of.assign(static_cast<std::size_t>(batch), {});
    std::size_t next = 0;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t p = 0; p < (cache_seqlens[b] + page_size - 1) / page_size; ++p)
        pages_of[b].push_back(order[next++]);

    // The cache: NaN bytes everywhere (0xff), then each sequence's tokens.
    if (fp8) {
      cache.make(DType::fp8_mla, {num_pages, page_size, 1, kRecord});
    } else {
      cache.make(dtype, {num_pages, page_size, 1, kD}, slot_pad);
    }
    values.assign(static_cast<std::size_t>(batch), {});
    std::vector<float> x(kD);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t j = 0; j < cache_seqlens[b]; ++j) {
        // A per-token magnitude, so that FP8 tiles get different scales.
        const float gain = std::exp(normal(rng));
        for (float& value : x) value = normal(rng) * gain;
        if (tile_gains)
          for (int64_t t = 0; t < quant::kMlaTiles; ++t) {
            const float tile_gain = std::exp(normal(rng));
            for (int64_t c = t * quant::kMlaTile; c < (t + 1) * quant::kMlaTile; ++c)
              x[c] *= tile_gain;
          }
        const int64_t page = pages_of[b][j / page_size], slot = j % page_size;
        std::vector<float> held(kD);
        if (fp8) {
          auto* record = cache.at<uint8_t>({page, slot, 0, 0});
          quant::mla_fp8_quantize_row(x.data(), record);
          quant::mla_fp8_decode_columns(record, 0, kD, held.data());
        } else {
          for (int64_t c = 0; c < kD; ++c) {
            store_float(dtype, x[c], cache.at<uint8_t>({page, slot, 0, c}));
            held[c] = load_float(dtype, cache.at<uint8_t>({page, slot, 0, c}));
          }
        }
        values[b].push_back(held);
      }
    }
    v = cache.tensor;
    v.shape[3] = kDv;

    if (sparse()) {
      indices.make(DType::i32, {batch, seqlen_q, topk});
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < seqlen_q; ++i) {
          // Up to topk tokens of the sequence (repeats allowed, as an indexer may give), the
          // rest -1, shuffled together.
          std::vector<int32_t> row(static_cast<std::size_t>(topk), -1);
          const int64_t n =
              cache_seqlens[b] == 0 ? 0 : std::uniform_int_distribution<int64_t>(0, topk)(rng);
          for (int64_t k = 0; k < n; ++k)
            row[k] =
                flat_token(b, std::uniform_int_distribution<int64_t>(0, cache_seqlens[b] - 1)(rng));
          std::shuffle(row.begin(), row.end(), rng);
          std::copy(row.begin(), row.end(), indices.at<int32_t>({b, i, 0}));
        }
      options.indices = &indices.tensor;
      options.cache_seqlens = nullptr;
      options.block_table = nullptr;
    } else {
      seqlens.make(DType::i32, {batch});
      std::copy(cache_seqlens.begin(), cache_seqlens.end(), seqlens.at<int32_t>({0}));
      table.make(DType::i32, {batch, max_pages}, 3);  // padding and unused entries: -1
      for (int64_t b = 0; b < batch; ++b)
        for (std::size_t p = 0; p < pages_of[b].size(); ++p)
          *table.at<int32_t>({b, int64_t(p)}) = pages_of[b][p];
      options.cache_seqlens = &seqlens.tensor;
      options.block_table = &table.tensor;
      options.indices = nullptr;
    }
  }

  Status run() {
    return forward_kvcache(q.tensor, cache.tensor, v, out.tensor, &lse.tensor, options);
  }

  float out_at(int64_t b, int64_t i, int64_t h, int64_t c) {
    return load_float(dtype, out.at<uint8_t>({b, i, h, c}));
  }
  float lse_at(int64_t b, int64_t h, int64_t i) { return *lse.at<float>({b, h, i}); }
};

// The float64 oracle of a case: the CPU backend's reference over the cache's values as stored.
// out (batch, seqlen_q, heads, 512), lse (batch, heads, seqlen_q); softmax_scale the validated
// problem's. magnitude is left to the tests that bound errors by it.
struct MlaOracle {
  std::vector<double> out, lse, magnitude;
  double softmax_scale = 0.0;
};

inline MlaOracle mla_oracle(MlaCase& c) {
  detail::KVCacheProblem problem;
  const Status status = detail::build_kvcache_problem(
      {&c.q.tensor, &c.cache.tensor, &c.v, &c.out.tensor, &c.lse.tensor, &c.options},
      detail::Purpose::run, &problem);
  EXPECT_TRUE(status.is_ok()) << status.message();
  MlaOracle o;
  o.out.assign(static_cast<std::size_t>(c.batch() * c.seqlen_q * c.heads_q * MlaCase::kDv), 0.0);
  o.lse.assign(static_cast<std::size_t>(c.batch() * c.heads_q * c.seqlen_q), 0.0);
  if (status.is_ok()) {
    cpu::reference_forward_kvcache(problem, o.out.data(), o.lse.data());
    o.softmax_scale = problem.softmax_scale;
  }
  return o;
}

}  // namespace hfa::test
