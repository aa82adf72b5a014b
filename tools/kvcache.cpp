#include "kvcache.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "check.hpp"
#include "timer.hpp"

namespace hfa::tool {
namespace {

enum class Scales { none, per_head, per_token, per_block };

// A cache format: how its codes and scales are stored (include/hfa/hfa.h, hfa_quantize_kv).
struct Format {
  const char* name;
  Scales scales;
  KVFormat kv;              // quantized formats only
  DType codes;              // plain formats: the queries' dtype
  int64_t values_per_code;  // 2 for FP4 (two a byte)
  DType scale;
  int64_t block;            // values per block scale
};

constexpr Format kFormats[] = {
    {"bf16", Scales::none, {}, DType::bf16, 1, DType::f32, 0},
    {"fp16", Scales::none, {}, DType::f16, 1, DType::f32, 0},
    {"fp8", Scales::per_head, KVFormat::fp8_per_head, DType::e4m3, 1, DType::f32, 0},
    {"fp8-token", Scales::per_token, KVFormat::fp8_per_token, DType::e4m3, 1, DType::f32, 0},
    {"nvfp4", Scales::per_block, KVFormat::nvfp4, DType::fp4_e2m1x2, 2, DType::e4m3, 16},
    {"mxfp4", Scales::per_block, KVFormat::mxfp4, DType::fp4_e2m1x2, 2, DType::ue8m0, 32},
};

// MLA's shape and FP8 cache (hfa.h, HFA_FP8_MLA): rows of 576 values, the first 512 also V;
// FlashMLA's 656-byte records, the scales inside them, written by hfa_quantize_kv.
constexpr int64_t kMlaHeadDim = 576, kMlaLatentDim = 512, kMlaRecordBytes = 656;
constexpr Format kMlaFp8{"fp8", Scales::none, KVFormat::fp8_mla, DType::fp8_mla, 1, DType::f32, 0};

const Format& format_of(const CacheSpec& cache) {
  if (cache.mla && cache.format == "fp8") return kMlaFp8;
  for (const Format& f : kFormats)
    if (cache.format == f.name) return f;
  return kFormats[0];  // Args::choice let only the names above through
}

// Bytes of one MLA cache row: a bf16 row of 576, or one FP8 record.
int64_t mla_row_bytes(const Format& f) {
  return f.codes == DType::fp8_mla ? kMlaRecordBytes : kMlaHeadDim * 2;
}

// Scales for the formats whose scale is an input: FP8 per kv-head saturates at 8 (4.5 standard
// deviations of the random values above 448 · scale are rare), NVFP4's global scale keeps the
// e4m3 block scales (amax / 6 / global) in range.
constexpr float kFp8HeadScale = 8.0f / 448.0f;
constexpr float kNvfp4GlobalScale = 1.0f / 256.0f;

struct PageCount {
  int64_t pages = 1, max_pages = 1;  // in the cache, of the longest sequence; at least 1 each
};
PageCount count_pages(const Spec& s, int64_t page) {
  PageCount count{0, 0};
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t n = (s.seqlen_k_of(b) + page - 1) / page;
    count.pages += n;
    count.max_pages = std::max(count.max_pages, n);
  }
  return {std::max<int64_t>(count.pages, 1), std::max<int64_t>(count.max_pages, 1)};
}

// Bytes of one cached token's row of codes in one kv-head, and of its scales when they go by
// token or block.
double code_row_bytes(const Format& f, int64_t dim) {
  return static_cast<double>(dim / f.values_per_code * dtype_size(f.codes));
}
double scale_row_bytes(const Format& f, int64_t dim) {
  if (f.scales == Scales::per_token) return static_cast<double>(dtype_size(f.scale));
  if (f.scales == Scales::per_block) return static_cast<double>(dim / f.block * dtype_size(f.scale));
  return 0;
}

}  // namespace

