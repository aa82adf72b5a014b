// What the split-KV decode kernel and its combine kernel read: plain pointers, strides and
// scalars, built on the host from a KVCacheProblem (launch.cuh).
#pragma once

#include <cstdint>

#include "common/score_policy.hpp"
#include "sm90/decode/split_schedule.hpp"

namespace hfa::sm90::decode {

// The cache storage formats the kernel is compiled for. FP8 per-head and per-token scales share
// one instantiation (a runtime flag), as do NVFP4 and MXFP4 (their block scales differ only in
// how a scale byte becomes a multiplier).
enum class Storage { plain, fp8, fp4 };

enum class ScaleKind : int32_t {
  none,          // plain cache
  fp8_per_head,  // one fp32 per kv-head: folded into the score multiplier (K) and the output (V)
  fp8_per_token, // one fp32 per (token, kv-head)
  nvfp4,         // one E4M3 byte per 16 values, times a per-tensor fp32
  mxfp4,         // one UE8M0 byte per 32 values
};

// One side of the cache (K or V). Strides in bytes.
struct CacheView {
  const unsigned char* data = nullptr;
  int64_t page_stride = 0, slot_stride = 0, head_stride = 0;
  const unsigned char* scale = nullptr;  // per token (fp8), per block (fp4); null otherwise
  int64_t scale_page_stride = 0, scale_slot_stride = 0, scale_head_stride = 0;
  const float* head_scale = nullptr;     // fp8 per kv-head: indexed by head_scale_stride·head
  int64_t head_scale_stride = 0;
  const float* global_scale = nullptr;   // NVFP4
};

struct Params {
  // Varlen queries (cu_seqlens_q, batch + 1): q and out are (total_q, heads, d), batch strides
  // 0; null: fixed length. sequence.cuh reads a sequence's rows and keys.
  const int32_t* cu_seqlens_q = nullptr;
  const void* q = nullptr;
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;  // elements
  void* out = nullptr;
  int64_t out_batch_stride = 0, out_row_stride = 0, out_head_stride = 0;  // elements
  // Query rows are numbered in lse's order: b·row_id_batch_stride + h·row_id_head_stride + token,
  // (batch, heads_q, seqlen_q), or (heads_q, total_q) for varlen (batch stride 0).
  int64_t row_id_batch_stride = 0, row_id_head_stride = 0;
  float* lse = nullptr;  // contiguous, indexed by row id; null: not wanted

  CacheView k, v;
  ScaleKind scale_kind = ScaleKind::none;

  const int32_t* cache_seqlens = nullptr;
  const int32_t* block_table = nullptr;  // null: contiguous cache (page b for sequence b)
  int64_t block_table_stride = 0;
  int32_t max_pages = 1;
  int32_t page_size = 0;
  int32_t page_shift = -1;  // log2(page_size) when it is a power of two (no division per key)
  int32_t capacity = 0;  // max_pages · page_size: lengths are clamped to it
  int32_t seqlen_new = 0;  // tokens appended before the attention (keys: cache_seqlens[b] + this)
  // Varlen new tokens (cu_seqlens_k_new, batch + 1): sequence b appended
  // cu_seqlens_k_new[b + 1] - cu_seqlens_k_new[b] tokens instead; null: seqlen_new each.
  const int32_t* cu_seqlens_k_new = nullptr;

  int32_t batch = 0, heads_q = 0, heads_kv = 0, group = 0;
  int32_t seqlen_q = 0;   // varlen: max_seqlen_q (at most total_q)
  int32_t rows = 0;       // group · seqlen_q query rows share one kv-head's keys (at most)
  int32_t row_tiles = 0;  // ceil(rows / 16)
  // The uniform plan's CTAs per row tile along the keys; with split_size, the most chunks (1
  // under the balanced schedule, below).
  int32_t num_splits = 1;
  // > 0: split s of every sequence takes keys [s·split_size, (s+1)·split_size), so a sequence's
  // result does not depend on the batch; 0: the keys split evenly into num_splits.
  int32_t split_size = 0;

  float softmax_scale = 0.0f;
  float softcap = 0.0f;  // 0: off
  // ALiBi (slopes null: none), added after the scale and the cap, in their log2 domain: a unit
  // of those scores is ln 2 of a logit.
  policy::AlibiSlopes alibi{};
  int32_t window_left = -1, window_right = -1;

  // Split partials, in the caller's workspace. The uniform plan's (num_splits > 1): partial_lse
  // (rows_total, num_splits) and partial_out (num_splits, rows_total, hdim) by row id,
  // rows_total = heads_q · (batch·seqlen_q, or total_q for varlen); every split of a row writes
  // its partial (LSE −inf when it holds no key the row sees), so the combine reads nothing
  // unwritten. The balanced schedule's: the slots of split sequences (work.cuh, PartialRows).
  float* partial_lse = nullptr;
  float* partial_out = nullptr;
  int64_t rows_total = 0;

  // The balanced schedule (split_schedule.hpp; MLA's kernels when the call fixes no split), in
  // the workspace after the partials, written by the schedule kernel before the attention
  // reads it: `parts` persistent CTAs per (kv-head, row tile). Null: the uniform plan.
  schedule::PartStart* part_starts = nullptr;
  int32_t* first_slot = nullptr;
  int32_t parts = 0;
};

}  // namespace hfa::sm90::decode
