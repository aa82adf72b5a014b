// The KV-cache (decode) attention problem as a backend sees it: validated, defaults resolved,
// strides in elements of each tensor's own dtype (bytes for the one-byte formats). The API
// layer builds it (src/api/validate_kvcache.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/host_device.hpp"
#include "common/option_values.hpp"
#include "common/problem.hpp"

namespace hfa::detail {

// How a cache row of d values is stored.
enum class CacheFormat {
  plain,          // the cache's dtype (f32, f16, bf16), no scale
  fp8_per_head,   // E4M3 codes, fp32 scale per kv-head
  fp8_per_token,  // E4M3 codes, fp32 scale per (token, kv-head)
  nvfp4,          // packed E2M1, E4M3 scale per 16 values, fp32 global scale
  mxfp4,          // packed E2M1, UE8M0 scale per 32 values
  mla_fp8,        // FlashMLA's 656-byte FP8 MLA record (quant/mla_fp8.hpp), scales inside it;
                  // K and V sides point at the same records (V: the first 512 values)
};

// A (page, slot, head, ...) tensor: the element (page, slot, head) starts at
// page·page + slot·slot + head·head. A per-kv-head scale vector has page = slot = 0.
struct PagedStrides {
  int64_t page = 0;
  int64_t slot = 0;
  int64_t head = 0;

  HFA_HD constexpr int64_t offset(int64_t at_page, int64_t at_slot, int64_t at_head) const {
    return at_page * page + at_slot * slot + at_head * head;
  }
};

// One side of the cache (K or V).
struct CacheSide {
  const void* data = nullptr;  // codes (or plain values)
  PagedStrides stride;         // in elements of data's storage type (bytes for FP4 and FP8)
  const void* scale = nullptr;  // fp32 (FP8), E4M3 bytes (NVFP4), UE8M0 bytes (MXFP4); null: plain
  PagedStrides scale_stride;    // in scale elements
  const float* global_scale = nullptr;  // NVFP4: one fp32
  int32_t hdim = 0;                     // values per row (not bytes)
};

struct KVCacheProblem {
  DType dtype = DType::bf16;        // of q
  DType out_dtype = DType::bf16;    // of out (= q's)
  DType cache_dtype = DType::bf16;  // of the caches' storage
  CacheFormat format = CacheFormat::plain;

  int32_t batch = 0;
  int32_t seqlen_q = 0;  // varlen: max_seqlen_q
  int32_t heads_q = 0;
  int32_t heads_kv = 0;  // heads_q % heads_kv == 0
  int32_t hdim_qk = 0;
  int32_t hdim_v = 0;

  // Sparse (top-k) attention, DeepSeek-V3.2's: query row i of sequence b attends to the cache
  // tokens indices[b·indices_batch_stride + i·indices_row_stride + n], n < topk, each the flat
  // token page·page_size + slot of the cache (the page table folded in), -1 for none. Null:
  // dense (cache_seqlens and the block table say the keys). With indices there is no
  // cache_seqlens, block table, causal or window (the API rejects them).
  const int32_t* indices = nullptr;
  int64_t indices_batch_stride = 0;
  int64_t indices_row_stride = 0;
  int32_t topk = 0;

  // Varlen queries: int32 offsets (batch + 1) on q's device; null: fixed length. q and out are
  // then (total_q, heads, d) with batch stride 0, and sequence b's rows are the tokens
  // cu_seqlens_q[b] + i, i < its row count: one addressing for both, through query_begin().
  const int32_t* cu_seqlens_q = nullptr;
  int64_t total_q = 0;  // varlen: q's first extent

  const void* q = nullptr;
  void* out = nullptr;
  Strides q_stride, out_stride;
  // Row i of head h of sequence b at b·lse_batch_stride + h·lse_head_stride + query_begin(b) + i:
  // (batch, heads_q, seqlen_q), or (heads_q, total_q) for varlen (batch stride 0). Null: not wanted.
  float* lse = nullptr;
  int64_t lse_batch_stride = 0;
  int64_t lse_head_stride = 0;

  // Token j of sequence b lives in page page_of(b, j / page_size), slot j % page_size. A
  // contiguous cache (batch, max_seqlen_cache, ...) is the paged one with one page per sequence:
  // page_size = max_seqlen_cache and no block table (page b for sequence b).
  const int32_t* cache_seqlens = nullptr;  // (batch), contiguous
  const int32_t* block_table = nullptr;    // (batch, max_pages); null: contiguous cache
  int64_t block_table_stride = 0;          // between sequences, in elements
  int32_t max_pages = 1;                   // block_table's second extent (1 when contiguous)
  int32_t page_size = 0;
  int64_t num_pages = 0;
  CacheSide k, v;