double cache_bytes_read(const Spec& s, const CacheSpec& cache) {
  const Format& f = format_of(cache);
  // MLA reads each row once, for K and V both (FlashMLA's counting).
  if (cache.mla) return static_cast<double>(s.total_k()) * mla_row_bytes(f);
  double bytes = static_cast<double>(s.total_k()) * s.kv_heads;
  bytes *= code_row_bytes(f, s.hdim) + scale_row_bytes(f, s.hdim) + code_row_bytes(f, s.hdim_v) +
           scale_row_bytes(f, s.hdim_v);
  if (f.scales == Scales::per_head) bytes += 2.0 * s.kv_heads * sizeof(float);
  return bytes;
}

Footprint kvcache_footprint(const Spec& s, const CacheSpec& cache) {
  const Format& f = format_of(cache);
  const PageCount count = count_pages(s, cache.page_size);
  const double slots = static_cast<double>(count.pages) * cache.page_size * s.kv_heads;
  const double gathered = static_cast<double>(s.total_k()) * s.kv_heads;
  const double rows_q = static_cast<double>(s.batch) * s.seqlen_q * s.heads;
  // On the host: each side's values (f32), its codes and scales, and the gathered f32 copy the
  // check reads; q (and its f32 copy), out and lse (and the check's copies), the page table.
  double host = rows_q * (s.hdim * (dtype_size(s.dtype) + 4.0) + 2 * (s.hdim_v * dtype_size(s.dtype) + 4.0)) +
                static_cast<double>(s.batch) * (count.max_pages + 1) * 4.0;
  // On the device: each side's codes and scales, and its values uploaded for quantize_kv; q, out, lse.
  double device = rows_q * (s.hdim * dtype_size(s.dtype) + s.hdim_v * dtype_size(s.dtype) + 4.0);
  for (int64_t dim : {s.hdim, s.hdim_v}) {
    const double scales = f.scales == Scales::per_block  // rows padded to 4 bytes (make_side)
                              ? static_cast<double>((dim / f.block + 3) / 4 * 4 * dtype_size(f.scale))
                              : scale_row_bytes(f, dim);
    const double stored = slots * (code_row_bytes(f, dim) + scales);
    host += slots * dim * 4.0 + stored + gathered * dim * 4.0;
    device += stored + slots * dim * 4.0;
  }
  host += reference_check_bytes(s, false, DType::f32);
  Footprint footprint;
  if (s.device.kind == DeviceKind::cpu)
    footprint.host_bytes = host + device;
  else
    footprint.host_bytes = host, footprint.device_bytes = device;
  return footprint;
}

SampleTiming time_kvcache(const Spec& sample, const CacheSpec& cache) {
  SampleTiming timing;
  const auto start = std::chrono::steady_clock::now();
  KVCacheWorkload workload(sample, cache, 0);
  synchronize(sample.device);
  timing.setup_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Status status;
  const Timing t = time_calls(sample.device, 1, 1, [&] { return workload.forward(); }, &status);
  if (!status) throw WorkloadError(status);
  timing.call_seconds.push_back(t.median_ms * 1e-3);
  return timing;
}

