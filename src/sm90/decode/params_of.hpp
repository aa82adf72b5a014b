// The decode kernels' Params from a KVCacheProblem and the call's plan: the same for every
// decode kernel (the tile and stream kernels, launch.cuh; MLA's, mla_launch.cuh), host-only.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/kvcache_problem.hpp"
#include "common/score_policy.hpp"
#include "sm90/common/launch.hpp"
#include "sm90/decode/config.hpp"
#include "sm90/decode/launch.hpp"
#include "sm90/decode/params.hpp"
#include "sm90/decode/split_schedule.hpp"

namespace hfa::sm90::decode {

inline CacheView cache_view(const detail::CacheSide& side, const detail::KVCacheProblem& p) {
  const int64_t bytes = p.format == detail::CacheFormat::plain ? 2 : 1;
  CacheView view;
  view.data = static_cast<const unsigned char*>(side.data);
  view.page_stride = side.stride.page * bytes;
  view.slot_stride = side.stride.slot * bytes;
  view.head_stride = side.stride.head * bytes;
  if (p.format == detail::CacheFormat::fp8_per_head) {
    view.head_scale = static_cast<const float*>(side.scale);
    view.head_scale_stride = side.scale_stride.head;
  } else if (side.scale != nullptr) {
    const int64_t scale_bytes = p.format == detail::CacheFormat::fp8_per_token ? 4 : 1;
    view.scale = static_cast<const unsigned char*>(side.scale);
    view.scale_page_stride = side.scale_stride.page * scale_bytes;
    view.scale_slot_stride = side.scale_stride.slot * scale_bytes;
    view.scale_head_stride = side.scale_stride.head * scale_bytes;
  }
  view.global_scale = side.global_scale;
  return view;
}

inline ScaleKind scale_kind(detail::CacheFormat format) {
  switch (format) {
    case detail::CacheFormat::fp8_per_head: return ScaleKind::fp8_per_head;
    case detail::CacheFormat::fp8_per_token: return ScaleKind::fp8_per_token;
    case detail::CacheFormat::nvfp4: return ScaleKind::nvfp4;
    case detail::CacheFormat::mxfp4: return ScaleKind::mxfp4;
    default: return ScaleKind::none;
  }
}

// Everything but the row tiles' height past the tile kernel's (a kernel of other tiles sets
// row_tiles from rows).
inline Params params_of(const detail::KVCacheProblem& p, const Plan& plan) {
  Params params;
  params.cu_seqlens_q = p.cu_seqlens_q;
  params.q = p.q;
  params.q_batch_stride = p.q_stride.batch;
  params.q_row_stride = p.q_stride.row;
  params.q_head_stride = p.q_stride.head;
  params.out = p.out;
  params.out_batch_stride = p.out_stride.batch;
  params.out_row_stride = p.out_stride.row;
  params.out_head_stride = p.out_stride.head;
  params.row_id_batch_stride = p.is_varlen() ? 0 : int64_t(p.heads_q) * p.seqlen_q;
  params.row_id_head_stride = p.is_varlen() ? p.total_q : p.seqlen_q;
  params.lse = p.lse;
  params.k = cache_view(p.k, p);
  params.v = cache_view(p.v, p);
  params.scale_kind = scale_kind(p.format);
  params.cache_seqlens = p.cache_seqlens;
  params.block_table = p.block_table;
  params.block_table_stride = p.block_table_stride;
  params.max_pages = p.max_pages;
  params.page_size = p.page_size;
  params.page_shift = (p.page_size & (p.page_size - 1)) == 0 ? __builtin_ctz(unsigned(p.page_size)) : -1;
  params.capacity = int32_t(std::min<int64_t>(int64_t(p.max_pages) * p.page_size, INT32_MAX));
  params.seqlen_new = p.seqlen_new;
  params.cu_seqlens_k_new = p.cu_seqlens_k_new;
  params.batch = p.batch;
  params.seqlen_q = longest_query_rows(p);
  params.heads_q = p.heads_q;
  params.heads_kv = p.heads_kv;
  params.group = p.heads_q / p.heads_kv;
  params.rows = params.group * params.seqlen_q;
  params.row_tiles = (params.rows + kQueryRowsPerTile - 1) / kQueryRowsPerTile;
  params.num_splits = plan.splits;
  params.split_size = p.split_size;
  params.softmax_scale = p.softmax_scale;
  params.softcap = p.softcap;
  params.alibi = alibi_slopes(p.vectors.alibi_slopes, kLn2);
  // No bound beyond the cache's keys and the rows cuts off a key; clamped, row ± window fits
  // an int (policy::clamp_window).
  const int reach = int(std::min<int64_t>(int64_t(params.capacity) + params.seqlen_q, INT32_MAX / 2));
  params.window_left = policy::clamp_window(p.window_left, reach);
  params.window_right = policy::clamp_window(p.window_right, reach);
  params.rows_total = int64_t(p.heads_q) * p.total_query_rows();
  // The API checked the workspace against the plan's workspace_bytes.
  if (params.num_splits > 1) {
    params.partial_out = static_cast<float*>(p.workspace);
    params.partial_lse = params.partial_out + params.rows_total * params.num_splits * p.hdim_v;
  }
  if (plan.parts > 0) {
    const schedule::WorkspaceLayout layout = schedule::workspace_layout(
        p.batch, plan.parts, int64_t(p.heads_q) * params.seqlen_q, p.hdim_v);
    auto* workspace = static_cast<unsigned char*>(p.workspace);
    params.partial_out = reinterpret_cast<float*>(workspace);
    params.partial_lse = reinterpret_cast<float*>(workspace + layout.partial_lse);
    params.part_starts = reinterpret_cast<schedule::PartStart*>(workspace + layout.part_starts);
    params.first_slot = reinterpret_cast<int32_t*>(workspace + layout.first_slot);
    params.parts = plan.parts;
  }

  return params;
}

}  // namespace hfa::sm90::decode
