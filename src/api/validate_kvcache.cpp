// Every check a KV-cache call goes through before a backend sees it, in the order of
// validate.cpp: each tensor on its own, then how the tensors relate (devices, shapes, the cache
// format and its scales), then the scalar options, then (CPU, or validation mode) the values of
// cache_seqlens, block_table and the varlen offsets. The first failure is returned.
#include "api/validate_kvcache.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "api/devices.hpp"
#include "api/dispatch.hpp"
#include "api/options.hpp"
#include "api/overlap.hpp"
#include "common/environment.hpp"
#include "common/errors.hpp"
#include "common/mla.hpp"
#include "api/validate.hpp"
#include "api/validate_options.hpp"
#include "common/rotary.hpp"

namespace hfa::detail {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kNvfp4Block = 16;  // values per E4M3 scale (src/quant/nvfp4.hpp)
constexpr int64_t kMxfp4Block = 32;  // values per UE8M0 scale (src/quant/mxfp4.hpp)

const char* name_of(hfa_dtype d) { return dtype_name(static_cast<DType>(d)); }

bool is_float_input(hfa_dtype d) { return d == HFA_F32 || d == HFA_F16 || d == HFA_BF16; }

// An attention tensor (rank 4, or 3 for varlen q and out): its own checks plus extents that
// fit the int32 indices of the backends.
Status check_attention_tensor(const char* name, const Tensor* t, int32_t rank, const char* layout,
                              bool is_output) {
  HFA_RETURN_IF_ERROR(check_tensor_form(name, t, rank, layout, is_output));
  for (int d = 0; d < rank; ++d)
    if (t->shape[d] > kInt32Max)
      return invalid(name, "extent ", t->shape[d], " in dim ", d, " exceeds int32");
  return Status::ok();
}

Status expect_extent(const char* name, const Tensor& t, int dim, const char* what, int64_t want,
                     const char* ref) {
  if (t.shape[dim] == want) return Status::ok();
  return invalid(name, "expected ", what, " ", want, " (as ", ref, "), got ", t.shape[dim]);
}

// The values a cache row holds: one per element, two per byte for packed FP4; an FP8 MLA
// record's 656 bytes hold 576 (K), and V's view of its first 512 bytes the 512 latent values.
int64_t values_per_row(const Tensor& cache) {
  if (cache.dtype == HFA_FP8_MLA && cache.shape[3] == quant::kMlaRecordBytes) return kMlaHeadDimQK;
  return cache.dtype == HFA_FP4_E2M1X2 ? 2 * cache.shape[3] : cache.shape[3];
}

// k_cache's row extent for hdim_qk values in its dtype, and what it counts, for messages.
int64_t row_extent(const Tensor& k, int64_t hdim_qk, const char** unit) {
  if (k.dtype == HFA_FP8_MLA) {
    *unit = "bytes per fp8_mla record (656 for MLA's 576-wide keys)";
    return hdim_qk == kMlaHeadDimQK ? quant::kMlaRecordBytes : -1;
  }
  *unit = k.dtype == HFA_FP4_E2M1X2 ? "headdim / 2 (packed bytes)" : "headdim";
  return k.dtype == HFA_FP4_E2M1X2 ? hdim_qk / 2 : hdim_qk;
}

// The MLA head dims (576 / 512) where the generic ones are not: V's 512 only with K's 576.
Status check_head_dims(int64_t hdim_qk, int64_t hdim_v) {
  if (hdim_qk == kMlaHeadDimQK) {
    if (hdim_v != kMlaHeadDimV)
      return invalid("v_cache", "headdim must be ", kMlaHeadDimV, " with q's ", kMlaHeadDimQK,
                     " (MLA: V is the latent part of the key), got ", hdim_v);
    return Status::ok();
  }
  if (hdim_v == kMlaHeadDimV)
    return invalid("q", "headdim must be ", kMlaHeadDimQK, " with v_cache's ", kMlaHeadDimV,
                   " (MLA), got ", hdim_qk);
  return check_supported_head_dim("v_cache", hdim_v);
}

// V as a view of K's first columns: the same data and strides in every dim but the last (those
// of a dim of one element excepted: frameworks report any stride there). Those extents are
// checked equal apart.
bool is_prefix_view(const Tensor& v, const Tensor& k) {
  if (v.data != k.data || v.rank != k.rank) return false;
  for (int d = 0; d + 1 < k.rank; ++d)
    if (k.shape[d] > 1 && v.stride[d] != k.stride[d]) return false;
  return true;
}

// MLA's one latent cache: v_cache the view of k_cache's first 512 columns (required of an fp8_mla
// cache). Its rows hold K and V at once, so an append writes each new token once, through K.
bool v_is_view_of_k(const Tensor& k, const Tensor& v, const KVCacheProblem& p) {
  return p.format == CacheFormat::mla_fp8 ||
         (is_mla_shape(p.hdim_qk, p.hdim_v) && is_prefix_view(v, k));
}

// A scale tensor of a quantized cache. Per-kv-head fp32 scales are (heads_kv); every other
// kind is shaped like the cache's first three dims (page, slot, head), plus a last dim of
// blocks per row for the FP4 formats.
Status check_scale(const char* name, const Tensor* scale, hfa_dtype dtype, const Tensor& cache,
                   const char* cache_name, int64_t blocks, const Tensor& q, CacheFormat format,
                   PagedStrides* strides) {
  if (scale == nullptr)
    return invalid(name, "is null, but a ", cache_name, " of dtype ", name_of(cache.dtype), " needs it");
  const bool per_head = format == CacheFormat::fp8_per_head;
  const int32_t rank = per_head ? 1 : (blocks > 0 ? 4 : 3);
  const char* layout = per_head ? "(heads_kv)"
                       : blocks > 0 ? "(pages, page_size, heads_kv, blocks per row)"
                                    : "(pages, page_size, heads_kv)";
  HFA_RETURN_IF_ERROR(check_tensor_form(name, scale, rank, layout, false));
  if (scale->dtype != dtype)
    return invalid(name, "expected dtype ", name_of(dtype), ", got ", name_of(scale->dtype));
  HFA_RETURN_IF_ERROR(check_same_device(name, *scale, q));
  if (per_head) {
    if (scale->shape[0] != cache.shape[2])
      return invalid(name, "expected shape (", cache.shape[2], ") (heads_kv, as ", cache_name,
                     "), got ", tensor_shape_string(*scale));
    *strides = {0, 0, scale->stride[0]};
    return Status::ok();
  }
  for (int d = 0; d < 3; ++d) {
    if (scale->shape[d] != cache.shape[d]) {
      return invalid(name, "expected extent ", cache.shape[d], " in dim ", d, " (as ", cache_name,
                     "), got shape ", tensor_shape_string(*scale));
    }
  }
  if (blocks > 0 && scale->shape[3] != blocks)
    return invalid(name, "expected ", blocks, " scales per row (headdim / ",
                   format == CacheFormat::nvfp4 ? kNvfp4Block : kMxfp4Block, "), got ",
                   scale->shape[3]);
  *strides = {scale->stride[0], scale->stride[1], scale->stride[2]};
  return Status::ok();
}

// NVFP4's per-tensor multiplier: fp32, (1).
Status check_global_scale(const char* name, const Tensor* global, const Tensor& q) {
  if (global == nullptr) return invalid(name, "is null, but an NVFP4 cache needs it");
  HFA_RETURN_IF_ERROR(check_tensor_form(name, global, 1, "(1)", false));
  if (global->dtype != HFA_F32)
    return invalid(name, "expected dtype f32, got ", name_of(global->dtype));
  if (global->shape[0] != 1) return invalid(name, "expected shape (1), got ", tensor_shape_string(*global));
  return check_same_device(name, *global, q);
}

// Picks the format from the caches' dtype and k_scale's.
Status cache_format(const Tensor& q, const Tensor& k_cache, const KVCacheOptions& o,
                    CacheFormat* format) {
  if (k_cache.dtype == q.dtype) {
    *format = CacheFormat::plain;
  } else if (k_cache.dtype == HFA_E4M3) {
    *format = o.k_scale != nullptr && o.k_scale->rank == 1 ? CacheFormat::fp8_per_head
                                                          : CacheFormat::fp8_per_token;
  } else if (k_cache.dtype == HFA_FP8_MLA) {
    *format = CacheFormat::mla_fp8;
  } else if (k_cache.dtype == HFA_FP4_E2M1X2) {
    if (o.k_scale == nullptr)
      return invalid("k_scale", "is null, but an fp4_e2m1x2 k_cache needs e4m3 (NVFP4) or ue8m0 "
                                "(MXFP4) block scales");
    if (o.k_scale->dtype == HFA_E4M3) {
      *format = CacheFormat::nvfp4;
    } else if (o.k_scale->dtype == HFA_UE8M0) {
      *format = CacheFormat::mxfp4;
    } else {
      return invalid("k_scale", "dtype ", name_of(o.k_scale->dtype), " does not name an FP4 "
                     "format (e4m3: NVFP4, ue8m0: MXFP4)");
    }
  } else {
    return invalid("k_cache", "dtype ", name_of(k_cache.dtype), " is not supported (expected ",
                   name_of(q.dtype), " as q, e4m3, fp4_e2m1x2, or fp8_mla)");
  }
  return Status::ok();
}

// Scales and global scales for the format; in a plain cache none may be given.
Status check_scales(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                    const KVCacheOptions& o, KVCacheProblem* p) {
  const bool fp4 = p->format == CacheFormat::nvfp4 || p->format == CacheFormat::mxfp4;
  if (p->format == CacheFormat::plain || p->format == CacheFormat::mla_fp8) {
    const std::pair<const char*, const Tensor*> unused[] = {
        {"k_scale", o.k_scale}, {"v_scale", o.v_scale},
        {"k_global_scale", o.k_global_scale}, {"v_global_scale", o.v_global_scale}};
    const char* why = p->format == CacheFormat::plain ? " cache (q's dtype)"
                                                      : " cache (its scales are in its records)";
    for (const auto& [name, t] : unused)
      if (t != nullptr) return invalid(name, "must be null for a ", name_of(k_cache.dtype), why);
    return Status::ok();
  }
  hfa_dtype scale_dtype = HFA_F32;
  int64_t block = 0;
  if (p->format == CacheFormat::nvfp4) {
    scale_dtype = HFA_E4M3;
    block = kNvfp4Block;
  } else if (p->format == CacheFormat::mxfp4) {
    scale_dtype = HFA_UE8M0;
    block = kMxfp4Block;
  }
  // Every supported headdim is a multiple of 32; the check keeps a later headdim honest.
  if (fp4 && (p->hdim_qk % block != 0 || p->hdim_v % block != 0))
    return invalid("k_cache", "headdim must be a multiple of ", block, " for this FP4 format");
  const int64_t k_blocks = fp4 ? p->hdim_qk / block : 0;
  const int64_t v_blocks = fp4 ? p->hdim_v / block : 0;
  HFA_RETURN_IF_ERROR(check_scale("k_scale", o.k_scale, scale_dtype, k_cache, "k_cache", k_blocks,
                                  q, p->format, &p->k.scale_stride));
  // V's scales have K's granularity: one format for the whole cache.
  if (p->format == CacheFormat::fp8_per_head && o.v_scale != nullptr && o.v_scale->rank != 1)
    return invalid("v_scale", "expected rank 1 (heads_kv), as k_scale, got rank ", o.v_scale->rank);
  HFA_RETURN_IF_ERROR(check_scale("v_scale", o.v_scale, scale_dtype, v_cache, "v_cache", v_blocks,
                                  q, p->format, &p->v.scale_stride));
  p->k.scale = o.k_scale->data;
  p->v.scale = o.v_scale->data;
  if (p->format == CacheFormat::nvfp4) {
    HFA_RETURN_IF_ERROR(check_global_scale("k_global_scale", o.k_global_scale, q));
    HFA_RETURN_IF_ERROR(check_global_scale("v_global_scale", o.v_global_scale, q));
    p->k.global_scale = static_cast<const float*>(o.k_global_scale->data);
    p->v.global_scale = static_cast<const float*>(o.v_global_scale->data);
  } else {
    if (o.k_global_scale != nullptr) return invalid("k_global_scale", "is only used by NVFP4 caches");
    if (o.v_global_scale != nullptr) return invalid("v_global_scale", "is only used by NVFP4 caches");
  }
  return Status::ok();
}

// The split options, which exclude each other (each one's range: check_option_values).
Status check_splits(const KVCacheOptions& o) {
  if (o.split_size > 0 && o.num_splits > 0)
    return invalid("split_size", "excludes num_splits (", o.num_splits, "): give one of them");
  return Status::ok();
}

// An append to MLA's one latent cache (v_is_view_of_k): the new rows are k_new's, 576 wide,
// written once (FlashMLA's engines write the cache themselves; hfa's call appends as it does for
// every format). v_new is null or the view k_new[..., :512]: a V of its own would be a second,
// different write of the same bytes. No rotary: hfa rotates the first rotary_dim columns, here
// the latent ones that are also V; MLA's rotary part is the last 64, rotated by the model.
Status check_mla_append(const KVCacheOptions& o) {
  if (o.v_new != nullptr &&
      !(is_prefix_view(*o.v_new, *o.k_new) && o.v_new->dtype == o.k_new->dtype &&
        o.v_new->shape[o.v_new->rank - 1] == kMlaHeadDimV))
    return invalid("v_new", "must be null or the view k_new[..., :", kMlaHeadDimV,
                   "] (same data and strides) when v_cache is the view of k_cache (MLA: a row "
                   "holds K and V, written once from k_new)");
  if (o.rotary_cos != nullptr || o.rotary_sin != nullptr)
    return invalid(o.rotary_cos ? "rotary_cos" : "rotary_sin",
                   "is not taken by an MLA append (it would rotate the first columns, V's; "
                   "MLA's rotary part is k_new's last ", kMlaHeadDimQK - kMlaHeadDimV,
                   ", rotated by the model)");
  return Status::ok();
}

// k_new / v_new (appended before the attention) and the rotary tables that go with them.
// view_append: v_cache is the view of k_cache (check_mla_append).
Status check_append(const Tensor& q, const KVCacheOptions& o, bool view_append,
                    KVCacheProblem* p) {
  if (o.k_new == nullptr && o.v_new != nullptr) return invalid("k_new", "is null, but v_new is given");
  if (o.k_new != nullptr && o.v_new == nullptr && !view_append)
    return invalid("v_new", "is null, but k_new is given");
  if (o.k_new == nullptr) {
    if (o.rotary_cos != nullptr || o.rotary_sin != nullptr)
      return invalid(o.rotary_cos ? "rotary_cos" : "rotary_sin",
                     "needs k_new (rotary embedding is applied to the appended keys)");
    if (o.cu_seqlens_k_new != nullptr)
      return invalid("cu_seqlens_k_new", "needs k_new (it delimits the appended tokens)");
    return Status::ok();
  }
  // Varlen new tokens are (total_k_new, heads_kv, headdim): their dims from `row` on are the
  // fixed layout's from seqlen_new on, as for varlen q.
  const bool varlen = o.cu_seqlens_k_new != nullptr;
  const int32_t rank = varlen ? 3 : 4;
  const int row = varlen ? 0 : 1, head = row + 1, dim = row + 2;
  const char* layout = varlen ? "(total_k_new, heads_kv, headdim) with cu_seqlens_k_new"
                              : "(batch, seqlen_new, heads_kv, headdim)";
  const std::pair<const char*, const Tensor*> news[] = {{"k_new", o.k_new}, {"v_new", o.v_new}};
  for (const auto& [name, t] : news) {
    if (t == nullptr) continue;  // v_new of an MLA append
    HFA_RETURN_IF_ERROR(check_attention_tensor(name, t, rank, layout, false));
    if (t->dtype != q.dtype)
      return invalid(name, "expected dtype ", name_of(q.dtype), " (as q), got ", name_of(t->dtype));
    HFA_RETURN_IF_ERROR(check_same_device(name, *t, q));
    if (!varlen) HFA_RETURN_IF_ERROR(expect_extent(name, *t, 0, "batch", p->batch, "q"));
    HFA_RETURN_IF_ERROR(expect_extent(name, *t, head, "heads", p->heads_kv, "k_cache"));
  }
  HFA_RETURN_IF_ERROR(expect_extent("k_new", *o.k_new, dim, "headdim", p->hdim_qk, "q"));
  if (o.v_new != nullptr) {
    HFA_RETURN_IF_ERROR(expect_extent("v_new", *o.v_new, dim, "headdim", p->hdim_v, "v_cache"));
    HFA_RETURN_IF_ERROR(expect_extent("v_new", *o.v_new, row,
                                      varlen ? "total_k_new" : "seqlen_new", o.k_new->shape[row],
                                      "k_new"));
  }
  if (view_append) HFA_RETURN_IF_ERROR(check_mla_append(o));
  if (varlen) {
    const Tensor& cu = *o.cu_seqlens_k_new;
    HFA_RETURN_IF_ERROR(check_cu_seqlens_form("cu_seqlens_k_new", &cu, q));
    if (cu.shape[0] != int64_t{p->batch} + 1)
      return invalid("cu_seqlens_k_new", "expected shape (", int64_t{p->batch} + 1, ") (batch + 1, as ",
                     p->is_varlen() ? "cu_seqlens_q" : "q", "), got ", tensor_shape_string(cu));
    p->cu_seqlens_k_new = static_cast<const int32_t*>(cu.data);
    p->total_k_new = o.k_new->shape[0];
  }
  p->k_new = o.k_new->data;
  // Varlen: rows are tokens of the packed tensors, and no batch stride.
  p->k_new_stride = {varlen ? 0 : o.k_new->stride[0], o.k_new->stride[row], o.k_new->stride[head]};
  if (!view_append) {  // an MLA append writes V's columns with K's row: no v_new of its own
    p->v_new = o.v_new->data;
    p->v_new_stride = {varlen ? 0 : o.v_new->stride[0], o.v_new->stride[row],
                       o.v_new->stride[head]};
  }
  p->seqlen_new = varlen ? 0 : static_cast<int32_t>(o.k_new->shape[1]);

  if ((o.rotary_cos == nullptr) != (o.rotary_sin == nullptr))
    return invalid(o.rotary_cos ? "rotary_sin" : "rotary_cos", "is null, but ",
                   o.rotary_cos ? "rotary_cos" : "rotary_sin", " is given");
  if (o.rotary_cos == nullptr) return Status::ok();
  const std::pair<const char*, const Tensor*> tables[] = {{"rotary_cos", o.rotary_cos},
                                                          {"rotary_sin", o.rotary_sin}};
  for (const auto& [name, t] : tables) {
    HFA_RETURN_IF_ERROR(check_tensor_form(name, t, 2, "(seqlen_ro, rotary_dim / 2)", false));
    if (t->dtype != HFA_F32 && t->dtype != q.dtype)
      return invalid(name, "expected dtype f32 or ", name_of(q.dtype), " (as q), got ", name_of(t->dtype));
    HFA_RETURN_IF_ERROR(check_same_device(name, *t, q));
  }
  const Tensor& cos = *o.rotary_cos;
  const Tensor& sin = *o.rotary_sin;
  if (sin.dtype != cos.dtype)
    return invalid("rotary_sin", "expected dtype ", name_of(cos.dtype), " (as rotary_cos), got ", name_of(sin.dtype));
  if (sin.shape[0] != cos.shape[0] || sin.shape[1] != cos.shape[1])
    return invalid("rotary_sin", "expected shape ", tensor_shape_string(cos), " (as rotary_cos), got ",
                   tensor_shape_string(sin));
  if (cos.shape[1] == 0 || 2 * cos.shape[1] > p->hdim_qk)
    return invalid("rotary_cos", "rotary_dim (2 · ", cos.shape[1], ") must be in [2, headdim ",
                   p->hdim_qk, "]");
  if (cos.shape[0] > kInt32Max) return invalid("rotary_cos", "seqlen_ro ", cos.shape[0], " exceeds int32");
  p->rotary_cos = cos.data;
  p->rotary_sin = sin.data;
  p->rotary_dtype = static_cast<DType>(cos.dtype);
  p->rotary_cos_stride = cos.stride[0];
  p->rotary_sin_stride = sin.stride[0];
  p->rotary_dim = static_cast<int32_t>(2 * cos.shape[1]);
  p->seqlen_ro = static_cast<int32_t>(cos.shape[0]);
  return Status::ok();
}

// cache_seqlens and the block table of a dense call (p->batch set).
Status check_lengths(const Tensor& q, const KVCacheOptions& o, const char* batch_owner,
                     KVCacheProblem* p) {
  const int64_t batch = p->batch;
  if (o.cache_seqlens == nullptr)
    return invalid("cache_seqlens", "is null (it is required without indices)");
  HFA_RETURN_IF_ERROR(check_tensor_form("cache_seqlens", o.cache_seqlens, 1, "(batch)", false));
  if (o.cache_seqlens->dtype != HFA_I32)
    return invalid("cache_seqlens", "expected dtype i32, got ", name_of(o.cache_seqlens->dtype));
  if (o.cache_seqlens->shape[0] != batch)
    return invalid("cache_seqlens", "expected shape (", batch, ") (batch, as ", batch_owner,
                   "), got ", tensor_shape_string(*o.cache_seqlens));
  HFA_RETURN_IF_ERROR(check_same_device("cache_seqlens", *o.cache_seqlens, q));
  if (o.block_table != nullptr) {
    const Tensor& table = *o.block_table;
    HFA_RETURN_IF_ERROR(check_tensor_form("block_table", &table, 2, "(batch, max_pages)", false));
    if (table.dtype != HFA_I32)
      return invalid("block_table", "expected dtype i32, got ", name_of(table.dtype));
    if (table.shape[0] != batch)
      return invalid("block_table", "expected ", batch, " rows (batch, as ", batch_owner, "), got ",
                     table.shape[0]);
    if (table.shape[1] > kInt32Max)
      return invalid("block_table", "max_pages ", table.shape[1], " exceeds int32");
    HFA_RETURN_IF_ERROR(check_same_device("block_table", table, q));
    p->block_table = static_cast<const int32_t*>(table.data);
    p->block_table_stride = table.stride[0];
    p->max_pages = static_cast<int32_t>(table.shape[1]);
  }
  p->cache_seqlens = static_cast<const int32_t*>(o.cache_seqlens->data);
  return Status::ok();
}

// Sparse attention's indices (int32, contiguous (batch, seqlen_q, topk), or (total_q, topk) with
// varlen queries: a list per query row either way) and what they exclude: the tensors and
// options that would choose the keys another way.
Status check_indices(const Tensor& q, const KVCacheOptions& o, KVCacheProblem* p) {
  const Tensor& t = *o.indices;
  const bool varlen = p->is_varlen();
  const int rank = varlen ? 2 : 3;
  const char* layout = varlen ? "(total_q, topk) with cu_seqlens_q" : "(batch, seqlen_q, topk)";
  HFA_RETURN_IF_ERROR(check_tensor_form("indices", &t, rank, layout, false));
  if (t.dtype != HFA_I32) return invalid("indices", "expected dtype i32, got ", name_of(t.dtype));
  HFA_RETURN_IF_ERROR(check_same_device("indices", t, q));
  if (varlen && t.shape[0] != p->total_q)
    return invalid("indices", "expected shape (", p->total_q, ", topk) (total_q as q), got ",
                   tensor_shape_string(t));
  if (!varlen && (t.shape[0] != p->batch || t.shape[1] != p->seqlen_q))
    return invalid("indices", "expected shape (", p->batch, ", ", p->seqlen_q,
                   ", topk) (batch and seqlen_q as q), got ", tensor_shape_string(t));
  const int64_t topk = t.shape[rank - 1];
  if (topk > kInt32Max) return invalid("indices", "topk ", topk, " exceeds int32");
  HFA_RETURN_IF_ERROR(check_contiguous("indices", t, layout));
  // The keys are the indices' alone: nothing else may choose or add any.
  struct Excluded {
    const char* name;
    bool given;
    const char* want;
  };
  const Excluded excluded[] = {
      {"cache_seqlens", o.cache_seqlens != nullptr, "null"},
      {"block_table", o.block_table != nullptr, "null"}, {"causal", o.causal != 0, "off"},
      {"window_left", o.window_left >= 0, "-1"}, {"window_right", o.window_right >= 0, "-1"},
      {"k_new", o.k_new != nullptr, "null"}};
  for (const Excluded& e : excluded)
    if (e.given)
      return invalid(e.name, "must be ", e.want,
                     " with indices (the indices alone choose each row's keys)");
  // ALiBi's bias is a distance between positions, and a pool token has none.
  if (o.alibi_slopes != nullptr)
    return invalid("alibi_slopes", "must be null with indices (pool tokens have no positions)");
  p->indices = static_cast<const int32_t*>(t.data);
  p->topk = static_cast<int32_t>(topk);
  p->indices_row_stride = topk;  // contiguous; varlen rows are tokens of the packed q
  p->indices_batch_stride = varlen ? 0 : t.shape[1] * topk;
  return Status::ok();
}

// The memory rule (overlap.hpp) over every tensor of the call, in argument order. An append
// writes the caches, and the scales of a format with one per row (FP8 per token, NVFP4, MXFP4).
Status check_kvcache_memory(const KVCacheArgs& args, const KVCacheProblem& p) {
  const KVCacheOptions& o = *args.options;
  const bool append = o.k_new != nullptr;
  const bool scales_written =
      append && p.format != CacheFormat::plain && p.format != CacheFormat::fp8_per_head;
  // An MLA append writes one cache, k_cache, whose view v_cache is (the one operation the rule
  // lets share an output's bytes): v_cache is then not a tensor of its own.
  const bool view_append = append && p.v_new == nullptr;
  CallTensors tensors;
  tensors.add("q", args.q);
  tensors.add("k_cache", args.k_cache, append);
  if (!view_append) tensors.add("v_cache", args.v_cache, append);
  tensors.add("out", args.out, true);
  tensors.add("lse", args.lse, true);
  tensors.add("cache_seqlens", o.cache_seqlens);
  tensors.add("block_table", o.block_table);
  tensors.add("k_scale", o.k_scale, scales_written);
  tensors.add("v_scale", o.v_scale, scales_written);
  tensors.add("k_global_scale", o.k_global_scale);
  tensors.add("v_global_scale", o.v_global_scale);
  tensors.add("k_new", o.k_new);
  tensors.add("v_new", o.v_new);
  tensors.add("rotary_cos", o.rotary_cos);
  tensors.add("rotary_sin", o.rotary_sin);
  tensors.add("cu_seqlens_q", o.cu_seqlens_q);
  tensors.add("cu_seqlens_k_new", o.cu_seqlens_k_new);
  tensors.add("indices", o.indices);
#define HFA_KVCACHE_OPTION(kind, name, ...) HFA_IF_VECTOR_##kind(tensors.add(#name, o.name);)
#include "hfa/options.def"
  return check_shared_memory(tensors);
}

}  // namespace

