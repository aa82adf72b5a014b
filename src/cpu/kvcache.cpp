#include "cpu/kvcache.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "common/combine_splits.hpp"
#include "common/half_float.hpp"
#include "cpu/kvcache_append.hpp"
#include "cpu/kvcache_rows.hpp"
#include "cpu/logit_mods.hpp"
#include "cpu/sequence.hpp"
#include "cpu/thread_pool.hpp"

namespace hfa::cpu {
namespace {

using detail::KVCacheProblem;

constexpr int64_t kKeysPerAutoSplit = 256;
constexpr int32_t kMaxAutoSplits = 8;

std::size_t element_bytes(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

// The cache tokens a sequence attends to. The API checked 0 <= length <= capacity; the clamp
// keeps a direct backend caller inside the cache.
int64_t cache_length(const KVCacheProblem& p, int64_t b) {
  return std::clamp<int64_t>(p.attended_length(b), 0, int64_t{p.max_pages} * p.page_size);
}

// Scratch of one worker, carved from one allocation a call: a sequence's dequantized K and V rows
// for one kv-head (room for the longest), and one query row's partial results per split. Each part
// is written before it is read, so nothing is zeroed (six vectors, and resizing K and V for each
// group, allocated and zeroed that much more a call).
struct Scratch {
  std::unique_ptr<float[]> storage;
  float* k = nullptr;            // (keys, hdim_qk)
  float* v = nullptr;            // (keys, hdim_v)
  float* q = nullptr;            // (hdim_qk)
  float* partial_out = nullptr;  // (splits, hdim_v)
  float* partial_lse = nullptr;  // (splits)
  float* out = nullptr;          // (hdim_v)

  void allocate(int64_t keys, int64_t hdim_qk, int64_t hdim_v, int64_t splits) {
    const int64_t sizes[] = {keys * hdim_qk, keys * hdim_v, hdim_qk, splits * hdim_v, splits, hdim_v};
    float** const parts[] = {&k, &v, &q, &partial_out, &partial_lse, &out};
    int64_t total = 0;
    for (const int64_t size : sizes) total += size;
    storage = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(total));
    float* at = storage.get();
    for (std::size_t part = 0; part < std::size(sizes); ++part) {
      *parts[part] = at;
      at += sizes[part];
    }
  }
};

// Online softmax over keys [first, last] for one query row: the normalized output of those keys
// and their log-sum-exp (−inf and zeros when the range is empty). Key j's logit is the
// modifiers' at the pair (row's query, j).
float attend(const KVCacheProblem& p, const Scratch& s, int64_t first, int64_t last,
             const LogitMods& mods, const policy::ScorePosition& row, float* o) {
  const int dk = p.hdim_qk;
  const int dv = p.hdim_v;
  std::fill(o, o + dv, 0.0f);
  if (first > last) return -INFINITY;
  float running_max = -INFINITY;
  float running_sum = 0.0f;
  for (int64_t j = first; j <= last; ++j) {
    const float* key = s.k + j * dk;
    float score = 0.0f;
    for (int c = 0; c < dk; ++c) score += s.q[c] * key[c];
    score *= p.softmax_scale;
    score = mods.logit(score, {row.query, static_cast<int>(j), row.diagonal});
    // A new maximum rescales what has been accumulated so far, keeping every exp <= 1.
    if (score > running_max) {
      const float rescale = running_max == -INFINITY ? 0.0f : std::exp(running_max - score);
      running_sum *= rescale;
      for (int c = 0; c < dv; ++c) o[c] *= rescale;
      running_max = score;
    }
    const float weight = std::exp(score - running_max);
    running_sum += weight;
    const float* value = s.v + j * dv;
    for (int c = 0; c < dv; ++c) o[c] += weight * value[c];
  }
  // NaN scores (a NaN in the cache) make the sum NaN, and so o and the LSE: never hidden.
  for (int c = 0; c < dv; ++c) o[c] /= running_sum;
  return running_max + std::log(running_sum);
}

// Sparse attention: the valid tokens query row i of sequence b lists, gathered into s.k / s.v
// in their order (-1 entries skipped); their count.
int64_t gather_indexed(const KVCacheProblem& p, int64_t b, int64_t i, int64_t kv_head,
                       Scratch& s) {
  const int64_t row = p.query_begin(b) + i;  // of the packed q when varlen
  const int32_t* listed = p.indices + b * p.indices_batch_stride + row * p.indices_row_stride;
  int64_t n = 0;
  for (int64_t k = 0; k < p.topk; ++k) {
    const int64_t token = listed[k];
    if (token < 0) continue;  // padding (the API admits -1 only)
    const int64_t page = token / p.page_size, slot = token % p.page_size;
    decode_row(p.format, p.cache_dtype, p.k, page, slot, kv_head, s.k + n * p.hdim_qk);
    decode_row(p.format, p.cache_dtype, p.v, page, slot, kv_head, s.v + n * p.hdim_v);
    ++n;
  }
  return n;
}

// One (sequence, kv-head): every query head of its GQA group shares the gathered rows (a
// sparse call's rows are each query row's own).
void run_group(const KVCacheProblem& p, int64_t b, int64_t kv_head, Scratch& s) {
  const bool sparse = p.indices != nullptr;
  int64_t seqlen_k = sparse ? p.topk : cache_length(p, b);  // within the scratch's keys
  if (!sparse) {
    for (int64_t j = 0; j < seqlen_k; ++j) {
      load_cache_row(p, p.k, b, j, kv_head, s.k + j * p.hdim_qk);
      load_cache_row(p, p.v, b, j, kv_head, s.v + j * p.hdim_v);
    }
  }

  const int64_t group = p.heads_q / p.heads_kv;
  const std::size_t q_bytes = element_bytes(p.dtype);
  const std::size_t out_bytes = element_bytes(p.out_dtype);
  const int64_t seqlen_q = p.query_rows(b);
  const int64_t first_row = p.query_begin(b);
  for (int64_t i = 0; i < seqlen_q; ++i) {
    const int64_t row = first_row + i;
    // A sparse row sees all its gathered keys; a dense one its window of the cache.
    if (sparse) seqlen_k = gather_indexed(p, b, i, kv_head, s);
    const KeyWindow window(seqlen_q, seqlen_k, sparse ? -1 : p.window_left,
                           sparse ? -1 : p.window_right);
    const policy::ScorePosition row_position{static_cast<int>(i), 0,
                                             static_cast<int>(seqlen_k - seqlen_q)};
    const int32_t splits = kvcache_splits(p, seqlen_k);
    // Keys per split: fixed (split_size, the same boundaries whatever the batch) or even.
    const int64_t chunk = p.split_size > 0 ? p.split_size
                                           : std::max<int64_t>(1, (seqlen_k + splits - 1) / splits);
    for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
      const int64_t q_offset = b * p.q_stride.batch + row * p.q_stride.row + h * p.q_stride.head;
      load_plain_row(p.dtype, static_cast<const std::byte*>(p.q) + q_offset * q_bytes, p.hdim_qk,
                     s.q);
      if (p.rotary_cos != nullptr) apply_rotary(p, query_position(p, b, i), s.q);
      // ALiBi: never with indices (validate_kvcache refuses the pair).
      const LogitMods mods(p, b, h);
      for (int32_t split = 0; split < splits; ++split) {
        const int64_t first = std::max(window.first(i), split * chunk);
        const int64_t last = std::min(window.last(i), (split + 1) * chunk - 1);
        s.partial_lse[split] = attend(p, s, first, last, mods, row_position,
                                     s.partial_out + split * p.hdim_v);
      }
      const float lse = detail::combine_splits(s.partial_lse, s.partial_out, p.hdim_v, splits,
                                               p.hdim_v, s.out);
      const int64_t out_offset =
          b * p.out_stride.batch + row * p.out_stride.row + h * p.out_stride.head;
      store_plain_row(p.out_dtype, s.out, p.hdim_v,
                static_cast<std::byte*>(p.out) + out_offset * out_bytes);
      if (p.lse != nullptr) p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + row] = lse;
    }
  }
}

}  // namespace

