// A KV-cache call on CPU tensors, built from a few knobs: the cache format, paged or contiguous,
// page size, GQA ratio, seqlen_q (or varlen queries: rows per sequence), the sequences' cache
// lengths. The caches are quantized from
// random values with src/quant's encoders; paged caches get a shuffled block table whose unused
// entries are -1 (never read), and every cache and scale tensor has padded strides. Outputs
// start as NaN.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/half_float.hpp"
#include "hfa/hfa.hpp"
#include "quant/fp8_kv.hpp"
#include "quant/mxfp4.hpp"
#include "quant/nvfp4.hpp"

namespace hfa::test {

enum class CacheKind { f32, f16, bf16, fp8_per_head, fp8_per_token, nvfp4, mxfp4 };

inline const char* kind_name(CacheKind kind) {
  switch (kind) {
    case CacheKind::f32: return "f32";
    case CacheKind::f16: return "f16";
    case CacheKind::bf16: return "bf16";
    case CacheKind::fp8_per_head: return "fp8_per_head";
    case CacheKind::fp8_per_token: return "fp8_per_token";
    case CacheKind::nvfp4: return "nvfp4";
    case CacheKind::mxfp4: return "mxfp4";
  }
  return "?";
}

// Bytes plus a tensor view over them; strides in elements of the view's dtype.
struct Storage {
  std::vector<unsigned char> bytes;
  Tensor tensor{};

  // Row-major with `pad` unused elements after every innermost row (filled with 0xff: NaN in
  // every float format here, so a read of the padding shows).
  void make(DType dtype, std::vector<int64_t> shape, int64_t pad = 0) {
    const int64_t size = static_cast<int64_t>(dtype_size(dtype));
    std::vector<int64_t> stride(shape.size());
    int64_t running = 1;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      stride[d] = running;
      running *= shape[d] + (d == static_cast<int>(shape.size()) - 1 ? pad : 0);
    }
    bytes.assign(static_cast<std::size_t>(std::max<int64_t>(running, 1) * size), 0xff);
    tensor = Tensor{};
    tensor.data = bytes.data();
    tensor.dtype = static_cast<hfa_dtype>(dtype);
    tensor.rank = static_cast<int32_t>(shape.size());
    for (std::size_t d = 0; d < shape.size(); ++d) {
      tensor.shape[d] = shape[d];
      tensor.stride[d] = stride[d];
    }
  }
  // Address of the element at a 4-d (or lower) index.
  template <class T>
  T* at(std::initializer_list<int64_t> index) {
    int64_t offset = 0;
    int d = 0;
    for (int64_t i : index) offset += i * tensor.stride[d++];
    return reinterpret_cast<T*>(bytes.data() + offset * dtype_size(static_cast<DType>(tensor.dtype)));
  }
};

inline void store_float(DType dtype, float value, void* where) {
  if (dtype == DType::f32) {
    std::memcpy(where, &value, 4);
    return;
  }
  const uint16_t bits = dtype == DType::f16 ? detail::float_to_fp16(value) : detail::float_to_bf16(value);
  std::memcpy(where, &bits, 2);
}

inline float load_float(DType dtype, const void* where) {
  if (dtype == DType::f32) {
    float value;
    std::memcpy(&value, where, 4);
    return value;
  }
  uint16_t bits;
  std::memcpy(&bits, where, 2);
  return dtype == DType::f16 ? detail::fp16_to_float(bits) : detail::bf16_to_float(bits);
}

struct KVCase {
  CacheKind kind = CacheKind::bf16;
  bool paged = true;
  int64_t page_size = 16;
  int64_t heads_kv = 2;
  int64_t group = 1;
  int64_t seqlen_q = 1;
  int64_t hdim = 64;
  std::vector<int32_t> cache_seqlens = {0, 1, 37, 100};
  // Varlen queries (cu_seqlens_q): the rows of each sequence, packed into (total_q, heads, d);
  // empty: seqlen_q rows each. options.max_seqlen_q, when left 0, becomes the longest.
  std::vector<int32_t> query_lengths;
  uint32_t seed = 1;
  int64_t scale_pad = 2;    // unused FP4 scale bytes after each row (the GPU needs 4-byte rows)
  float outliers = 0.0f;    // fraction of K/V values multiplied by kOutlierGain
  static constexpr float kOutlierGain = 50.0f;
  KVCacheOptions options;

