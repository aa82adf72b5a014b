// hfa_merge_partials on a Hopper GPU: a memory-bound pass that reads each input once and writes
// each output once; the CPU (cpu/merge_partials.cpp) is its oracle, and both take a row's
// weights and LSE from merge_row (common/merge_partials.hpp).
//
// A row (b, i, h) belongs to a group of lanes of one warp, as many as its slices (rounded up to
// a power of two, at most a warp), each slice kVector consecutive values: one 16-byte load of a
// 16-bit partial, two of an fp32 one, where every row is 16-byte aligned and hdim a multiple of
// kVector; one value a slice otherwise. Every lane reads the row's LSEs (the group's loads of one
// address are one transaction), loads its slice of the live partials kLoadBatch at a time (bytes
// in flight without registers for all HFA_MAX_MERGE_PARTIALS of them), adds them in fp32 in
// partial order as the CPU does, and stores the slice; the group's first lane writes the LSE once
// the whole group has read the row's LSEs, so an lse that is the very view of an input's
// (in place) is read before it is overwritten. Rows follow out's own order (h fastest).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdint>

#include "common/backend.hpp"
#include "common/merge_partials.hpp"
#include "sm90/common/launch.hpp"
#include "sm90/device.hpp"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::merge {
namespace {

using detail::MergePartialsProblem;
using detail::MergeRow;
using detail::RowAt;
using Partial = MergePartialsProblem::Partial;

constexpr int kThreads = 256;  // per CTA
constexpr int kWarpLanes = 32;
constexpr int kVector = 8;                 // values of a vector slice: 16 bytes of a 16-bit partial
constexpr int kAlignment = 16;             // bytes: one vector load or store
constexpr int kLoadBatch = 4;              // partials whose slices a lane loads before it adds them
constexpr int64_t kMaxBlocks = INT32_MAX;  // grid.x; a grid-stride loop covers any more rows

// How the lanes cover the rows, the same for every row of a call.
struct RowLanes {
  int lanes_log2;  // lanes per row: 1 << lanes_log2, within one warp
  int slices;      // per row: hdim / V rounded up
};

__device__ __forceinline__ float half_to_float(DType dtype, uint32_t bits) {
  const auto h = static_cast<unsigned short>(bits);
  return dtype == DType::bf16 ? __uint_as_float(bits << 16) : __half2float(__ushort_as_half(h));
}

// V values of a partial's row from element `at` on, as fp32 (streaming loads: read once).
template <int V>
__device__ __forceinline__ void load_slice(const Partial& part, int64_t at, float* x) {
  if (part.dtype == DType::f32) {
    const float* src = static_cast<const float*>(part.out) + at;
    if constexpr (V == 1) {
      x[0] = __ldcs(src);
    } else {
#pragma unroll
      for (int j = 0; j < V / 4; ++j) {
        const float4 f = __ldcs(reinterpret_cast<const float4*>(src) + j);
        x[4 * j] = f.x, x[4 * j + 1] = f.y, x[4 * j + 2] = f.z, x[4 * j + 3] = f.w;
      }
    }
    return;
  }
  const auto* src = static_cast<const unsigned short*>(part.out) + at;
  if constexpr (V == 1) {
    x[0] = half_to_float(part.dtype, __ldcs(src));
  } else {
#pragma unroll
    for (int j = 0; j < V / 8; ++j) {
      const uint4 w = __ldcs(reinterpret_cast<const uint4*>(src) + j);
      const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        x[8 * j + 2 * k] = half_to_float(part.dtype, words[k] & 0xffffu);
        x[8 * j + 2 * k + 1] = half_to_float(part.dtype, words[k] >> 16);
      }
    }
  }
}

