// The append before the attention, on the GPU: k_new / v_new rotated and encoded into the cache
// at cache_seqlens[b] + i, and q rotated into the caller's workspace for the decode kernel to
// read. It writes the bytes the CPU append writes (src/cpu/kvcache_append.cpp): the same codecs
// (src/quant), the same 16-bit conversions (common/half_float.hpp) and the same rotation
// (common/rotary.hpp), all host + device code.
//
// One warp per task: the K and V rows of one (sequence, new token, kv-head), or one query row.
// Tasks run over the rows as the tensors pack them (sequence after sequence, fixed length or
// varlen: cu_seqlens_k_new, cu_seqlens_q), and a task finds its sequence from its row.
// Each lane owns hdim / 32 consecutive columns (the kernel is compiled per head dim, as the
// attention). A row's scale (FP8 per token) or a block's
// (16 values for NVFP4, 32 for MXFP4) comes from an aligned run of lanes that agree on its amax
// with shuffles; a max of magnitude bits, so the order does not change it (quant::amax_abs).
// The tasks are few, new tokens · heads_kv + query rows · heads_q warps at most, so the
// kernel makes no effort at bandwidth: plain loads, one store per lane and row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/half_float.hpp"
#include "common/kvcache_problem.hpp"
#include "common/rotary.hpp"
#include "quant/fp8_kv.hpp"
#include "quant/mxfp4.hpp"
#include "quant/nvfp4.hpp"