  Storage q, k, v, out, lse, seqlens, table, k_scale, v_scale, k_global, v_global, cu_q;

  DType q_dtype() const {
    switch (kind) {
      case CacheKind::f32: return DType::f32;
      case CacheKind::f16: return DType::f16;
      default: return DType::bf16;  // bf16 also for the quantized caches
    }
  }
  bool fp4() const { return kind == CacheKind::nvfp4 || kind == CacheKind::mxfp4; }
  int64_t batch() const { return static_cast<int64_t>(cache_seqlens.size()); }
  int64_t heads_q() const { return heads_kv * group; }
  bool varlen() const { return !query_lengths.empty(); }
  int64_t rows_of(int64_t b) const { return varlen() ? query_lengths[static_cast<std::size_t>(b)] : seqlen_q; }
  // Row i of sequence b among all the query rows, in order (a token of the packed q when varlen).
  int64_t token(int64_t b, int64_t i) const {
    if (!varlen()) return b * seqlen_q + i;
    return std::accumulate(query_lengths.begin(), query_lengths.begin() + b, int64_t{0}) + i;
  }
  int64_t total_q() const { return token(batch(), 0); }
  // Where lse (contiguous (batch, heads_q, seqlen_q), or (heads_q, total_q)) holds row i of head h
  // of sequence b; the oracle's lse uses the same order.
  int64_t lse_index(int64_t b, int64_t h, int64_t i) const {
    return varlen() ? h * total_q() + token(b, i) : (b * heads_q() + h) * seqlen_q + i;
  }

  std::string describe() const {
    std::string s = std::string(kind_name(kind)) + (paged ? " paged page_size " + std::to_string(page_size)
                                                          : " contiguous");
    s += " group " + std::to_string(group);
    if (varlen()) {
      s += " varlen q rows";
      for (int32_t n : query_lengths) {  // appends only: GCC 12 warns (-Wrestrict) on " " + str
        s += ' ';
        s += std::to_string(n);
      }
    } else {
      s += " seqlen_q ";
      s += std::to_string(seqlen_q);
    }
    s += " splits ";
    s += std::to_string(options.num_splits);
    if (options.split_size) {
      s += " split_size ";
      s += std::to_string(options.split_size);
    }
    if (options.causal) s += " causal";
    return s;
  }

  // Creates every tensor and fills the options' tensor fields.
  void build() {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t batch = this->batch();
    const DType qd = q_dtype();

    if (varlen()) {
      q.make(qd, {total_q(), heads_q(), hdim}, 8);
      out.make(qd, {total_q(), heads_q(), hdim});
      lse.make(DType::f32, {heads_q(), total_q()});
      cu_q.make(DType::i32, {batch + 1});
      for (int64_t b = 0; b <= batch; ++b) *cu_q.at<int32_t>({b}) = static_cast<int32_t>(token(b, 0));
      options.cu_seqlens_q = &cu_q.tensor;
      if (options.max_seqlen_q == 0)
        options.max_seqlen_q = std::max(1, *std::max_element(query_lengths.begin(), query_lengths.end()));
    } else {
      q.make(qd, {batch, seqlen_q, heads_q(), hdim}, 8);
      out.make(qd, {batch, seqlen_q, heads_q(), hdim});
      lse.make(DType::f32, {batch, heads_q(), seqlen_q});
      options.cu_seqlens_q = nullptr;
    }
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < rows_of(b); ++i)
        for (int64_t h = 0; h < heads_q(); ++h)
          for (int64_t c = 0; c < hdim; ++c) store_float(qd, normal(rng), q_at(b, i, h, c));
    poison_outputs();

    seqlens.make(DType::i32, {batch});
    std::copy(cache_seqlens.begin(), cache_seqlens.end(), seqlens.at<int32_t>({0}));

