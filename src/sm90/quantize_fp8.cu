// hfa_quantize_fp8 on a Hopper GPU: the CPU's bytes (cpu/quantize_fp8.cpp). Measured at
// 0.2-0.4x the device copy rate (bench/results/README.md, "FP8 forward"): not at memory speed
// yet.
//
// A lane owns 16 consecutive values of a row (a 16-byte code store; 32 or 64 bytes of input), so
// a row of d values takes d / 16 lanes and a warp holds 32 / (d / 16) rows at a time. The
// rotation (quant/hadamard.hpp) runs its first four stages in registers and the rest across the
// row's lanes with shuffles: each stage pairs the same elements as the CPU's loop, so the bits
// agree. Two shapes of work:
//   - one pass, a CTA per per-block group (b, block, h) that fits in its registers: load,
//     rotate, amax over the CTA, encode, store;
//   - two passes otherwise (per tensor, per head, blocks too large to hold): each warp walks a
//     chunk of rows of one head, taking the group maxima into the scale tensor's memory as
//     integer bits (atomicMax: any order gives the same max), then walks them again to encode;
//     a last kernel turns the maxima into scales. A per-head or per-tensor group spans whole
//     sequences, more than a chip can hold, so it is read twice.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/backend.hpp"
#include "common/errors.hpp"
#include "common/half_float.hpp"
#include "quant/fp8_input.hpp"
#include "quant/hadamard.hpp"
#include "sm90/decode/head_dim.hpp"
#include "sm90/device.hpp"

namespace hfa::sm90::fp8 {
namespace {

using detail::Fp8QuantizeProblem;
using quant::FtzOp;

constexpr int kValues = 16;           // per lane
constexpr int kLoadSteps = 4;         // rows a lane loads before it computes on them
constexpr int kOnePassMaxWarps = 16;  // a one-pass CTA: at most 16 warps × kLoadSteps rows each
constexpr int kChunkSteps = 4 * kLoadSteps;  // a two-pass warp's rows: kChunkSteps × kRows
constexpr int kTwoPassWarps = 8;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int64_t kMaxGrid = INT32_MAX;

template <int D>
struct RowShape {
  static_assert(D % kValues == 0 && 32 % (D / kValues) == 0, "whole lanes per row, rows per warp");
  static constexpr int kLanes = D / kValues;  // per row
  static constexpr int kRows = 32 / kLanes;   // per warp
};

// The lane's place in its warp: which of the warp's rows, which 16 columns of it.
template <int D>
struct Lane {
  int slot = int(threadIdx.x % 32) / RowShape<D>::kLanes;
  int in_row = int(threadIdx.x % 32) % RowShape<D>::kLanes;
  int column = in_row * kValues;
};

__device__ __forceinline__ float half_to_float(DType dtype, uint32_t bits) {
  const auto h = static_cast<unsigned short>(bits);
  return dtype == DType::bf16 ? detail::bf16_to_float(h) : __half2float(__ushort_as_half(h));
}

// Values [at, at + 16) of x as fp32 (validation made the row 16-byte aligned).
__device__ __forceinline__ void load_slice(const Fp8QuantizeProblem& p, int64_t at, float* v) {
  if (p.x_dtype == DType::f32) {
    const auto* src = reinterpret_cast<const float4*>(static_cast<const float*>(p.x) + at);
#pragma unroll
    for (int j = 0; j < kValues / 4; ++j) {
      const float4 f = src[j];
      v[4 * j] = f.x, v[4 * j + 1] = f.y, v[4 * j + 2] = f.z, v[4 * j + 3] = f.w;
    }
    return;
  }
  const auto* src = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.x) + at);
#pragma unroll
  for (int j = 0; j < kValues / 8; ++j) {
    const uint4 w = src[j];
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      v[8 * j + 2 * k] = half_to_float(p.x_dtype, words[k] & 0xffffu);
      v[8 * j + 2 * k + 1] = half_to_float(p.x_dtype, words[k] >> 16);
    }
  }
}

// The lane's 16 signs as bits (bit k: column + k is negative); 0 without rotation.
__device__ __forceinline__ uint32_t sign_mask(const Fp8QuantizeProblem& p, int column) {
  uint32_t mask = 0;
  if (p.signs != nullptr)
    for (int k = 0; k < kValues; ++k) mask |= (quant::bits_of(p.signs[column + k]) >> 31) << k;
  return mask;
}