// The values: each length within the cache's capacity, each block-table entry a sequence uses
// a page of the cache. Entries past a sequence's last page are never read and not checked
// (engines pad block tables with anything).
Status check_kvcache_values(const KVCacheProblem& p) {
  if (p.is_varlen())
    HFA_RETURN_IF_ERROR(check_cu_seqlens_values("cu_seqlens_q", p.cu_seqlens_q, p.batch, p.total_q,
                                                "q", "max_seqlen_q", p.seqlen_q));
  if (p.indices != nullptr) {  // the only other values a sparse call reads (no lengths, no table)
    const int64_t tokens = p.num_pages * p.page_size;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < p.query_rows(b); ++i)
        for (int64_t n = 0; n < p.topk; ++n) {
          const int64_t row = p.query_begin(b) + i;  // of the packed q when varlen
          const int32_t token =
              p.indices[b * p.indices_batch_stride + row * p.indices_row_stride + n];
          if (token < -1 || token >= tokens)
            return invalid("indices", "element (",
                           p.is_varlen() ? cat(row) : cat(b, ", ", i), ", ", n, ") = ", token,
                           " is neither -1 nor a token of the cache [0, ", tokens,
                           ") (num_pages · page_size)");
        }
    return Status::ok();
  }
  if (p.is_varlen_new())  // no bound per sequence beyond the cache's capacity, checked below
    HFA_RETURN_IF_ERROR(check_cu_seqlens_values("cu_seqlens_k_new", p.cu_seqlens_k_new, p.batch,
                                                p.total_k_new, "k_new", nullptr, 0));
  const int64_t capacity = int64_t{p.max_pages} * p.page_size;
  const char* new_count = p.is_varlen_new() ? " + new tokens " : " + seqlen_new ";
  for (int64_t b = 0; b < p.batch; ++b) {
    const int32_t length = p.cache_seqlens[b];
    const int64_t added = p.new_tokens(b);
    if (length < 0) return invalid("cache_seqlens", "element ", b, " is negative (", length, ")");
    if (p.attended_length(b) > capacity) {
      return invalid("cache_seqlens", "element ", b, " (", length,
                     added ? cat(new_count, added) : std::string(),
                     ") exceeds the cache's capacity ", capacity,
                     p.block_table ? " (max_pages · page_size)" : " (max_seqlen_cache)");
    }
    // Every position a new key or a query row rotates by lies inside the tables.
    if (p.rotary_cos == nullptr) continue;
    if (added > 0 && p.attended_length(b) > p.seqlen_ro)
      return invalid("rotary_cos", "seqlen_ro ", p.seqlen_ro, " does not reach position ",
                     p.attended_length(b) - 1, " (cache_seqlens[", b, "] + ",
                     p.is_varlen_new() ? "its new tokens" : "seqlen_new", " - 1)");
    const int64_t rows = p.query_rows(b);
    const int64_t last_query = rows > 0 ? rotary_query_position(length, rows - 1, p.window_left,
                                                                p.window_right)
                                        : -1;
    if (last_query >= p.seqlen_ro)
      return invalid("rotary_cos", "seqlen_ro ", p.seqlen_ro, " does not reach position ",
                     last_query, " (query row ", rows - 1, " of sequence ", b, ")");
  }
  if (p.block_table == nullptr) return Status::ok();
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t pages = (p.attended_length(b) + p.page_size - 1) / p.page_size;
    for (int64_t i = 0; i < pages; ++i) {
      const int64_t page = p.page_of(b, i);
      if (page < 0 || page >= p.num_pages)
        return invalid("block_table", "entry (", b, ", ", i, ") = ", page, " is outside [0, ",
                       p.num_pages, ") (num_pages of k_cache)");
    }
  }
  return Status::ok();
}