    // Pages: each sequence gets the pages its length needs plus one spare, all shuffled.
    int64_t num_pages = 0, rows = 0;
    std::vector<std::vector<int32_t>> pages_of(static_cast<std::size_t>(batch));
    const int32_t longest = *std::max_element(cache_seqlens.begin(), cache_seqlens.end());
    if (paged) {
      int64_t max_pages = 1;
      for (int32_t length : cache_seqlens) max_pages = std::max<int64_t>(max_pages, (length + page_size - 1) / page_size + 1);
      for (int64_t b = 0; b < batch; ++b) num_pages += (cache_seqlens[b] + page_size - 1) / page_size;
      num_pages += 2;  // pages no sequence uses
      std::vector<int32_t> order(static_cast<std::size_t>(num_pages));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      table.make(DType::i32, {batch, max_pages}, 3);
      std::size_t next = 0;
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t used = (cache_seqlens[b] + page_size - 1) / page_size;
        for (int64_t p = 0; p < max_pages; ++p)
          *table.at<int32_t>({b, p}) = p < used ? order[next++] : -1;
      }
      rows = page_size;
      options.block_table = &table.tensor;
    } else {
      num_pages = batch;
      rows = longest + 3;
      options.block_table = nullptr;
    }

    // Values per (page, slot, head, c), then the cache in its format.
    const int64_t count = num_pages * rows * heads_kv * hdim;
    std::vector<float> kx(static_cast<std::size_t>(count)), vx(static_cast<std::size_t>(count));
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    for (float& x : kx) x = normal(rng) * (outliers > 0.0f && uniform(rng) < outliers ? kOutlierGain : 1.0f);
    for (float& x : vx) x = normal(rng) * (outliers > 0.0f && uniform(rng) < outliers ? kOutlierGain : 1.0f);
    fill_cache(kx, num_pages, rows, k, k_scale, k_global);
    fill_cache(vx, num_pages, rows, v, v_scale, v_global);

    options.cache_seqlens = &seqlens.tensor;
    const bool scaled = kind != CacheKind::f32 && kind != CacheKind::f16 && kind != CacheKind::bf16;
    options.k_scale = scaled ? &k_scale.tensor : nullptr;
    options.v_scale = scaled ? &v_scale.tensor : nullptr;
    options.k_global_scale = kind == CacheKind::nvfp4 ? &k_global.tensor : nullptr;
    options.v_global_scale = kind == CacheKind::nvfp4 ? &v_global.tensor : nullptr;
  }

  void poison_outputs() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t b = 0; b < batch(); ++b)
      for (int64_t i = 0; i < rows_of(b); ++i)
        for (int64_t h = 0; h < heads_q(); ++h) {
          for (int64_t c = 0; c < hdim; ++c) store_float(q_dtype(), nan, element(out, b, i, h, c));
          lse_at(b, h, i) = nan;
        }
  }

  Status run() { return forward_kvcache(q.tensor, k.tensor, v.tensor, out.tensor, &lse.tensor, options); }

  unsigned char* q_at(int64_t b, int64_t i, int64_t h, int64_t c) { return element(q, b, i, h, c); }
  const unsigned char* out_row(int64_t b, int64_t i, int64_t h) { return element(out, b, i, h, 0); }
  float out_at(int64_t b, int64_t i, int64_t h, int64_t c) {
    return load_float(q_dtype(), element(out, b, i, h, c));
  }
  // lse is contiguous: its element is at lse_index.
  float& lse_at(int64_t b, int64_t h, int64_t i) {
    return reinterpret_cast<float*>(lse.bytes.data())[lse_index(b, h, i)];
  }

 private:
  // Element (b, i, h, c) of q or out: (b, i, h, c), or (token, h, c) when varlen.
  unsigned char* element(Storage& s, int64_t b, int64_t i, int64_t h, int64_t c) {
    return varlen() ? s.at<unsigned char>({token(b, i), h, c}) : s.at<unsigned char>({b, i, h, c});
  }

  void fill_cache(const std::vector<float>& x, int64_t pages, int64_t rows, Storage& cache,
                  Storage& scale, Storage& global) {
    const int64_t row_count = pages * rows * heads_kv;
    auto row = [&](int64_t r) { return x.data() + r * hdim; };
    switch (kind) {
      case CacheKind::f32:
      case CacheKind::f16:
      case CacheKind::bf16: {
        cache.make(q_dtype(), {pages, rows, heads_kv, hdim}, 8);
        for (int64_t p = 0; p < pages; ++p)
          for (int64_t s = 0; s < rows; ++s)
            for (int64_t h = 0; h < heads_kv; ++h)
              for (int64_t c = 0; c < hdim; ++c)
                store_float(q_dtype(), row((p * rows + s) * heads_kv + h)[c], cache.at<unsigned char>({p, s, h, c}));
        return;
      }
      case CacheKind::fp8_per_head:
      case CacheKind::fp8_per_token: {
        cache.make(DType::e4m3, {pages, rows, heads_kv, hdim}, 16);
        const bool per_head = kind == CacheKind::fp8_per_head;
        if (per_head) {
          scale.make(DType::f32, {heads_kv});
          for (int64_t h = 0; h < heads_kv; ++h) {
            float amax = 0.0f;
            for (int64_t r = h; r < row_count; r += heads_kv) amax = std::max(amax, quant::amax_abs(row(r), static_cast<int>(hdim)));
            *scale.at<float>({h}) = quant::fp8_kv_scale(amax);
          }
        } else {
          scale.make(DType::f32, {pages, rows, heads_kv}, 1);
        }
        for (int64_t p = 0; p < pages; ++p)
          for (int64_t s = 0; s < rows; ++s)
            for (int64_t h = 0; h < heads_kv; ++h) {
              const float* xr = row((p * rows + s) * heads_kv + h);
              auto* codes = cache.at<uint8_t>({p, s, h, 0});
              if (per_head)
                quant::fp8_kv_quantize_row(xr, static_cast<int>(hdim), *scale.at<float>({h}), codes);
              else
                *scale.at<float>({p, s, h}) = quant::fp8_kv_quantize_row_per_token(xr, static_cast<int>(hdim), codes);
            }
        return;
      }
      case CacheKind::nvfp4:
      case CacheKind::mxfp4: {
        const bool nv = kind == CacheKind::nvfp4;
        const int64_t block = nv ? quant::kNvfp4BlockSize : quant::kMxfp4BlockSize;
        cache.make(DType::fp4_e2m1x2, {pages, rows, heads_kv, hdim / 2}, 16);
        scale.make(nv ? DType::e4m3 : DType::ue8m0, {pages, rows, heads_kv, hdim / block}, scale_pad);
        float global_scale = 1.0f;
        if (nv) {
          global.make(DType::f32, {1});
          global_scale = quant::nvfp4_global_scale(quant::amax_abs(x.data(), static_cast<int>(x.size())));
          *global.at<float>({0}) = global_scale;
        }
        for (int64_t p = 0; p < pages; ++p)
          for (int64_t s = 0; s < rows; ++s)
            for (int64_t h = 0; h < heads_kv; ++h) {
              const float* xr = row((p * rows + s) * heads_kv + h);
              auto* packed = cache.at<uint8_t>({p, s, h, 0});
              auto* scales = scale.at<uint8_t>({p, s, h, 0});
              if (nv)
                quant::nvfp4_quantize_row(xr, static_cast<int>(hdim), global_scale, packed, scales);
              else
                quant::mxfp4_quantize_row(xr, static_cast<int>(hdim), packed, scales);
            }
        return;
      }
    }
  }
};