// hadamard_rotate's stages over a row held by its kLanes lanes; every lane of the warp calls it.
template <int D>
__device__ __forceinline__ void rotate(float* v, uint32_t signs, int in_row) {
#pragma unroll
  for (int k = 0; k < kValues; ++k)
    v[k] = quant::from_bits(quant::bits_of(v[k]) ^ (((signs >> k) & 1u) << 31));
#pragma unroll
  for (int h = 1; h < kValues; h *= 2)
#pragma unroll
    for (int k = 0; k < kValues; ++k)
      if ((k & h) == 0) quant::butterfly(v[k], v[k + h]);
#pragma unroll
  for (int lanes = 1; lanes < RowShape<D>::kLanes; lanes *= 2) {  // stage h = 16 · lanes
    const bool high = (in_row & lanes) != 0;
#pragma unroll
    for (int k = 0; k < kValues; ++k) {
      const float other = __shfl_xor_sync(kFullMask, v[k], lanes);
      v[k] = high ? quant::ftz<FtzOp::sub>(other, v[k]) : quant::ftz<FtzOp::add>(v[k], other);
    }
  }
#pragma unroll
  for (int k = 0; k < kValues; ++k) v[k] = quant::ftz<FtzOp::mul>(v[k], quant::hadamard_norm(D));
}

__device__ __forceinline__ uint32_t slice_amax_bits(const float* v) {
  uint32_t m = 0;
#pragma unroll
  for (int k = 0; k < kValues; ++k) m = max(m, quant::abs_bits(v[k]));
  return m;
}

__device__ __forceinline__ void store_codes(uint8_t* codes, const float* v, float scale) {
  uint32_t words[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    words[j] = quant::fp8_input_encode_pair(v[4 * j], v[4 * j + 1], scale) |
               uint32_t{quant::fp8_input_encode_pair(v[4 * j + 2], v[4 * j + 3], scale)} << 16;
  *reinterpret_cast<uint4*>(codes) = make_uint4(words[0], words[1], words[2], words[3]);
}

__device__ __forceinline__ float scale_of_bits(uint32_t largest) {
  return quant::fp8_input_scale(quant::amax_from_abs_bits(largest));
}

// --- one pass: a CTA per per-block group ----------------------------------------------------

template <int D>
constexpr int64_t one_pass_rows(int warps) {
  return int64_t{warps} * kLoadSteps * RowShape<D>::kRows;
}

template <int D>
__global__ void __launch_bounds__(kOnePassMaxWarps * 32)
    block_kernel(const __grid_constant__ Fp8QuantizeProblem p) {
  constexpr int kRows = RowShape<D>::kRows;
  __shared__ uint32_t warp_max[kOnePassMaxWarps];
  __shared__ float group_scale;
  const int64_t group = blockIdx.x;
  const int64_t h = group % p.heads, block = group / p.heads % p.num_blocks;
  const int64_t b = group / p.heads / p.num_blocks;
  const int64_t first = block * p.block_rows;
  const int64_t end = min(first + p.block_rows, p.rows_of(b));
  const int warp = int(threadIdx.x / 32), warps = int(blockDim.x / 32);
  const Lane<D> lane;
  const uint32_t signs = sign_mask(p, lane.column);

  float v[kLoadSteps][kValues];
  int64_t row[kLoadSteps];
#pragma unroll
  for (int s = 0; s < kLoadSteps; ++s) {
    row[s] = first + (int64_t{s} * warps + warp) * kRows + lane.slot;
    if (row[s] < end)
      load_slice(p, p.offset(p.x_stride, b, row[s], h) + lane.column, v[s]);
    else
      for (float& x : v[s]) x = 0.0f;
  }
  uint32_t largest = 0;
#pragma unroll
  for (int s = 0; s < kLoadSteps; ++s) {
    if (p.signs != nullptr) rotate<D>(v[s], signs, lane.in_row);
    largest = max(largest, slice_amax_bits(v[s]));
  }
  largest = __reduce_max_sync(kFullMask, largest);
  if (threadIdx.x % 32 == 0) warp_max[warp] = largest;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < warps; ++w) largest = max(largest, warp_max[w]);
    group_scale = scale_of_bits(largest);
    p.scale[group] = group_scale;
  }
  __syncthreads();
#pragma unroll
  for (int s = 0; s < kLoadSteps; ++s)
    if (row[s] < end)
      store_codes(p.codes + p.offset(p.codes_stride, b, row[s], h) + lane.column, v[s],
                  group_scale);
}

// --- two passes: warps over chunks of rows of one head --------------------------------------

// The sequence of flat row t (t < total), found once per chunk and then walked forward.
struct Cursor {
  int64_t b = 0, end = 0;  // sequence b holds flat rows [first_row(b), end)