namespace hfa::sm90::decode {

inline constexpr int kAppendLanes = 32;
inline constexpr unsigned kAppendAllLanes = 0xffffffffu;
inline constexpr int kAppendWarps = 4;  // tasks per CTA: small CTAs spread over every SM
inline constexpr int kAppendThreads = kAppendWarps * kAppendLanes;

// A lane's columns at head dim kHeadDim: 2, 4 or 8. A scale block's values belong to an aligned
// run of whole lanes, and the lane's codes are whole bytes (two FP4 values a byte).
template <int kHeadDim>
inline constexpr int kValuesPerLane = kHeadDim / kAppendLanes;
template <int kHeadDim>
constexpr bool lanes_fit() {
  constexpr int kValues = kValuesPerLane<kHeadDim>;
  return kValues * kAppendLanes == kHeadDim && kValues % 2 == 0 &&
         quant::kNvfp4BlockSize % kValues == 0 && quant::kMxfp4BlockSize % kValues == 0;
}

// What the launch decides beyond the problem.
struct AppendWork {
  int64_t token_tasks = 0;  // new rows · heads_kv: (new token, kv-head)
  int64_t tasks = 0;        // token_tasks, then query rows · heads_q (rotary)
  // q's rows in their order ((batch, seqlen_q) or total_q), heads_q, headdim: contiguous in q's
  // dtype; null when rotary is off.
  uint16_t* rotated_q = nullptr;
};

// Row i of sequence b, among rows packed sequence after sequence.
struct SequenceRow {
  int64_t b, i;
};

// The sequence of packed row `row`: varlen (offsets, batch + 1, non-null) by a binary search
// for the last sequence that starts at or before it (an empty sequence starts where the next
// one does, so it is passed over), else rows_each rows a sequence. Offsets out of contract give
// some b in [0, batch) and an i that may be out of range, never a row other than `row`.
__device__ __forceinline__ SequenceRow sequence_row(const int32_t* offsets, int32_t batch,
                                                    int64_t rows_each, int64_t row) {
  if (offsets == nullptr) return {row / rows_each, row % rows_each};
  int32_t lo = 0, hi = batch - 1;  // offsets[lo] <= row, as the answer's
  while (lo < hi) {
    const int32_t mid = hi - (hi - lo) / 2;  // upper middle: lo = mid makes progress
    if (offsets[mid] <= row) lo = mid;
    else hi = mid - 1;
  }
  return {lo, row - offsets[lo]};
}

__device__ __forceinline__ float to_float(DType dtype, uint16_t bits) {
  return dtype == DType::bf16 ? detail::bf16_to_float(bits) : detail::fp16_to_float(bits);
}
__device__ __forceinline__ uint16_t from_float(DType dtype, float value) {
  return dtype == DType::bf16 ? detail::float_to_bf16(value) : detail::float_to_fp16(value);
}

__device__ __forceinline__ int64_t row_offset(const detail::Strides& s, int64_t b, int64_t i, int64_t h) {
  return b * s.batch + i * s.row + h * s.head;
}

// cos or sin of frequency j at `position`: fp32, or q's 16-bit dtype.
__device__ __forceinline__ float table_value(const detail::KVCacheProblem& p, const void* table,
                                             int64_t stride, int64_t position, int j) {
  const int64_t at = position * stride + j;
  if (p.rotary_dtype == DType::f32) return static_cast<const float*>(table)[at];
  return to_float(p.rotary_dtype, static_cast<const uint16_t*>(table)[at]);
}

// A lane's values (1 to 16 bytes, as many as its columns take) stored at once: packed into
// 32-bit words, then one store of the whole; dst is aligned to their size (cache rows at 16
// bytes, a lane's columns at whole multiples of their size).
template <typename T, int kCount>
__device__ __forceinline__ void store_lane(void* dst, const T (&values)[kCount]) {
  static_assert(std::is_unsigned_v<T> && sizeof(T) <= 2, "bytes or 16-bit values");
  constexpr int kBytes = int(sizeof(T)) * kCount;
  constexpr int kBits = 8 * int(sizeof(T));
  constexpr int kPerWord = 4 / int(sizeof(T));
  uint32_t words[(kBytes + 3) / 4] = {};
#pragma unroll
  for (int k = 0; k < kCount; ++k) words[k / kPerWord] |= uint32_t(values[k]) << (kBits * (k % kPerWord));
  if constexpr (kBytes == 1) *static_cast<uint8_t*>(dst) = uint8_t(words[0]);
  else if constexpr (kBytes == 2) *static_cast<uint16_t*>(dst) = uint16_t(words[0]);
  else if constexpr (kBytes == 4) *static_cast<uint32_t*>(dst) = words[0];
  else if constexpr (kBytes == 8) *static_cast<uint2*>(dst) = make_uint2(words[0], words[1]);
  else if constexpr (kBytes == 16) *static_cast<uint4*>(dst) = make_uint4(words[0], words[1], words[2], words[3]);
  else static_assert(kBytes == 16, "a power of two up to 16 bytes");
}

// The lane's columns [column, column + kValues) of `row` (q's dtype), rotated by `position`
// where they are below rotary_dim: the CPU's apply_rotary one column at a time. A column's
// partner may be another lane's, so both values of its pair are read from the row.
template <int kValues>
__device__ __forceinline__ void rotate_lane(const detail::KVCacheProblem& p, const uint16_t* row,
                                            int64_t position, int column, float (&x)[kValues]) {
#pragma unroll
  for (int k = 0; k < kValues; ++k) {
    const int c = column + k;
    if (c >= p.rotary_dim) break;
    const int j = detail::rotary_frequency(c, p.rotary_dim, p.rotary_interleaved);
    const detail::RotaryPair pair = detail::rotary_pair(j, p.rotary_dim, p.rotary_interleaved);
    const detail::RotatedPair r = detail::rotate_pair(
        to_float(p.dtype, row[pair.first]), to_float(p.dtype, row[pair.second]),
        table_value(p, p.rotary_cos, p.rotary_cos_stride, position, j),
        table_value(p, p.rotary_sin, p.rotary_sin_stride, position, j));
    x[k] = c == pair.first ? r.first : r.second;
  }
}

// amax_abs of the values of an aligned run of kRunLanes lanes, known to all of them.
template <int kRunLanes, int kValues>
__device__ __forceinline__ float run_amax(const float (&x)[kValues]) {
  uint32_t largest = 0;
#pragma unroll
  for (int k = 0; k < kValues; ++k) largest = max(largest, quant::abs_bits(x[k]));
#pragma unroll
  for (int offset = kRunLanes / 2; offset > 0; offset /= 2)
    largest = max(largest, __shfl_xor_sync(kAppendAllLanes, largest, offset));
  return quant::amax_from_abs_bits(largest);
}

// A lane's E2M1 codes, two a byte (element 2i in the low nibble), stored at once.
template <int kValues>
__device__ __forceinline__ void store_e2m1(uint8_t* dst, const uint8_t (&e)[kValues]) {
  uint8_t packed[kValues / 2];
#pragma unroll
  for (int k = 0; k < kValues / 2; ++k) packed[k] = quant::e2m1_pack(e[2 * k], e[2 * k + 1]);
  store_lane(dst, packed);
}

// The lane's columns of one row, written at (page, slot, head) of one side in `format` (plain
// rows of cache_dtype): the CPU's encode_row (cpu/kvcache_rows.hpp) with the row spread over the
// warp; the append's writes and hfa_quantize_kv's (quantize.cu). Every lane must call it (the
// scales take shuffles).
template <int kValues>
__device__ __forceinline__ void encode_lane(detail::CacheFormat format, DType cache_dtype,
                                            const detail::CacheSide& side, int64_t page,
                                            int64_t slot, int64_t head, int lane,
                                            const float (&x)[kValues]) {
  using detail::CacheFormat;
  const int column = lane * kValues;
  const int64_t row = side.stride.offset(page, slot, head);  // elements; bytes for FP8 and FP4
  const int64_t scale_row = side.scale_stride.offset(page, slot, head);
  // The caller's cache: written in place, as the API documents.
  auto* codes = static_cast<uint8_t*>(const_cast<void*>(side.data));
  auto* scales = static_cast<uint8_t*>(const_cast<void*>(side.scale));
  uint8_t e[kValues];
  switch (format) {
    case CacheFormat::plain: {
      uint16_t h[kValues];
#pragma unroll
      for (int k = 0; k < kValues; ++k) h[k] = from_float(cache_dtype, x[k]);
      store_lane(reinterpret_cast<uint16_t*>(codes) + row + column, h);
      return;
    }
    case CacheFormat::fp8_per_head:
    case CacheFormat::fp8_per_token: {
      const bool per_token = format == CacheFormat::fp8_per_token;
      const float scale = per_token ? quant::fp8_kv_scale(run_amax<kAppendLanes>(x))
                                    : static_cast<const float*>(side.scale)[scale_row];
      if (per_token && lane == 0) reinterpret_cast<float*>(scales)[scale_row] = scale;
#pragma unroll
      for (int k = 0; k < kValues; ++k) e[k] = quant::fp8_kv_encode(x[k], scale);
      store_lane(codes + row + column, e);
      return;
    }
    case CacheFormat::nvfp4: {
      constexpr int kRunLanes = quant::kNvfp4BlockSize / kValues;
      const float global = *side.global_scale;
      const uint8_t block_scale = quant::nvfp4_block_scale(run_amax<kRunLanes>(x), global);
      if (lane % kRunLanes == 0) scales[scale_row + column / quant::kNvfp4BlockSize] = block_scale;
      const float multiplier = quant::nvfp4_multiplier(block_scale, global);
#pragma unroll
      for (int k = 0; k < kValues; ++k) e[k] = quant::nvfp4_encode(x[k], multiplier);
      store_e2m1(codes + row + column / 2, e);
      return;
    }
    case CacheFormat::mxfp4: {
      constexpr int kRunLanes = quant::kMxfp4BlockSize / kValues;
      const uint8_t block_scale = quant::mxfp4_block_scale(run_amax<kRunLanes>(x));
      if (lane % kRunLanes == 0) scales[scale_row + column / quant::kMxfp4BlockSize] = block_scale;
#pragma unroll
      for (int k = 0; k < kValues; ++k) e[k] = quant::mxfp4_encode(x[k], block_scale);
      store_e2m1(codes + row + column / 2, e);
      return;
    }
  }
}

template <int kValues>
__device__ __forceinline__ void load_lane(DType dtype, const uint16_t* row, int column,
                                          float (&x)[kValues]) {
#pragma unroll
  for (int k = 0; k < kValues; ++k) x[k] = to_float(dtype, row[column + k]);
}

// New token i of sequence b, kv-head h: K (rotated) and V into the cache. The lengths and the
// block table live on the device and are trusted (validation mode checks them first); a token
// outside the cache, its pages or the rotary tables is dropped rather than written out of bounds
// (the attention clamps such lengths to the cache too).
template <int kHeadDim>
__device__ __forceinline__ void append_token(const detail::KVCacheProblem& p, int64_t task, int lane) {
  constexpr int kValues = kValuesPerLane<kHeadDim>;
  const int64_t h = task % p.heads_kv;
  const SequenceRow new_row = sequence_row(p.cu_seqlens_k_new, p.batch, p.seqlen_new, task / p.heads_kv);
  const int64_t b = new_row.b, i = new_row.i;
  const int64_t row = p.new_begin(b) + i;  // of k_new / v_new: i, or the packed token
  const int64_t position = int64_t{p.cache_seqlens[b]} + i;
  const bool rotary = p.rotary_cos != nullptr;
  if (position < 0 || position >= int64_t{p.max_pages} * p.page_size) return;
  if (rotary && position >= p.seqlen_ro) return;
  const int64_t page = p.page_of(b, position / p.page_size);
  if (page < 0 || page >= p.num_pages) return;
  const int64_t slot = position % p.page_size;

  const int column = lane * kValues;
  float x[kValues];
  const uint16_t* k_row = static_cast<const uint16_t*>(p.k_new) + row_offset(p.k_new_stride, b, row, h);
  load_lane(p.dtype, k_row, column, x);
  if (rotary) rotate_lane(p, k_row, position, column, x);
  encode_lane(p.format, p.cache_dtype, p.k, page, slot, h, lane, x);
  load_lane(p.dtype, static_cast<const uint16_t*>(p.v_new) + row_offset(p.v_new_stride, b, row, h),
            column, x);
  encode_lane(p.format, p.cache_dtype, p.v, page, slot, h, lane, x);
}

// Query row `task` of the (query rows, heads_q) rows, rotated into work.rotated_q. The
// columns from rotary_dim on are copied bit for bit; a row whose position lies outside the
// tables (lengths out of contract) is copied as it is.
template <int kHeadDim>
__device__ __forceinline__ void rotate_query(const detail::KVCacheProblem& p, const AppendWork& work,
                                             int64_t task, int lane) {
  constexpr int kValues = kValuesPerLane<kHeadDim>;
  const int64_t h = task % p.heads_q;
  const SequenceRow query = sequence_row(p.cu_seqlens_q, p.batch, p.seqlen_q, task / p.heads_q);
  const int64_t b = query.b, i = query.i;
  const int64_t position =
      detail::rotary_query_position(p.cache_seqlens[b], i, p.window_left, p.window_right);
  const uint16_t* q_row =
      static_cast<const uint16_t*>(p.q) + row_offset(p.q_stride, b, p.query_begin(b) + i, h);
  const int column = lane * kValues;
  uint16_t bits[kValues];
#pragma unroll
  for (int k = 0; k < kValues; ++k) bits[k] = q_row[column + k];
  if (position >= 0 && position < p.seqlen_ro) {
    float x[kValues];
    load_lane(p.dtype, q_row, column, x);
    rotate_lane(p, q_row, position, column, x);
#pragma unroll
    for (int k = 0; k < kValues; ++k)
      if (column + k < p.rotary_dim) bits[k] = from_float(p.dtype, x[k]);
  }
  store_lane(work.rotated_q + task * kHeadDim + column, bits);
}

// The problem is the kernel's parameter as the CPU append reads it (__grid_constant__: read in
// place, never copied to local memory).
template <int kHeadDim>
__global__ void __launch_bounds__(kAppendThreads)
    append_kernel(const __grid_constant__ detail::KVCacheProblem p, const AppendWork work) {
  static_assert(lanes_fit<kHeadDim>(), "whole lanes per row, per scale block and per code byte");
  const int64_t task = int64_t{blockIdx.x} * kAppendWarps + threadIdx.x / kAppendLanes;
  const int lane = int(threadIdx.x % kAppendLanes);
  if (task < work.token_tasks) append_token<kHeadDim>(p, task, lane);
  else if (task < work.tasks) rotate_query<kHeadDim>(p, work, task - work.token_tasks, lane);
}

}  // namespace hfa::sm90::decode
