// `hfa run --kvcache`: decode over a paged KV cache (hfa::forward_kvcache). The cache holds
// random normals encoded by the library's own quantize_kv, pages in shuffled order; the check
// reads the same codes back through dequantize_kv, so the reference sees exactly the values
// the decode reads.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "args.hpp"
#include "workload.hpp"

namespace hfa::tool {

struct CacheSpec {
  std::string format;  // bf16, fp16 (plain: the queries' dtype), fp8, fp8-token, nvfp4, mxfp4
  int64_t page_size = 64;
  // MLA (--mla): one latent cache of 576-wide rows (bf16, or FlashMLA's FP8 records for
  // format fp8), V the view of its first 512 columns, one kv-head.
  bool mla = false;
};

// Reads --cache-format, --page-size and --cache-len, then the shape flags (parse_spec) with one
// query row per sequence by default. The cache lengths land in spec->varlen_k (queries stay
// fixed length: spec->seqlen_q rows per sequence). With `mla`, MLA's shape: head dims 576 / 512,
// one kv-head, 16 query heads by default.
CacheSpec parse_kvcache(Args& args, Spec* spec, bool mla = false);

// Bytes of K and V codes and scales one decode reads: those of every cached token.
double cache_bytes_read(const Spec& spec, const CacheSpec& cache);

// The bytes a KVCacheWorkload and the check of its result hold at their peak.
Footprint kvcache_footprint(const Spec& spec, const CacheSpec& cache);

// Builds a KVCacheWorkload of `sample` and times one decode after a warm-up call. Throws
// WorkloadError when the library rejects it.
SampleTiming time_kvcache(const Spec& sample, const CacheSpec& cache);

class KVCacheWorkload {
 public:
  // Throws WorkloadError when the library rejects the quantization or the decode's shapes.
  KVCacheWorkload(const Spec& spec, const CacheSpec& cache, uint64_t seed);
  KVCacheWorkload(const KVCacheWorkload&) = delete;  // options_ points into this object

  Status forward();
  // Bytes of K and V codes and scales one call reads: those of every cached token.
  double bytes_read() const { return bytes_read_; }

  // Downloads out and lse; returns them with q (in f32) and the dequantized cache packed by
  // sequence ((cached tokens of all sequences, kv_heads, d), f32), for check_against_reference.
  HostProblem reference();

 private:
  struct Side {  // the K or the V cache
    DeviceTensor codes, scale;
    HostArray values;  // what the codes dequantize to, f32 (pages, page_size, kv_heads, d)
  };
  Side make_side(int64_t dim, std::mt19937_64& rng);
  Side make_mla_cache(std::mt19937_64& rng);  // the one latent cache, values as it holds them
  HostArray gather(const Side& side, int64_t dim, int64_t width) const;

  Spec spec_;
  CacheSpec cache_;
  int64_t pages_ = 0, max_pages_ = 0;
  HostArray q_, out_, lse_, table_, global_;
  DeviceTensor q_dev_, out_dev_, lse_dev_, table_dev_, lengths_dev_, global_dev_;
  Side k_, v_;
  std::unique_ptr<DeviceMemory> workspace_;
  KVCacheOptions options_;
  double bytes_read_ = 0;
};

}  // namespace hfa::tool