  __device__ Cursor(const Fp8QuantizeProblem& p, int64_t t) {
    if (p.cu_seqlens == nullptr) {
      b = t / p.seqlen;
    } else {  // the last sequence that starts at or before t: it holds t (empty ones skipped)
      int64_t lo = 0, hi = p.batch - 1;
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (p.cu_seqlens[mid] <= t)
          lo = mid;
        else
          hi = mid - 1;
      }
      b = lo;
    }
    end = p.first_row(b + 1);
  }

  __device__ void advance(const Fp8QuantizeProblem& p, int64_t t) {
    while (t >= end && b + 1 < p.batch) end = p.first_row(++b + 1);
  }
};

// A lane's row in a two-pass walk: where it is, whether it exists, and its group.
struct WalkRow {
  int64_t b, i, group;
  bool live;
};

// visit(s, row, v) for the lane's row of each step of warp `item`'s chunk, v its rotated
// slice (zeros for a row past the end); every lane of the warp runs every step.
template <int D, typename Visit>
__device__ __forceinline__ void walk_chunk(const Fp8QuantizeProblem& p, int64_t item,
                                           Visit&& visit) {
  constexpr int kRows = RowShape<D>::kRows;
  const Lane<D> lane;
  const int64_t h = item % p.heads;
  const int64_t chunk_first = item / p.heads * kChunkSteps * kRows + lane.slot;
  const uint32_t signs = sign_mask(p, lane.column);
  Cursor cursor(p, min(chunk_first, p.total - 1));
  for (int step = 0; step < kChunkSteps; step += kLoadSteps) {
    float v[kLoadSteps][kValues];
    WalkRow rows[kLoadSteps];
#pragma unroll
    for (int s = 0; s < kLoadSteps; ++s) {
      const int64_t t = chunk_first + int64_t{step + s} * kRows;
      cursor.advance(p, t);
      WalkRow& r = rows[s];
      r.b = cursor.b;
      r.i = t - p.first_row(r.b);
      // Past the end, or (varlen, out of contract) past scale's blocks: skipped, never written.
      r.live = t < p.total &&
               (p.granularity != Fp8Granularity::per_block || r.i / p.block_rows < p.num_blocks);
      r.group = r.live ? p.group(r.b, r.i, h) : -1;
      if (r.live)
        load_slice(p, p.offset(p.x_stride, r.b, r.i, h) + lane.column, v[s]);
      else
        for (float& x : v[s]) x = 0.0f;
    }
#pragma unroll
    for (int s = 0; s < kLoadSteps; ++s) {
      if (p.signs != nullptr) rotate<D>(v[s], signs, lane.in_row);
      visit(rows[s], h, v[s]);
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kTwoPassWarps * 32)
    amax_kernel(const __grid_constant__ Fp8QuantizeProblem p, int64_t items) {
  const int64_t item = int64_t{blockIdx.x} * kTwoPassWarps + threadIdx.x / 32;
  if (item >= items) return;  // the whole warp
  auto* maxima = reinterpret_cast<uint32_t*>(p.scale);
  int64_t group = -1;  // the lane's running group and its max so far
  uint32_t largest = 0;
  walk_chunk<D>(p, item, [&](const WalkRow& r, int64_t, const float* v) {
    if (!r.live) return;
    if (r.group != group) {
      if (largest != 0) atomicMax(&maxima[group], largest);
      group = r.group, largest = 0;
    }
    largest = max(largest, slice_amax_bits(v));
  });
  // Mostly the whole warp ends in one group: one atomic for it.
  const int64_t lane0_group = __shfl_sync(kFullMask, group, 0);
  if (__all_sync(kFullMask, group == lane0_group || group == -1)) {
    largest = __reduce_max_sync(kFullMask, largest);
    if (threadIdx.x % 32 == 0 && largest != 0) atomicMax(&maxima[lane0_group], largest);
  } else if (largest != 0) {
    atomicMax(&maxima[group], largest);
  }
}

template <int D>
__global__ void __launch_bounds__(kTwoPassWarps * 32)
    encode_kernel(const __grid_constant__ Fp8QuantizeProblem p, int64_t items) {
  const int64_t item = int64_t{blockIdx.x} * kTwoPassWarps + threadIdx.x / 32;
  if (item >= items) return;
  const auto* maxima = reinterpret_cast<const uint32_t*>(p.scale);
  const int column = Lane<D>{}.column;
  int64_t group = -1;
  float scale = 0.0f;
  walk_chunk<D>(p, item, [&](const WalkRow& r, int64_t h, const float* v) {
    if (!r.live) return;
    if (r.group != group) group = r.group, scale = scale_of_bits(maxima[group]);
    store_codes(p.codes + p.offset(p.codes_stride, r.b, r.i, h) + column, v, scale);
  });
}

// The maxima the amax pass left in scale's memory, turned into the scales (in place).
__global__ void finish_scales_kernel(float* scale, int64_t count) {
  for (int64_t g = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; g < count;
       g += int64_t{gridDim.x} * blockDim.x)
    scale[g] = scale_of_bits(quant::bits_of(scale[g]));
}

__global__ void signs_kernel(uint64_t seed, float* signs, int64_t count) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x)
    signs[i] = quant::hadamard_sign(seed, i);
}