CacheSpec parse_kvcache(Args& args, Spec* spec, bool mla) {
  if (args.value("seqlen-k")) throw UsageError("--seqlen-k: not with --kvcache (the cache length is --cache-len)");
  for (const char* other : {"varlen", "varlen-k"})
    if (args.value(other)) throw UsageError(std::string("--") + other + ": not with --kvcache");
  for (const char* other : {"sinks", "backward"})
    if (args.flag(other))
      throw UsageError(std::string("--") + other + ": not with --kvcache (a decode is one forward over the cache)");
  CacheSpec cache;
  cache.mla = mla;
  cache.format = mla ? args.choice("cache-format", "bf16", {"bf16", "fp8"})
                     : args.choice("cache-format", "",
                                   {"bf16", "fp16", "fp8", "fp8-token", "nvfp4", "mxfp4"});
  if (mla) {
    const std::pair<const char*, int> fixed[] = {
        {"hdim", kMlaHeadDim}, {"hdim-v", kMlaLatentDim}, {"kv-heads", 1}};
    for (const auto& [flag, want] : fixed)
      if (const auto given = args.value(flag); given && *given != std::to_string(want))
        throw UsageError(std::string("--") + flag + ": MLA's is " + std::to_string(want) +
                         ", got " + *given);
    spec->heads = 16;
    spec->hdim = kMlaHeadDim;
  }
  cache.page_size = args.integer("page-size", cache.page_size, 1, 1 << 20);
  const std::vector<int64_t> lengths = args.integers("cache-len", {1024}, 0, INT32_MAX);
  if (cache.format == "fp16") spec->dtype = DType::f16;  // the default queries of a plain fp16 cache
  if (lengths.size() > 1) spec->batch = static_cast<int64_t>(lengths.size());
  spec->seqlen_q = 1;
  parse_spec(args, spec);
  if (mla) {  // parse_spec's defaults follow --heads and --hdim
    spec->kv_heads = 1;
    spec->hdim_v = kMlaLatentDim;
    if (spec->dtype != DType::bf16)
      throw UsageError("--dtype: MLA's queries are bf16 (FlashMLA's), got " +
                       std::string(dtype_name(spec->dtype)));
  }

  if (cache.format.empty()) cache.format = spec->dtype == DType::f16 ? "fp16" : "bf16";
  const Format& f = format_of(cache);
  if (!mla && f.scales == Scales::none && spec->dtype != f.codes)
    throw UsageError("--cache-format " + cache.format + ": a plain cache has the queries' dtype, not --dtype " +
                     dtype_name(spec->dtype) + " (pick a quantized format, or --dtype to match)");
  for (const auto& [flag, dim] : {std::pair{"--hdim", spec->hdim}, std::pair{"--hdim-v", spec->hdim_v}})
    if (f.block > 0 && dim % f.block != 0)
      throw UsageError(std::string(flag) + ": " + cache.format + " caches need a multiple of " +
                       std::to_string(f.block) + ", got " + std::to_string(dim));
  if (lengths.size() > 1 && static_cast<int64_t>(lengths.size()) != spec->batch)
    throw UsageError("--cache-len: " + std::to_string(lengths.size()) + " lengths for --batch " +
                     std::to_string(spec->batch));
  spec->varlen_k = lengths.size() > 1 ? lengths : std::vector<int64_t>(spec->batch, lengths[0]);
  spec->seqlen_k = spec->batch > 0 ? *std::max_element(spec->varlen_k.begin(), spec->varlen_k.end()) : 0;
  return cache;
}

KVCacheWorkload::KVCacheWorkload(const Spec& spec, const CacheSpec& cache, uint64_t seed)
    : spec_(spec), cache_(cache) {
  const Spec& s = spec_;
  const Format& f = format_of(cache);
  std::mt19937_64 rng(seed);

  // The page table: each sequence's pages, in a shuffled order over the whole cache.
  const int64_t page = cache.page_size;
  const PageCount count = count_pages(s, page);
  pages_ = count.pages;
  max_pages_ = count.max_pages;
  std::vector<int32_t> order(pages_);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  table_ = HostArray(DType::i32, s.batch * max_pages_);
  HostArray lengths(DType::i32, s.batch);
  auto* table = static_cast<int32_t*>(table_.data());
  std::fill(table, table + table_.size(), 0);  // unused entries: any valid page
  for (int64_t b = 0, next = 0; b < s.batch; ++b) {
    static_cast<int32_t*>(lengths.data())[b] = static_cast<int32_t>(s.seqlen_k_of(b));
    for (int64_t i = 0; i < (s.seqlen_k_of(b) + page - 1) / page; ++i) table[b * max_pages_ + i] = order[next++];
  }
  table_dev_ = to_device(s.device, table_, {s.batch, max_pages_}, true);
  lengths_dev_ = to_device(s.device, lengths, {s.batch}, true);
  if (f.kv == KVFormat::nvfp4) {
    global_ = HostArray(DType::f32, 1);
    global_.set(0, kNvfp4GlobalScale);
    global_dev_ = to_device(s.device, global_, {1}, true);
    options_.k_global_scale = options_.v_global_scale = &global_dev_.tensor;
  }

  if (cache.mla) {
    k_ = make_mla_cache(rng);
    v_.codes.tensor = k_.codes.tensor;  // the view of each row's first 512 values (or bytes)
    v_.codes.tensor.shape[3] = kMlaLatentDim;
  } else {
    k_ = make_side(s.hdim, rng);
    v_ = make_side(s.hdim_v, rng);
  }
  q_ = HostArray(s.dtype, s.batch * s.seqlen_q * s.heads * s.hdim);
  q_.fill_normal(rng);
  out_ = HostArray(s.dtype, s.batch * s.seqlen_q * s.heads * s.hdim_v);
  lse_ = HostArray(DType::f32, s.batch * s.heads * s.seqlen_q);
  q_dev_ = to_device(s.device, q_, {s.batch, s.seqlen_q, s.heads, s.hdim}, true);
  out_dev_ = to_device(s.device, out_, {s.batch, s.seqlen_q, s.heads, s.hdim_v}, false);
  lse_dev_ = to_device(s.device, lse_, {s.batch, s.heads, s.seqlen_q}, false);

  options_.cache_seqlens = &lengths_dev_.tensor;
  options_.block_table = &table_dev_.tensor;
  if (f.scales != Scales::none) {
    options_.k_scale = &k_.scale.tensor;
    options_.v_scale = &v_.scale.tensor;
  }
  options_.causal = s.causal;
  options_.window_left = s.window_left;
  options_.window_right = s.window_right;
  options_.softcap = s.softcap;
  options_.sm_margin = s.sm_margin;
  std::size_t bytes = 0;
  const Status status = forward_kvcache_workspace_size(q_dev_.tensor, k_.codes.tensor, v_.codes.tensor, options_, &bytes);
  if (!status) throw WorkloadError(status);
  if (bytes > 0) {
    workspace_ = std::make_unique<DeviceMemory>(s.device, bytes);
    options_.workspace = workspace_->data();
    options_.workspace_bytes = bytes;
  }
  bytes_read_ = cache_bytes_read(s, cache);
}

