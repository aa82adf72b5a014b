// Builds Params from a KVCacheProblem and launches the decode kernel (and the combine kernel
// when the keys are split). Included once per q dtype (bf16.cu, fp16.cu).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "sm90/common/launch.hpp"
#include "sm90/decode/combine_kernel.cuh"
#include "sm90/decode/head_dim.hpp"
#include "sm90/decode/kernel.cuh"
#include "sm90/decode/stream_kernel.cuh"
#include "sm90/decode/launch.hpp"

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

template <typename Element, Storage kStorage, int kHeadDim>
Status launch_decode(const Params& params, cudaStream_t stream) {
  using C = Config<kStorage, kHeadDim>;
  auto kernel = decode_kernel<Element, kStorage, kHeadDim>;
  // Every call (cheap, host-side, allowed during graph capture): the attribute is per device.
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           C::kSmemBytes);
      e != cudaSuccess)
    return cuda_status(kFamily, "setting the shared memory size", e);
  const dim3 grid(params.num_splits, params.heads_kv * params.row_tiles, params.batch);
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(params);
  return Status::ok();
}

template <typename Element, Storage kStorage>
Status launch_stream(Params params, cudaStream_t stream) {
  using C = StreamConfig<kStorage>;
  auto kernel = stream_kernel<Element, kStorage>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           C::kSmemBytes);
      e != cudaSuccess)
    return cuda_status(kFamily, "setting the shared memory size", e);
  params.row_tiles = (params.rows + C::kRowsPerTile - 1) / C::kRowsPerTile;
  const dim3 grid(params.num_splits, params.heads_kv * params.row_tiles, params.batch);
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(params);
  return Status::ok();
}

// The attention of one storage format: the stream kernel where stream::takes says so
// (compiled only at its head dim), else the tile kernel.
template <typename Element, Storage kStorage, int kHeadDim>
Status launch_attention(const Params& params, bool stream_kernel, cudaStream_t stream) {
  if constexpr (kHeadDim == stream::kHeadDim)
    if (stream_kernel) return launch_stream<Element, kStorage>(params, stream);
  return launch_decode<Element, kStorage, kHeadDim>(params, stream);
}

// Everything one head dim launches: the attention for the cache's format, then the combine of
// the split partials.
template <typename Element, int kHeadDim>
Status launch_for_head_dim(const detail::KVCacheProblem& p, const Params& params, cudaStream_t stream) {
  Status status;
  const bool stream_kernel = stream::takes(p, params.rows);
  switch (p.format) {
    case detail::CacheFormat::plain:
      status = launch_attention<Element, Storage::plain, kHeadDim>(params, stream_kernel, stream);
      break;
    case detail::CacheFormat::fp8_per_head:
    case detail::CacheFormat::fp8_per_token:
      status = launch_attention<Element, Storage::fp8, kHeadDim>(params, stream_kernel, stream);
      break;
    default:
      status = launch_attention<Element, Storage::fp4, kHeadDim>(params, stream_kernel, stream);
      break;
  }
  if (!status) return status;
  if (params.num_splits > 1) {
    const int64_t blocks = (params.rows_total + kCombineRowsPerBlock - 1) / kCombineRowsPerBlock;
    combine_kernel<Element, kHeadDim><<<unsigned(blocks), kCombineThreads, 0, stream>>>(params);
  }
  return Status::ok();
}

template <typename Element>
Status run(const detail::KVCacheProblem& p, const Plan& plan) {
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
  if (params.num_splits > 1) {
    // The API checked the workspace against the plan's workspace_bytes.
    params.partial_out = static_cast<float*>(p.workspace);
    params.partial_lse = params.partial_out + params.rows_total * params.num_splits * p.hdim_v;
  }

  auto stream = static_cast<cudaStream_t>(p.stream);
  const Status status = with_head_dim(p.hdim_qk, [&](auto head_dim) {
    return launch_for_head_dim<Element, decltype(head_dim)::value>(p, params, stream);
  });
  if (!status) return status;
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cuda_status(kFamily, "launch", e);
  return Status::ok();
}

}  // namespace hfa::sm90::decode