// --- launches ---------------------------------------------------------------------------------

constexpr int kSmallThreads = 256;
constexpr unsigned kSmallBlocks = 1024;

unsigned blocks_for(int64_t count) {
  return unsigned(std::min<int64_t>(kSmallBlocks, (count + kSmallThreads - 1) / kSmallThreads));
}

Status launched(const char* what) {
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return {Code::cuda,
            std::string("sm90 FP8 quantization: ") + what + ": " + cudaGetErrorString(e)};
  return Status::ok();
}

// Scales from zeroed maxima (every group empty or later filled by amax_kernel).
Status clear_maxima(const Fp8QuantizeProblem& p, cudaStream_t stream) {
  if (cudaError_t e = cudaMemsetAsync(p.scale, 0, p.scale_count() * sizeof(float), stream);
      e != cudaSuccess)
    return {Code::cuda, std::string("sm90 FP8 quantization: memset: ") + cudaGetErrorString(e)};
  return Status::ok();
}

Status finish_scales(const Fp8QuantizeProblem& p, cudaStream_t stream) {
  finish_scales_kernel<<<blocks_for(p.scale_count()), kSmallThreads, 0, stream>>>(p.scale,
                                                                                  p.scale_count());
  return launched("scales");
}

template <int D>
Status one_pass(const Fp8QuantizeProblem& p, cudaStream_t stream) {
  if (p.scale_count() > kMaxGrid)
    return detail::not_supported("scale: ", p.scale_count(), " blocks above the GPU's ", kMaxGrid);
  const int64_t warps = (p.block_rows + one_pass_rows<D>(1) - 1) / one_pass_rows<D>(1);
  block_kernel<D><<<unsigned(p.scale_count()), unsigned(warps * 32), 0, stream>>>(p);
  return launched("block kernel");
}

template <int D>
Status two_passes(const Fp8QuantizeProblem& p, cudaStream_t stream) {
  constexpr int64_t kChunkRows = int64_t{kChunkSteps} * RowShape<D>::kRows;
  const int64_t items = (p.total + kChunkRows - 1) / kChunkRows * p.heads;
  const int64_t blocks = (items + kTwoPassWarps - 1) / kTwoPassWarps;
  if (blocks > kMaxGrid)
    return detail::not_supported("x: ", p.total, " rows × ", p.heads,
                                 " heads above the GPU "
                                 "quantization's grid");
  HFA_RETURN_IF_ERROR(clear_maxima(p, stream));
  amax_kernel<D><<<unsigned(blocks), kTwoPassWarps * 32, 0, stream>>>(p, items);
  HFA_RETURN_IF_ERROR(launched("amax kernel"));
  encode_kernel<D><<<unsigned(blocks), kTwoPassWarps * 32, 0, stream>>>(p, items);
  HFA_RETURN_IF_ERROR(launched("encode kernel"));
  return finish_scales(p, stream);
}

}  // namespace
}  // namespace hfa::sm90::fp8

namespace hfa::detail {

Status sm90_quantize_fp8(const Fp8QuantizeProblem& p) {
  using namespace sm90::fp8;
  sm90::DeviceGuard guard(p.device.index);
  const auto stream = static_cast<cudaStream_t>(p.stream);
  if (p.total == 0) {  // no rows: every group's scale is 1
    HFA_RETURN_IF_ERROR(clear_maxima(p, stream));
    return finish_scales(p, stream);
  }
  return sm90::decode::with_head_dim(p.hdim, [&](auto head_dim) {
    constexpr int D = decltype(head_dim)::value;
    const bool fits = p.granularity == Fp8Granularity::per_block &&
                      p.block_rows <= one_pass_rows<D>(kOnePassMaxWarps);
    return fits ? one_pass<D>(p, stream) : two_passes<D>(p, stream);
  });
}

Status sm90_hadamard_signs(uint64_t seed, float* signs, int64_t count, Device device,
                           void* stream) {
  using namespace sm90::fp8;
  sm90::DeviceGuard guard(device.index);
  signs_kernel<<<blocks_for(count), kSmallThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      seed, signs, count);
  return launched("signs kernel");
}

}  // namespace hfa::detail