KVCacheWorkload::Side KVCacheWorkload::make_side(int64_t dim, std::mt19937_64& rng) {
  const Spec& s = spec_;
  const Format& f = format_of(cache_);
  const int64_t page = cache_.page_size, heads = s.kv_heads;
  Side side;
  side.values = HostArray(DType::f32, pages_ * page * heads * dim);
  side.values.fill_normal(rng);
  HostArray codes(f.codes, pages_ * page * heads * dim / f.values_per_code);
  if (f.scales == Scales::none) {  // plain: the values rounded to the cache's dtype
    for (int64_t i = 0; i < codes.size(); ++i) {
      codes.set(i, side.values.get(i));
      side.values.set(i, codes.get(i));
    }
    side.codes = to_device(s.device, codes, {pages_, page, heads, dim}, true);
    return side;
  }

  // Block scales: rows padded to 4 bytes, as a GPU reads them (MXFP4 at d = 64 has 2).
  const int64_t scales_per_row = f.scales == Scales::per_block ? dim / f.block : 1;
  const int64_t padded = f.scales == Scales::per_block ? (scales_per_row + 3) / 4 * 4 : 1;
  HostArray scale(f.scale, f.scales == Scales::per_head ? heads : pages_ * page * heads * padded);
  if (f.scales == Scales::per_head)
    for (int64_t h = 0; h < heads; ++h) scale.set(h, kFp8HeadScale);  // an input of both directions
  const auto scale_view = [&](void* data, Device device) {
    if (f.scales == Scales::per_head) return make_tensor(data, f.scale, {heads}, {}, device);
    if (f.scales == Scales::per_token) return make_tensor(data, f.scale, {pages_, page, heads}, {}, device);
    return make_tensor(data, f.scale, {pages_, page, heads, scales_per_row},
                       {page * heads * padded, heads * padded, padded, 1}, device);
  };
  const DeviceTensor x = to_device(s.device, side.values, {pages_, page, heads, dim}, true);
  side.codes = to_device(s.device, codes, {pages_, page, heads, dim / f.values_per_code}, false);
  side.scale = to_device(s.device, scale, {scale.size()}, f.scales == Scales::per_head);
  side.scale.tensor = scale_view(side.scale.memory->data(), s.device);
  QuantizeOptions options{f.kv, f.kv == KVFormat::nvfp4 ? &global_dev_.tensor : nullptr, nullptr};
  Status status = quantize_kv(x.tensor, side.codes.tensor, side.scale.tensor, options);
  if (!status) throw WorkloadError(status);

  // What the decode reads back: the codes and scales as stored, dequantized on the host.
  synchronize(s.device);
  side.codes.memory->download(&codes);
  side.scale.memory->download(&scale);
  const Tensor global = make_tensor(global_.data(), DType::f32, {1});
  options.global_scale = f.kv == KVFormat::nvfp4 ? &global : nullptr;
  status = dequantize_kv(make_tensor(codes.data(), f.codes, {pages_, page, heads, dim / f.values_per_code}),
                         scale_view(scale.data(), Device::cpu()),
                         make_tensor(side.values.data(), DType::f32, {pages_, page, heads, dim}), options);
  if (!status) throw WorkloadError(status);
  return side;
}