Status check_kvcache_values_on_device(const KVCacheProblem& p) {
  const auto batch = static_cast<std::size_t>(p.batch);
  std::vector<int32_t> lengths, table, offsets, new_offsets, indices;
  std::vector<HostRead> reads;
  // `count` int32 values into `copy`: one array, or `rows` rows of them `row_stride` apart.
  auto read = [&](const char* name, const int32_t* device, std::vector<int32_t>& copy,
                  std::size_t count, std::size_t rows = 1, int64_t row_stride = 0) {
    copy.resize(rows * count);
    reads.push_back({name, copy.data(), device, count * sizeof(int32_t), rows,
                     static_cast<std::size_t>(row_stride) * sizeof(int32_t)});
  };
  if (p.indices != nullptr)  // contiguous, a list per query row; no lengths with them
    read("indices", p.indices, indices,
         static_cast<std::size_t>(p.total_query_rows()) * static_cast<std::size_t>(p.topk));
  else
    read("cache_seqlens", p.cache_seqlens, lengths, batch);
  // The table's rows whole: which entries a sequence uses depends on its length, not read yet
  // (knowing first would take a second synchronization).
  if (p.block_table != nullptr)
    read("block_table", p.block_table, table, static_cast<std::size_t>(p.max_pages), batch,
         p.block_table_stride);
  if (p.is_varlen()) read("cu_seqlens_q", p.cu_seqlens_q, offsets, batch + 1);
  if (p.is_varlen_new()) read("cu_seqlens_k_new", p.cu_seqlens_k_new, new_offsets, batch + 1);
  HFA_RETURN_IF_ERROR(dispatch_read_to_host(reads, p.device, p.stream));

  KVCacheProblem host = p;
  host.cache_seqlens = p.indices != nullptr ? nullptr : lengths.data();
  if (p.indices != nullptr) host.indices = indices.data();
  if (p.is_varlen()) host.cu_seqlens_q = offsets.data();
  if (p.is_varlen_new()) host.cu_seqlens_k_new = new_offsets.data();
  if (p.block_table != nullptr) {
    host.block_table = table.data();
    host.block_table_stride = p.max_pages;  // packed rows
  }
  return check_kvcache_values(host);
}