// Makes sequence b_to of `to` hold what sequence b_from of `from` holds: its cache rows (codes
// and per-row scales), the format's per-head or global scales, its query rows and its length.
// Contiguous caches of one format, hdim and heads; `to` built. For tests of batch invariance.
inline void copy_sequence(KVCase& from, int64_t b_from, KVCase& to, int64_t b_to) {
  ASSERT_FALSE(from.paged || to.paged) << "copy_sequence takes contiguous caches";
  ASSERT_EQ(from.rows_of(b_from), to.rows_of(b_to));
  const int32_t length = from.cache_seqlens[static_cast<std::size_t>(b_from)];
  auto row_bytes = [](const Storage& s) {
    const int32_t rank = s.tensor.rank;
    return static_cast<std::size_t>(rank == 4 ? s.tensor.shape[3] : 1) *
           dtype_size(static_cast<DType>(s.tensor.dtype));
  };
  for (auto [src, dst] : {std::pair{&from.k, &to.k}, {&from.v, &to.v}, {&from.k_scale, &to.k_scale},
                          {&from.v_scale, &to.v_scale}}) {
    if (src->bytes.empty() || src->tensor.rank < 3) continue;
    for (int64_t j = 0; j < length; ++j)
      for (int64_t h = 0; h < from.heads_kv; ++h)
        std::memcpy(dst->at<unsigned char>({b_to, j, h, 0}), src->at<unsigned char>({b_from, j, h, 0}),
                    row_bytes(*src));
  }
  // Per-kv-head FP8 scales and NVFP4's global scales: whole (small) tensors.
  for (auto [src, dst] : {std::pair{&from.k_scale, &to.k_scale}, {&from.v_scale, &to.v_scale},
                          {&from.k_global, &to.k_global}, {&from.v_global, &to.v_global}})
    if (!src->bytes.empty() && src->tensor.rank == 1) {
      ASSERT_EQ(src->bytes.size(), dst->bytes.size());
      std::copy(src->bytes.begin(), src->bytes.end(), dst->bytes.begin());  // keeps dst's views
    }
  for (int64_t i = 0; i < from.rows_of(b_from); ++i)
    for (int64_t h = 0; h < from.heads_q(); ++h)
      std::memcpy(to.q_at(b_to, i, h, 0), from.q_at(b_from, i, h, 0),
                  static_cast<std::size_t>(from.hdim) * dtype_size(from.q_dtype()));
  to.cache_seqlens[static_cast<std::size_t>(b_to)] = length;
  *to.seqlens.at<int32_t>({b_to}) = length;
}