KVCacheWorkload::Side KVCacheWorkload::make_mla_cache(std::mt19937_64& rng) {
  const Format& f = format_of(cache_);
  const int64_t rows = pages_ * cache_.page_size, d = kMlaHeadDim;
  const int64_t row_extent = f.codes == DType::fp8_mla ? kMlaRecordBytes : d;
  Side side;
  side.values = HostArray(DType::f32, rows * d);
  side.values.fill_normal(rng);
  HostArray codes(f.codes, rows * row_extent);
  auto* values = static_cast<float*>(side.values.data());
  if (f.codes == DType::fp8_mla) {  // the records, and what they hold as the decode reads them
    const Tensor x = make_tensor(values, DType::f32, {rows, 1, d});
    const Tensor records = make_tensor(codes.data(), DType::fp8_mla, {rows, 1, row_extent});
    const QuantizeOptions options{KVFormat::fp8_mla, nullptr, nullptr};
    Status status = quantize_kv(x, records, options);
    if (status) status = dequantize_kv(records, x, options);
    if (!status) throw WorkloadError(status);
  } else {  // bf16 rows, and the values they round to
    for (int64_t i = 0; i < rows * d; ++i) {
      codes.set(i, values[i]);
      values[i] = codes.get(i);
    }
  }
  side.codes = to_device(spec_.device, codes, {pages_, cache_.page_size, 1, row_extent}, true);
  return side;
}

Status KVCacheWorkload::forward() {
  return forward_kvcache(q_dev_.tensor, k_.codes.tensor, v_.codes.tensor, out_dev_.tensor, &lse_dev_.tensor,
                         options_);
}

// The cached tokens of every sequence in order, through the page table: (total, kv_heads, dim),
// the first dim of each `width` values a kv-head holds (MLA's V: 512 of the 576).
HostArray KVCacheWorkload::gather(const Side& side, int64_t dim, int64_t width) const {
  const Spec& s = spec_;
  const int64_t row = s.kv_heads * dim, page = cache_.page_size;
  HostArray packed(DType::f32, s.total_k() * row);
  auto* to = static_cast<float*>(packed.data());
  const auto* from = static_cast<const float*>(side.values.data());
  const auto* table = static_cast<const int32_t*>(table_.data());
  for (int64_t b = 0, first = 0; b < s.batch; first += s.seqlen_k_of(b++))
    for (int64_t j = 0; j < s.seqlen_k_of(b); ++j) {
      const int64_t slot = table[b * max_pages_ + j / page] * page + j % page;
      for (int64_t h = 0; h < s.kv_heads; ++h)
        std::memcpy(to + (first + j) * row + h * dim, from + (slot * s.kv_heads + h) * width,
                    dim * sizeof(float));
    }
  return packed;
}

HostProblem KVCacheWorkload::reference() {
  synchronize(spec_.device);
  out_dev_.memory->download(&out_);
  lse_dev_.memory->download(&lse_);
  HostProblem problem(spec_);
  problem.q = HostArray(DType::f32, q_.size());
  for (int64_t i = 0; i < q_.size(); ++i) problem.q.set(i, q_.get(i));
  problem.k = gather(k_, spec_.hdim, spec_.hdim);
  problem.v = cache_.mla ? gather(k_, spec_.hdim_v, spec_.hdim)  // V: K's first 512 columns
                         : gather(v_, spec_.hdim_v, spec_.hdim_v);
  problem.out = out_;
  problem.lse = lse_;
  return problem;
}

}  // namespace hfa::tool