int32_t kvcache_splits(const KVCacheProblem& p, int64_t seqlen_k) {
  if (p.split_size > 0) return static_cast<int32_t>(std::max<int64_t>(1, (seqlen_k + p.split_size - 1) / p.split_size));
  if (p.num_splits > 0) return p.num_splits;
  return static_cast<int32_t>(std::clamp<int64_t>(seqlen_k / kKeysPerAutoSplit, 1, kMaxAutoSplits));
}

Status kvcache_forward(const KVCacheProblem& p) {
  if (p.k_new != nullptr) append_new_tokens(p);  // before any row is read
  ThreadPool& pool = ThreadPool::shared();
  // Scratch is allocated here, where an allocation failure can still become a Status (the API's
  // guard turns bad_alloc into one), with room for the longest sequence's K/V rows: the workers
  // allocate nothing.
  int64_t longest = 0;
  if (p.indices != nullptr) {  // a row's keys are at most its topk indices
    longest = p.topk;
  } else {
    for (int64_t b = 0; b < p.batch; ++b) longest = std::max(longest, cache_length(p, b));
  }
  int32_t most_splits = 1;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t keys = p.indices != nullptr ? p.topk : cache_length(p, b);
    most_splits = std::max(most_splits, kvcache_splits(p, keys));
  }
  std::vector<Scratch> scratch(static_cast<std::size_t>(pool.thread_count()));
  for (Scratch& s : scratch) s.allocate(longest, p.hdim_qk, p.hdim_v, most_splits);
  pool.parallel_for(int64_t{p.batch} * p.heads_kv, [&](int64_t item, int thread) {
    run_group(p, item / p.heads_kv, item % p.heads_kv, scratch[static_cast<std::size_t>(thread)]);
  });
  return Status::ok();
}

}  // namespace hfa::cpu