Status kvcache_validation_from_env(bool* on) {
  // Read on every call (a scan of the environment, small next to an attention call), so that a
  // process can turn it on after its first call.
  *on = false;
  return read_switch(process_variable, "HFA_VALIDATE_KVCACHE", on);
}

Status build_kvcache_problem(const KVCacheArgs& args, Purpose purpose, KVCacheProblem* problem) {
  count_validation();
  if (args.options == nullptr) return invalid("options", "is null");
  HFA_RETURN_IF_ERROR(check_struct_size(args.options->struct_size, sizeof(KVCacheOptions)));
  const KVCacheOptions& o = *args.options;
  // Sparse calls address the caches as a pool of pages through the indices alone.
  const bool sparse = o.indices != nullptr;
  const bool paged = o.block_table != nullptr || sparse;
  const bool varlen = o.cu_seqlens_q != nullptr;
  const char* cache_layout = sparse  ? "(num_pages, page_size, heads_kv, headdim) with indices"
                             : paged ? "(num_pages, page_size, heads_kv, headdim) with block_table"
                                     : "(batch, max_seqlen_cache, heads_kv, headdim)";

  // Each tensor on its own.
  // Varlen q and out are (total_q, heads_q, headdim): their dims from `row` on are the fixed
  // layout's from seqlen_q on.
  const int32_t q_rank = varlen ? 3 : 4;
  const int row = varlen ? 0 : 1, head = row + 1, dim = row + 2;
  HFA_RETURN_IF_ERROR(check_attention_tensor(
      "q", args.q, q_rank,
      varlen ? "(total_q, heads_q, headdim) with cu_seqlens_q" : "(batch, seqlen_q, heads_q, headdim)",
      false));
  HFA_RETURN_IF_ERROR(check_attention_tensor("k_cache", args.k_cache, 4, cache_layout, false));
  HFA_RETURN_IF_ERROR(check_attention_tensor("v_cache", args.v_cache, 4, cache_layout, false));
  HFA_RETURN_IF_ERROR(check_attention_tensor(
      "out", args.out, q_rank,
      varlen ? "(total_q, heads_q, headdim_v) with cu_seqlens_q" : "(batch, seqlen_q, heads_q, headdim_v)",
      true));
  const Tensor& q = *args.q;
  const Tensor& k = *args.k_cache;
  const Tensor& v = *args.v_cache;
  const Tensor& out = *args.out;

  // Dtypes and devices.
  if (!is_float_input(q.dtype))
    return invalid("q", "dtype ", name_of(q.dtype), " is not supported (expected f32, f16 or bf16)");
  if (v.dtype != k.dtype)
    return invalid("v_cache", "expected dtype ", name_of(k.dtype), " (as k_cache), got ", name_of(v.dtype));
  // An f32 out of 16-bit queries: the result before its one rounding, for a caller that scales
  // it first (FlashMLA's attn_sink) or merges it (hfa_forward's rule for partial results).
  if (out.dtype != q.dtype && out.dtype != HFA_F32)
    return invalid("out", "expected dtype ", name_of(q.dtype), " (as q) or f32, got ",
                   name_of(out.dtype));
  HFA_RETURN_IF_ERROR(check_device_usable("q", q));
  HFA_RETURN_IF_ERROR(check_same_device("k_cache", k, q));
  HFA_RETURN_IF_ERROR(check_same_device("v_cache", v, q));
  HFA_RETURN_IF_ERROR(check_same_device("out", out, q));

  KVCacheProblem& p = *problem;  // default-constructed: filled where it lies (no copy)
  copy_values(o, &p);
  HFA_RETURN_IF_ERROR(cache_format(q, k, o, &p.format));

  // Varlen queries: batch from the offsets (cache_seqlens and the rest must agree).
  if (varlen) {
    HFA_RETURN_IF_ERROR(check_cu_seqlens_form("cu_seqlens_q", o.cu_seqlens_q, q));
    if (o.max_seqlen_q < 1)
      return invalid("max_seqlen_q", "must be at least 1 with cu_seqlens_q, got ", o.max_seqlen_q);
    p.cu_seqlens_q = static_cast<const int32_t*>(o.cu_seqlens_q->data);
    p.total_q = q.shape[0];
  } else if (o.max_seqlen_q != 0) {
    return invalid("max_seqlen_q", "is only used with cu_seqlens_q (got ", o.max_seqlen_q,
                   " without it)");
  }
  const char* batch_owner = varlen ? "cu_seqlens_q" : "q";

  // Shapes.
  const int64_t batch = varlen ? o.cu_seqlens_q->shape[0] - 1 : q.shape[0];
  p.batch = static_cast<int32_t>(batch);
  p.seqlen_q = varlen ? o.max_seqlen_q : static_cast<int32_t>(q.shape[1]);
  p.heads_q = static_cast<int32_t>(q.shape[head]);
  p.hdim_qk = static_cast<int32_t>(q.shape[dim]);
  if (p.heads_q == 0) return invalid("q", "heads must be at least 1, got 0");
  if (p.hdim_qk != kMlaHeadDimQK) HFA_RETURN_IF_ERROR(check_supported_head_dim("q", p.hdim_qk));
  if (k.shape[2] == 0) return invalid("k_cache", "heads must be at least 1, got 0");
  if (p.heads_q % k.shape[2] != 0)
    return invalid("k_cache", "heads ", k.shape[2], " must divide q's heads ", p.heads_q,
                   " (GQA/MQA need heads_q % heads_kv == 0)");
  p.heads_kv = static_cast<int32_t>(k.shape[2]);
  const char* row_unit = "";
  const int64_t row_size = row_extent(k, p.hdim_qk, &row_unit);
  if (row_size < 0)
    return invalid("k_cache", "an fp8_mla cache holds MLA's ", kMlaHeadDimQK,
                   "-wide keys, but q's headdim is ", p.hdim_qk);
  HFA_RETURN_IF_ERROR(expect_extent("k_cache", k, 3, row_unit, row_size, "q"));
  if (!paged) HFA_RETURN_IF_ERROR(expect_extent("k_cache", k, 0, "batch", batch, batch_owner));
  if (paged && k.shape[1] == 0) return invalid("k_cache", "page_size must be at least 1, got 0");
  HFA_RETURN_IF_ERROR(expect_extent("v_cache", v, 0, paged ? "num_pages" : "batch", k.shape[0], "k_cache"));
  HFA_RETURN_IF_ERROR(expect_extent("v_cache", v, 1, paged ? "page_size" : "max_seqlen_cache",
                                    k.shape[1], "k_cache"));
  HFA_RETURN_IF_ERROR(expect_extent("v_cache", v, 2, "heads", k.shape[2], "k_cache"));
  // The FP8 record's scales are read through K's row: V must be that row's first 512 bytes.
  if (p.format == CacheFormat::mla_fp8 &&
      !(is_prefix_view(v, k) && v.shape[3] == kMlaHeadDimV))
    return invalid("v_cache", "must be the view of k_cache's first ", kMlaHeadDimV,
                   " bytes (k_cache[..., :", kMlaHeadDimV, "], the latent codes: same data and "
                   "strides) for an fp8_mla cache, got shape ", tensor_shape_string(v));
  p.hdim_v = static_cast<int32_t>(values_per_row(v));
  HFA_RETURN_IF_ERROR(check_head_dims(p.hdim_qk, p.hdim_v));
  if (varlen) {
    HFA_RETURN_IF_ERROR(expect_extent("out", out, 0, "total_q", p.total_q, "q"));
  } else {
    HFA_RETURN_IF_ERROR(expect_extent("out", out, 0, "batch", batch, "q"));
    HFA_RETURN_IF_ERROR(expect_extent("out", out, 1, "seqlen", p.seqlen_q, "q"));
  }
  HFA_RETURN_IF_ERROR(expect_extent("out", out, head, "heads", p.heads_q, "q"));
  HFA_RETURN_IF_ERROR(expect_extent("out", out, dim, "headdim", p.hdim_v, "v_cache"));

  // lse: fp32, contiguous (batch, heads_q, seqlen_q), or (heads_q, total_q) for varlen.
  if (args.lse != nullptr) {
    const Tensor& lse = *args.lse;
    const char* lse_layout = varlen ? "(heads_q, total_q)" : "(batch, heads_q, seqlen_q)";
    const int32_t lse_rank = varlen ? 2 : 3;
    HFA_RETURN_IF_ERROR(check_tensor_form("lse", &lse, lse_rank, lse_layout, true));
    if (lse.dtype != HFA_F32) return invalid("lse", "expected dtype f32, got ", name_of(lse.dtype));
    HFA_RETURN_IF_ERROR(check_same_device("lse", lse, q));
    const int64_t fixed_shape[3] = {batch, p.heads_q, p.seqlen_q};
    const int64_t varlen_shape[2] = {p.heads_q, p.total_q};
    const int64_t* want = varlen ? varlen_shape : fixed_shape;
    for (int d = 0; d < lse_rank; ++d)
      if (lse.shape[d] != want[d])
        return invalid("lse", "expected shape (", want[0], ", ", want[1],
                       varlen ? std::string() : cat(", ", want[2]), ") ", lse_layout, ", got ",
                       tensor_shape_string(lse));
    HFA_RETURN_IF_ERROR(check_contiguous("lse", lse, lse_layout));
    p.lse = static_cast<float*>(lse.data);
    // Contiguous: the strides follow from the shape (a dim of one element may carry any stride).
    p.lse_batch_stride = varlen ? 0 : int64_t{p.heads_q} * p.seqlen_q;
    p.lse_head_stride = varlen ? p.total_q : p.seqlen_q;
  }

  // The keys: listed by indices, or each sequence's first cache_seqlens[b] tokens.
  HFA_RETURN_IF_ERROR(sparse ? check_indices(q, o, &p) : check_lengths(q, o, batch_owner, &p));
  p.page_size = static_cast<int32_t>(k.shape[1]);
  p.num_pages = k.shape[0];

  // The format's scales, then the scalar options.
  HFA_RETURN_IF_ERROR(check_scales(q, k, v, o, &p));
  HFA_RETURN_IF_ERROR(check_option_values(o));
  HFA_RETURN_IF_ERROR(check_splits(o));
  HFA_RETURN_IF_ERROR(check_append(q, o, v_is_view_of_k(k, v, p), &p));
  HFA_RETURN_IF_ERROR(attach_vectors(o, {batch, p.heads_q}, q, &p.vectors));

  p.dtype = static_cast<DType>(q.dtype);
  p.out_dtype = static_cast<DType>(out.dtype);
  p.cache_dtype = static_cast<DType>(k.dtype);
  p.q = q.data;
  // Varlen: rows are tokens of the packed tensors, and no batch stride.
  p.q_stride = {varlen ? 0 : q.stride[0], q.stride[row], q.stride[head]};
  p.out = out.data;
  p.out_stride = {varlen ? 0 : out.stride[0], out.stride[row], out.stride[head]};
  p.k.data = k.data;
  p.k.stride = {k.stride[0], k.stride[1], k.stride[2]};
  p.k.hdim = p.hdim_qk;
  p.v.data = v.data;
  p.v.stride = {v.stride[0], v.stride[1], v.stride[2]};
  p.v.hdim = p.hdim_v;
  p.softmax_scale = o.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(p.hdim_qk)));
  if (o.causal) p.window_right = 0;
  p.causal = p.window_left < 0 && p.window_right == 0;
  bool validate_from_env = false;
  HFA_RETURN_IF_ERROR(kvcache_validation_from_env(&validate_from_env));
  p.validate = o.validate || validate_from_env;
  p.device = q.device == HFA_CUDA ? Device{DeviceKind::cuda, q.device_index} : Device{DeviceKind::cpu, 0};
  if (p.split_size > 0) {  // a sequence's chunks, like num_splits, are at most kMaxKVSplits
    // A sparse row splits its topk indices; a dense sequence its cache.
    const int64_t capacity = sparse ? int64_t{p.topk} : int64_t{p.max_pages} * p.page_size;
    const int64_t least = (capacity + kMaxKVSplits - 1) / kMaxKVSplits;
    if (p.split_size < least)
      return invalid("split_size", "must be at least ", least, " for this cache (", kMaxKVSplits,
                     " splits of its capacity ", capacity, "), got ", p.split_size);
  }

  if (purpose == Purpose::run) HFA_RETURN_IF_ERROR(check_kvcache_memory(args, p));

  // The values. CPU tensors are read where they are: always checked (a bad entry would read
  // outside the cache). CUDA tensors live on the device, where the GPU backend trusts them:
  // validation mode checks them here, a call's one synchronization (a workspace query never
  // depends on them).
  if (p.device.kind == DeviceKind::cpu) {
    HFA_RETURN_IF_ERROR(check_kvcache_values(p));
  } else if (p.validate && purpose == Purpose::run) {
    HFA_RETURN_IF_ERROR(check_kvcache_values_on_device(p));
  }
  return Status::ok();
}

}  // namespace hfa::detail