// The batch-invariance pair of split_size tests: one causal, windowed sequence alone (fixed
// length, contiguous cache, `base`'s format and head dim), and the same sequence packed as
// sequence kCrowdIndex of a varlen batch among longer and empty ones in a larger cache. Built in
// place (a built KVCase's options point into it); with split_size both must give the sequence
// the same bytes of out and lse (same_sequence_bytes).
struct BatchInvariancePair {
  static constexpr int64_t kCrowdIndex = 2;
  KVCase alone, crowd;

  void build(const KVCase& base, int32_t split_size) {
    alone = base;
    alone.paged = false;
    alone.group = 4;
    alone.seqlen_q = 3;
    alone.cache_seqlens = {1000};
    alone.options.causal = true;
    alone.options.window_left = 700;
    alone.options.split_size = split_size;
    alone.build();
    crowd = alone;
    crowd.query_lengths = {1, 0, 3, 5};
    crowd.cache_seqlens = {5000, 7, 1000, 0};
    crowd.seed = 77;
    crowd.build();
    copy_sequence(alone, 0, crowd, kCrowdIndex);
  }
};

// Whether sequence b of `a` and sequence c_b of `c` got the same bytes of out and lse.
inline ::testing::AssertionResult same_sequence_bytes(KVCase& a, int64_t b, KVCase& c, int64_t c_b) {
  const std::size_t row = static_cast<std::size_t>(a.hdim) * dtype_size(a.q_dtype());
  for (int64_t i = 0; i < a.rows_of(b); ++i)
    for (int64_t h = 0; h < a.heads_q(); ++h) {
      if (std::memcmp(&a.lse_at(b, h, i), &c.lse_at(c_b, h, i), sizeof(float)) != 0)
        return ::testing::AssertionFailure() << "lse of row " << i << " head " << h << " differs: "
                                             << a.lse_at(b, h, i) << " vs " << c.lse_at(c_b, h, i);
      if (std::memcmp(a.out_row(b, i, h), c.out_row(c_b, i, h), row) != 0)
        return ::testing::AssertionFailure() << "out of row " << i << " head " << h << " differs";
    }
  return ::testing::AssertionSuccess();
}

}  // namespace hfa::test