  // Every option that is a value (hfa/options.def's HFA_KVCACHE_OPTION rows but the tensors), one
  // member each, of its row's name, as ForwardProblem's: softmax_scale, the window and causal
  // resolved alike (seqlen_k = cache_seqlens[b]). num_splits 0: the backend chooses; split_size
  // > 0: keys per split, fixed boundaries (batch-invariant), excluding num_splits. validate is
  // resolved too (the option or HFA_VALIDATE_KVCACHE): the API has then read cache_seqlens,
  // block_table and the varlen offsets back from the device and checked them, as it always does
  // for CPU tensors; a backend never checks them. sm_margin: SMs to leave free (the GPU plans
  // its automatic splits for the others). rotary_interleaved is read with rotary tables only.
#define HFA_KVCACHE_OPTION(kind, name, value, ...) HFA_PROBLEM_VALUE_##kind(name, value)
#include "hfa/options.def"

  // Append (k_new / v_new): new_tokens(b) tokens of sequence b written at cache_seqlens[b] + i
  // before the attention, which then covers attended_length(b) keys.
  const void* k_new = nullptr;  // null: no append
  // Null with k_new: MLA's one latent cache (v_cache the view of k_cache), whose V columns the
  // append writes with K's row.
  const void* v_new = nullptr;
  Strides k_new_stride, v_new_stride;  // in elements of q's dtype
  int32_t seqlen_new = 0;  // fixed length: new tokens per sequence; 0 with cu_seqlens_k_new
  // Varlen new tokens: int32 offsets (batch + 1) on q's device; null: seqlen_new each. k_new and
  // v_new are then (total_k_new, heads_kv, d) with batch stride 0, and new token i of sequence b
  // is row new_begin(b) + i, as varlen queries are addressed through query_begin().
  const int32_t* cu_seqlens_k_new = nullptr;
  int64_t total_k_new = 0;  // varlen: k_new's first extent
  // Rotary embedding of k_new and q: cos / sin (seqlen_ro, rotary_dim / 2). null: none.
  const void* rotary_cos = nullptr;
  const void* rotary_sin = nullptr;
  DType rotary_dtype = DType::f32;
  int64_t rotary_cos_stride = 0, rotary_sin_stride = 0;  // between positions, in elements
  int32_t rotary_dim = 0;
  int32_t seqlen_ro = 0;

  Device device;
  // The VECTOR options (hfa/options.def), checked, as ForwardProblem::vectors.
  KVCacheVectors vectors;

  // The keys sequence b attends to: its cached tokens plus the appended ones.
  int64_t attended_length(int64_t b) const { return int64_t{cache_seqlens[b]} + new_tokens(b); }

  HFA_HD bool is_varlen_new() const { return cu_seqlens_k_new != nullptr; }
  // Sequence b's first row of k_new / v_new (a token of the packed rows when varlen, else 0) and
  // its count of new tokens. Host and device (the GPU append).
  HFA_HD int64_t new_begin(int64_t b) const { return is_varlen_new() ? cu_seqlens_k_new[b] : 0; }
  HFA_HD int64_t new_tokens(int64_t b) const {
    return is_varlen_new() ? int64_t{cu_seqlens_k_new[b + 1]} - cu_seqlens_k_new[b] : seqlen_new;
  }
  // New rows of the whole call, per kv-head.
  int64_t total_new_rows() const { return is_varlen_new() ? total_k_new : int64_t{batch} * seqlen_new; }

  HFA_HD bool is_varlen() const { return cu_seqlens_q != nullptr; }
  // Sequence b's first query row (a token of the packed q for varlen, else 0) and its row count.
  HFA_HD int64_t query_begin(int64_t b) const { return is_varlen() ? cu_seqlens_q[b] : 0; }
  int64_t query_rows(int64_t b) const {
    return is_varlen() ? int64_t{cu_seqlens_q[b + 1]} - cu_seqlens_q[b] : seqlen_q;
  }
  // Query rows of the whole call, per head: what out, lse and the split partials hold.
  int64_t total_query_rows() const { return is_varlen() ? total_q : int64_t{batch} * seqlen_q; }

  // Host and device (the GPU append reads the problem as its kernel parameter).
  HFA_HD int64_t page_of(int64_t b, int64_t page_index) const {
    return block_table ? block_table[b * block_table_stride + page_index] : b;
  }
};

}  // namespace hfa::detail