template <typename Element, int V>
__device__ __forceinline__ void store_16bit(void* out, int64_t at, const float* v) {
  Element* dst = static_cast<Element*>(out) + at;
  if constexpr (V == 1) {
    dst[0] = ptx::to_element<Element>(v[0]);
  } else {
#pragma unroll
    for (int j = 0; j < V / 8; ++j) {
      uint32_t words[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        words[k] = ptx::pack_pair<Element>(v[8 * j + 2 * k], v[8 * j + 2 * k + 1]);
      reinterpret_cast<uint4*>(dst)[j] = make_uint4(words[0], words[1], words[2], words[3]);
    }
  }
}

template <int V>
__device__ __forceinline__ void store_slice(const MergePartialsProblem& p, int64_t at,
                                            const float* v) {
  switch (p.out_dtype) {
    case DType::bf16:
      return store_16bit<__nv_bfloat16, V>(p.out, at, v);
    case DType::f16:
      return store_16bit<__half, V>(p.out, at, v);
    default:
      break;
  }
  float* dst = static_cast<float*>(p.out) + at;
  if constexpr (V == 1) {
    dst[0] = v[0];
  } else {
#pragma unroll
    for (int j = 0; j < V / 4; ++j)
      reinterpret_cast<float4*>(dst)[j] =
          make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
  }
}

// The V values of the row from `column` on: Σ weight_k · out_k over the live partials.
template <int V>
__device__ __forceinline__ void merge_slice(const MergePartialsProblem& p, const MergeRow& row,
                                            const RowAt& at, int column) {
  float sum[V] = {};
#pragma unroll
  for (int first = 0; first < detail::kMaxMergePartials; first += kLoadBatch) {
    if (first >= p.num_partials) break;
    float x[kLoadBatch][V];
#pragma unroll
    for (int j = 0; j < kLoadBatch; ++j) {
      const Partial& part = p.partials[first + j];
      if (row.live >> (first + j) & 1u)
        load_slice<V>(part, detail::offset_of(part.out_stride, at.b, at.i, at.h) + column, x[j]);
    }
#pragma unroll
    for (int j = 0; j < kLoadBatch; ++j)
      if (row.live >> (first + j) & 1u)
#pragma unroll
        for (int v = 0; v < V; ++v) sum[v] += row.weight[first + j] * x[j][v];
  }
  store_slice<V>(p, detail::offset_of(p.out_stride, at.b, at.i, at.h) + column, sum);
}

template <int V>
__global__ void __launch_bounds__(kThreads)
    merge_kernel(const __grid_constant__ MergePartialsProblem p, const RowLanes shape) {
  static_assert(kThreads % kWarpLanes == 0, "whole warps, so a row's group is within one");
  const int lanes = 1 << shape.lanes_log2;
  const int lane = int(threadIdx.x) & (lanes - 1);
  const int group_first = int(threadIdx.x) % kWarpLanes & ~(lanes - 1);
  const unsigned group = (lanes == kWarpLanes ? ~0u : (1u << lanes) - 1u) << group_first;
  const int64_t rows = p.rows();
  // A step is a multiple of `lanes`: a group's lanes stay on one row together.
  const int64_t step = int64_t{gridDim.x} * kThreads;
  for (int64_t t = int64_t{blockIdx.x} * kThreads + threadIdx.x; (t >> shape.lanes_log2) < rows;
       t += step) {
    const int64_t r = t >> shape.lanes_log2;
    const RowAt at = detail::row_at(p, r);
    const MergeRow row = detail::merge_row(p, at);
    for (int s = lane; s < shape.slices; s += lanes) merge_slice<V>(p, row, at, s * V);
    __syncwarp(group);  // the whole group has read the row's LSEs (lse may be one of them)
    if (lane == 0 && p.lse != nullptr)
      p.lse[detail::offset_of(p.lse_stride, at.b, at.i, at.h)] = row.lse;
  }
}

// Rows of `dtype` at `base` with these strides start at kAlignment-byte boundaries: the address
// and every stride that moves (a dim of extent 1 never does, whatever its stride).
bool rows_aligned(const MergePartialsProblem& p, const void* base, DType dtype,
                  const detail::Strides& s) {
  const auto bytes = static_cast<int64_t>(dtype_size(dtype));
  const auto moves_off = [&](int64_t extent, int64_t stride) {
    return extent > 1 && stride * bytes % kAlignment != 0;
  };
  return reinterpret_cast<uintptr_t>(base) % kAlignment == 0 && !moves_off(p.batch, s.batch) &&
         !moves_off(p.seqlen, s.row) && !moves_off(p.heads, s.head);
}

bool vector_path(const MergePartialsProblem& p) {
  bool aligned = p.hdim % kVector == 0 && rows_aligned(p, p.out, p.out_dtype, p.out_stride);
  for (int k = 0; k < p.num_partials; ++k)
    aligned = aligned &&
              rows_aligned(p, p.partials[k].out, p.partials[k].dtype, p.partials[k].out_stride);
  return aligned;
}

template <int V>
Status launch(const MergePartialsProblem& p) {
  const int slices = (p.hdim + V - 1) / V;
  const int lanes = std::min(kWarpLanes, int(std::bit_ceil(unsigned(std::max(slices, 1)))));
  const RowLanes shape{std::countr_zero(unsigned(lanes)), slices};
  const int64_t rows_per_block = kThreads / lanes;
  const int64_t blocks = std::min(kMaxBlocks, (p.rows() + rows_per_block - 1) / rows_per_block);
  merge_kernel<V><<<unsigned(blocks), kThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(p, shape);
  if (const cudaError_t error = cudaGetLastError(); error != cudaSuccess)
    return cuda_status("sm90 merge_partials", "launch", error);
  return Status::ok();
}

}  // namespace
}  // namespace hfa::sm90::merge

namespace hfa::detail {

Status sm90_merge_partials(const MergePartialsProblem& p) {
  sm90::DeviceGuard guard(p.device.index);
  return sm90::merge::vector_path(p) ? sm90::merge::launch<sm90::merge::kVector>(p)
                                     : sm90::merge::launch<1>(p);
}

}  // namespace hfa::detail
