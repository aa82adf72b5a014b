// A KV-cache call on CPU tensors, built from a few knobs: the cache format, paged or contiguous,
// page size, GQA ratio, seqlen_q, the sequences' cache lengths. The caches are quantized from
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
  uint32_t seed = 1;
  int64_t scale_pad = 2;    // unused FP4 scale bytes after each row (the GPU needs 4-byte rows)
  float outliers = 0.0f;    // fraction of K/V values multiplied by kOutlierGain
  static constexpr float kOutlierGain = 50.0f;
  KVCacheOptions options;

  Storage q, k, v, out, lse, seqlens, table, k_scale, v_scale, k_global, v_global;

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

  std::string describe() const {
    std::string s = std::string(kind_name(kind)) + (paged ? " paged page_size " + std::to_string(page_size)
                                                          : " contiguous");
    s += " group " + std::to_string(group) + " seqlen_q " + std::to_string(seqlen_q) + " splits " +
         std::to_string(options.num_splits) + (options.causal ? " causal" : "");
    return s;
  }

  // Creates every tensor and fills the options' tensor fields.
  void build() {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t batch = this->batch();
    const DType qd = q_dtype();

    q.make(qd, {batch, seqlen_q, heads_q(), hdim}, 8);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < seqlen_q; ++i)
        for (int64_t h = 0; h < heads_q(); ++h)
          for (int64_t c = 0; c < hdim; ++c) store_float(qd, normal(rng), q.at<unsigned char>({b, i, h, c}));
    out.make(qd, {batch, seqlen_q, heads_q(), hdim});
    lse.make(DType::f32, {batch, heads_q(), seqlen_q});
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
      for (int64_t i = 0; i < seqlen_q; ++i)
        for (int64_t h = 0; h < heads_q(); ++h) {
          for (int64_t c = 0; c < hdim; ++c) store_float(q_dtype(), nan, out.at<unsigned char>({b, i, h, c}));
          *lse.at<float>({b, h, i}) = nan;
        }
  }

  Status run() { return forward_kvcache(q.tensor, k.tensor, v.tensor, out.tensor, &lse.tensor, options); }

  float out_at(int64_t b, int64_t i, int64_t h, int64_t c) {
    return load_float(q_dtype(), out.at<unsigned char>({b, i, h, c}));
  }

 private:
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

}  // namespace hfa::test
