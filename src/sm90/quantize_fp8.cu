// hfa_quantize_fp8 on a Hopper GPU: the CPU's bytes (cpu/quantize_fp8.cpp), laid out to stream
// at memory speed (bench/bench_quantize_fp8.py measures it against a device copy).
//
// Lanes. A lane owns kValues = 32 consecutive values of a row, so a row takes d / 32 lanes (2, 4
// or 8) and a warp covers 32 / (d / 32) rows at a time (a step). The rotation (quant/hadamard.hpp)
// runs its first five stages in registers and the last log2(d / 32) (one to three) across the
// row's lanes: per value and stage one shuffle and one fma(value, ±1, partner), which rounds
// once as the CPU's add or subtract does. Each stage pairs the elements the CPU's loop pairs, so
// the bits agree. The rotation's last step, the product with 1/sqrt(d), is folded into the
// encoding's multipliers.
//
// Encoding. fp8_input.hpp's bracket: per value two products and one e4m3 conversion each instead
// of a correctly rounded quotient (a dozen instructions around a special-function reciprocal),
// with the quotient only where the two disagree (about one value in 2^15).
//
// Memory. A thread holds kSlices rows' values (64 fp32 registers) and, while it computes on them,
// has the rows it takes next on their way into shared memory (cp.async, two buffers that take
// turns; no registers held for loads in flight): 128 bytes of a 16-bit input, 256 of fp32, about
// 64 KB per SM at the occupancy the registers allow (an H200 wants 32-64 KB in flight per SM to
// stream at full speed). Grids are persistent: as many CTAs as fit at once, each looping over its
// share, so no wave of short CTAs drains between loads.
//
// Two shapes of work:
//   - one pass, for per-block groups that a unit of threads can hold (a unit: a power of two of
//     threads, from one row's lanes to a CTA, sized to the block): load, rotate, amax over the
//     unit (shuffles; past a warp, shared memory), encode, store. A CTA of max(unit, 256)
//     threads runs 256 / unit groups at a time for small blocks.
//   - two passes otherwise (per tensor, per head, blocks larger than a unit holds). The amax
//     kernel's warps walk even, contiguous spans of (head, chunk of rows) items, each lane
//     keeping a running maximum of its group's values; it takes the maximum into the scale
//     tensor's memory (atomicMax on the integer bits: any order gives the same max) when it moves
//     to another group and at its span's end, where a CTA's warps are merged first (one atomic per
//     CTA for per-tensor). The encode kernel walks the same spans backwards, so what the amax pass
//     read last is still in L2 when it starts, and turns the maxima into the scales. A per-head
//     or per-tensor group spans whole sequences, more than a chip can hold, so x is read twice.
//     The amax and encode kernels start by programmatic dependent launch while the kernel
//     before them (the maxima's clear, the amax) drains: each copies its first rows and only
//     then waits for it.
// Scale's memory between the passes: an entry with the sign bit (kMaximumFlag) holds a group's
// maximum |value| as the bits below it; without, the group's final scale (scales are positive or
// NaN 0x7fc00000). The encode pass reads either form and gets one scale, so it may write the
// final scales while its other CTAs still read.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "common/errors.hpp"
#include "quant/fp8_input.hpp"
#include "quant/hadamard.hpp"
#include "sm90/common/launch.hpp"
#include "sm90/decode/head_dim.hpp"
#include "sm90/device.hpp"
#include "sm90/operations.hpp"
#include "sm90/ptx/cp_async.cuh"
#include "sm90/ptx/grid_dependency.cuh"
#include "sm90/ptx/mbarrier.cuh"

namespace hfa::sm90::fp8 {
namespace {

using detail::Fp8QuantizeProblem;
using detail::Strides;
using quant::FtzOp;

constexpr int kWarpLanes = 32;
constexpr unsigned kFullMask = 0xffffffffu;
// Values of a row a lane owns: 32 keeps a row of d ≤ 256 within 8 lanes (at most three shuffle
// stages of the rotation) and makes two 16-byte code stores.
constexpr int kValues = 32;
// Rows a thread holds at once: kSlices · kValues = 64 fp32 registers, within the 128 that two
// 256-thread CTAs or one 512-thread CTA per SM leave a thread.
constexpr int kSlices = 2;
constexpr int kCtaThreads = 256;  // every CTA but a one-pass CTA of a 512-thread unit
constexpr int kCtaWarps = kCtaThreads / kWarpLanes;
constexpr int kMaxD = 256;                      // the GPU's largest head dim (api/quantize_fp8.cpp)
constexpr uint32_t kMaximumFlag = 0x80000000u;  // a maximum, not a scale, in scale's memory

template <int D>
struct RowShape {
  static_assert(D % kValues == 0 && kWarpLanes % (D / kValues) == 0, "whole lanes per row");
  static constexpr int kLanes = D / kValues;          // per row
  static constexpr int kRows = kWarpLanes / kLanes;   // per warp step
  static constexpr int kChunkRows = kSlices * kRows;  // a two-pass item: a warp's kSlices steps
};

// x's values as 32-bit words: a lane's kValues of a row are kWords of them, copied 16 bytes at a
// time (validation made every row 16-byte aligned).
template <DType T>
struct Input {
  static_assert(T == DType::f32 || T == DType::f16 || T == DType::bf16, "x's dtypes");
  static constexpr bool kWide = T == DType::f32;
  static constexpr int kBytes = kWide ? 4 : 2;
  static constexpr int kWords = kValues * kBytes / 4;
  static constexpr int kVectors = kWords / 4;  // 16-byte copies of a lane's slice
  // The largest one-pass unit: 512 threads stage 128 KB of a 16-bit input (two buffers of
  // kSlices rows); fp32's 256 KB would not fit an SM's shared memory, so its units stop at 256.
  static constexpr int kMaxUnitThreads = kWide ? 256 : 512;
};

// --- per value ----------------------------------------------------------------------------------

__device__ __forceinline__ int64_t element_at(const Strides& s, int64_t b, int64_t row, int64_t h) {
  return b * s.batch + row * s.row + h * s.head;  // row: within b, or flat for varlen (batch 0)
}

// A thread's staged rows: kSlices slices of raw words in each of two buffers that take turns,
// one read while cp.async fills the other, laid out [buffer][slice][16-byte vector][thread] so a
// warp's copies and reads are 512 contiguous bytes (no bank conflicts). A buffer is refilled only
// a turn after its words were read into registers and used, so no copy overtakes its read.
template <DType T>
struct Staging {
  static constexpr int kVectors = Input<T>::kVectors;
  static constexpr int bytes(int threads) { return 2 * kSlices * kVectors * threads * 16; }

  uint4* smem;
  int threads;

  __device__ uint4* vector(int buffer, int s, int j) const {
    return smem + ((buffer * kSlices + s) * kVectors + j) * threads + int(threadIdx.x);
  }

  // Slice s of `buffer` from the lane's values at x's element `at`; zeros where !live.
  __device__ void copy(const Fp8QuantizeProblem& p, int buffer, int s, int64_t at,
                       bool live) const {
    const char* src = static_cast<const char*>(p.x) + (live ? at * Input<T>::kBytes : 0);
#pragma unroll
    for (int j = 0; j < kVectors; ++j)
      ptx::cp_async_16_l1(ptx::smem_address(vector(buffer, s, j)), src + 16 * j, live ? 16 : 0);
  }

  __device__ void read(int buffer, int s, uint32_t* w) const {
#pragma unroll
    for (int j = 0; j < kVectors; ++j) {
      const uint4 q = *vector(buffer, s, j);
      w[4 * j] = q.x, w[4 * j + 1] = q.y, w[4 * j + 2] = q.z, w[4 * j + 3] = q.w;
    }
  }
};

// The signs as one word per raw word of a row: the sign bit of each value the word holds
// (16-bit: bits 15 and 31). Every thread calls it; a barrier follows before the first use.
template <DType T>
__device__ __forceinline__ void load_sign_words(const float* signs, int d, uint32_t* words) {
  using quant::bits_of;
  for (int i = int(threadIdx.x); i < d * Input<T>::kBytes / 4; i += int(blockDim.x)) {
    if constexpr (Input<T>::kWide)
      words[i] = bits_of(signs[i]) & quant::fp32::kSignMask;
    else
      words[i] = (bits_of(signs[2 * i]) >> 16 & 0x8000u) |
                 (bits_of(signs[2 * i + 1]) & quant::fp32::kSignMask);
  }
}

// The rotation's first step on the raw words: x[i] with signs[i]'s sign bit xor-ed in (exact).
template <DType T>
__device__ __forceinline__ void apply_signs(uint32_t* w, const uint32_t* lane_sign_words) {
  const auto* signs = reinterpret_cast<const uint4*>(lane_sign_words);
#pragma unroll
  for (int j = 0; j < Input<T>::kWords / 4; ++j) {
    const uint4 s = signs[j];
    w[4 * j] ^= s.x, w[4 * j + 1] ^= s.y, w[4 * j + 2] ^= s.z, w[4 * j + 3] ^= s.w;
  }
}

template <DType T>
__device__ __forceinline__ void unpack(const uint32_t* w, float* v) {
#pragma unroll
  for (int j = 0; j < Input<T>::kWords; ++j) {
    if constexpr (T == DType::f32) {
      v[j] = quant::from_bits(w[j]);
    } else if constexpr (T == DType::bf16) {
      v[2 * j] = quant::from_bits(w[j] << 16);
      v[2 * j + 1] = quant::from_bits(w[j] & 0xffff0000u);
    } else {
      v[2 * j] = __half2float(__ushort_as_half((unsigned short)(w[j] & 0xffffu)));
      v[2 * j + 1] = __half2float(__ushort_as_half((unsigned short)(w[j] >> 16)));
    }
  }
}

// max(|m|, |x|), NaN if either is (its sign bit is meaningless: callers mask it off). One
// instruction, where the integer max of abs_bits takes two; the same order of magnitudes.
__device__ __forceinline__ float max_magnitude(float m, float x) {
  float r;
  asm("max.NaN.xorsign.abs.f32 %0, %1, %2;" : "=f"(r) : "f"(m), "f"(x));
  return r;
}

template <DType T>
__device__ __forceinline__ uint32_t max_magnitude_x2(uint32_t m, uint32_t x) {
  uint32_t r;
  if constexpr (T == DType::bf16)
    asm("max.NaN.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(m), "r"(x));
  else
    asm("max.NaN.xorsign.abs.f16x2 %0, %1, %2;" : "=r"(r) : "r"(m), "r"(x));
  return r;
}

// abs_bits of the largest |value| of a slice, from its fp32 values.
__device__ __forceinline__ uint32_t values_amax_bits(const float* v) {
  float m = 0.0f;
#pragma unroll
  for (int k = 0; k < kValues; ++k) m = max_magnitude(m, v[k]);
  return quant::abs_bits(m);
}

// The same from the raw words: two values per instruction for a 16-bit input (its magnitudes'
// order is their fp32 values'), then the larger half as fp32.
template <DType T>
__device__ __forceinline__ uint32_t words_amax_bits(const uint32_t* w) {
  if constexpr (Input<T>::kWide) {
    float v[kValues];
    unpack<T>(w, v);
    return values_amax_bits(v);
  } else {
    uint32_t m = 0;
#pragma unroll
    for (int j = 0; j < Input<T>::kWords; ++j) m = max_magnitude_x2<T>(m, w[j]);
    const uint32_t halves[2] = {m & 0x7fffu, m >> 16 & 0x7fffu};
    uint32_t bits[2];
#pragma unroll
    for (int k = 0; k < 2; ++k)
      bits[k] = T == DType::bf16
                    ? halves[k] << 16
                    : quant::bits_of(__half2float(__ushort_as_half((unsigned short)halves[k])));
    return max(bits[0], bits[1]);
  }
}

// x · sign + other, sign ±1: other + x or other − x with the single rounding (and flushes) of
// add.rn.ftz / sub.rn.ftz, since the product is exact.
__device__ __forceinline__ float add_signed(float x, float sign, float other) {
  float r;
  asm("fma.rn.ftz.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(x), "f"(sign), "f"(other));
  return r;
}

// hadamard_rotate's butterflies over a row held by its kLanes lanes, after the signs and
// before the norm (the encoding's); every lane of the warp calls it.
template <int D>
__device__ __forceinline__ void rotate(float* v, int in_row) {
#pragma unroll
  for (int h = 1; h < kValues; h *= 2)
#pragma unroll
    for (int k = 0; k < kValues; ++k)
      if ((k & h) == 0) quant::butterfly(v[k], v[k + h]);
#pragma unroll
  for (int lanes = 1; lanes < RowShape<D>::kLanes; lanes *= 2) {  // stage h = kValues · lanes
    // The lane of the pair's first element keeps first + second, the other first − second.
    const float sign = (in_row & lanes) != 0 ? -1.0f : 1.0f;
#pragma unroll
    for (int k = 0; k < kValues; ++k)
      v[k] = add_signed(v[k], sign, __shfl_xor_sync(kFullMask, v[k], lanes));
  }
}

// y = v · norm: the rotation's last step (1 without).
template <int D, bool kRotate>
__device__ __forceinline__ float norm_of() {
  return kRotate ? quant::hadamard_norm(D) : 1.0f;
}

// The group's scale from the abs_bits of its largest |v| (before the norm): the CPU's
// fp8_input_scale of the largest |v · norm| (the product is monotone in |v|).
__device__ __forceinline__ float scale_of_amax(uint32_t largest, float norm) {
  return quant::fp8_input_scale(quant::ftz<FtzOp::mul>(quant::amax_from_abs_bits(largest), norm));
}

// A slice's 32 codes to dst (32 bytes, 16-byte aligned): by the bracket, by quotients where it
// does not decide (the whole slice: about one in a thousand).
__device__ __forceinline__ void encode_slice(const float* v, const quant::Fp8InputDivisor& d,
                                             uint8_t* dst) {
  uint32_t words[kValues / 4];
  uint32_t differ = d.bracketed ? 0u : 1u;
  if (d.bracketed) {
#pragma unroll
    for (int j = 0; j < kValues / 4; ++j) {
      const float* q = v + 4 * j;
      const uint32_t below = quant::fp8_input_encode_bracket(q[0], q[1], d.below) |
                             uint32_t{quant::fp8_input_encode_bracket(q[2], q[3], d.below)} << 16;
      const uint32_t above = quant::fp8_input_encode_bracket(q[0], q[1], d.above) |
                             uint32_t{quant::fp8_input_encode_bracket(q[2], q[3], d.above)} << 16;
      differ |= below ^ above;
      words[j] = below;
    }
  }
  if (differ != 0) {
#pragma unroll
    for (int j = 0; j < kValues / 4; ++j) {
      const float* q = v + 4 * j;
      words[j] = quant::fp8_input_encode_exact(q[0], q[1], d) |
                 uint32_t{quant::fp8_input_encode_exact(q[2], q[3], d)} << 16;
    }
  }
  auto* out = reinterpret_cast<uint4*>(dst);  // written once: streaming stores
  __stcs(out, make_uint4(words[0], words[1], words[2], words[3]));
  __stcs(out + 1, make_uint4(words[4], words[5], words[6], words[7]));
}

// --- one pass: units of threads over per-block groups ------------------------------------------

// How a one-pass launch cuts the groups (b, block, h) of scale's layout; the host fills it.
struct UnitPlan {
  int32_t unit_log2;       // a unit, one group's threads: 1 << unit_log2
  int32_t groups_per_cta;  // the CTA's threads / the unit's
  int64_t groups;          // batch · num_blocks · heads
  int64_t stride;          // groups from one of a unit's to its next: grid · groups_per_cta
};

// A group's coordinates, stepped by the plan's stride with carries instead of divisions.
struct GroupAt {
  int32_t b, block, h;

  __device__ GroupAt(const Fp8QuantizeProblem& p, int64_t g)
      : b(int32_t(g / p.heads / p.num_blocks)),
        block(int32_t(g / p.heads % p.num_blocks)),
        h(int32_t(g % p.heads)) {}

  __device__ void advance(const Fp8QuantizeProblem& p, const GroupAt& step) {
    h += step.h;
    const int32_t carry = h >= p.heads;
    h -= carry * int32_t(p.heads);
    block += step.block + carry;
    const int32_t block_carry = block >= p.num_blocks;
    block -= block_carry * int32_t(p.num_blocks);
    b += step.b + block_carry;
  }
};

// The rows of a group: [row0, row0 + count) as element_at counts them.
struct GroupRows {
  int64_t row0 = 0;
  int32_t count = 0;  // 0 past the last group, and for a block past its sequence's end
  int32_t b = 0, h = 0;
};

__device__ __forceinline__ GroupRows rows_of_group(const Fp8QuantizeProblem& p, const GroupAt& at,
                                                   bool live) {
  GroupRows r;
  r.b = at.b, r.h = at.h;
  if (!live) return r;
  const int64_t first = int64_t{at.block} * p.block_rows;
  const int64_t start = p.first_row(at.b);
  const int64_t length = p.first_row(at.b + 1) - start;
  r.row0 = (p.cu_seqlens != nullptr ? start : 0) + first;
  r.count = int32_t(max(int64_t{0}, min(length - first, int64_t{p.block_rows})));
  return r;
}

// The largest `value` over the unit's threads; every thread of the CTA calls it. Past a warp,
// through shared memory whose two halves take turns (a barrier per use, none to reuse one).
template <int kMaxWarps>
__device__ __forceinline__ uint32_t unit_max(uint32_t value, int unit_log2,
                                             uint32_t (&partial)[2][kMaxWarps], int& turn) {
  if (unit_log2 <= 5) {  // within a warp
    for (int lanes = 1; lanes < (1 << unit_log2); lanes *= 2)
      value = max(value, __shfl_xor_sync(kFullMask, value, lanes));
    return value;
  }
  const int warp = int(threadIdx.x) / kWarpLanes, lane = int(threadIdx.x) % kWarpLanes;
  value = __reduce_max_sync(kFullMask, value);
  if (lane == 0) partial[turn][warp] = value;
  __syncthreads();
  const int warps = 1 << (unit_log2 - 5), first = warp & ~(warps - 1);
  value = __reduce_max_sync(kFullMask, lane < warps ? partial[turn][first + lane] : 0u);
  turn ^= 1;
  return value;
}

template <int D, DType T, bool kRotate>
__global__ void __launch_bounds__(Input<T>::kMaxUnitThreads)
    block_kernel(const __grid_constant__ Fp8QuantizeProblem p, const UnitPlan plan) {
  using In = Input<T>;
  constexpr int kLanes = RowShape<D>::kLanes;
  constexpr int kMaxWarps = In::kMaxUnitThreads / kWarpLanes;
  extern __shared__ uint4 staged[];
  __shared__ alignas(16) uint32_t sign_words[kMaxD];
  __shared__ uint32_t partial[2][kMaxWarps];
  if (kRotate) load_sign_words<T>(p.signs, D, sign_words);
  const Staging<T> staging{staged, int(blockDim.x)};
  const int unit = int(threadIdx.x) >> plan.unit_log2;
  const int in_unit = int(threadIdx.x) & ((1 << plan.unit_log2) - 1);
  const int in_row = int(threadIdx.x) % kLanes;
  const int rows_per_step = (1 << plan.unit_log2) / kLanes;  // the unit's rows s · this + slot
  const int slot = in_unit / kLanes;
  const int column = in_row * kValues;
  const GroupAt step(p, plan.stride);
  int64_t first_group = int64_t{blockIdx.x} * plan.groups_per_cta;  // the CTA's, this turn
  GroupAt at(p, first_group + unit);
  GroupRows group = rows_of_group(p, at, first_group + unit < plan.groups);
  auto stage = [&](const GroupRows& g, int buffer) {
#pragma unroll
    for (int s = 0; s < kSlices; ++s) {
      const int r = s * rows_per_step + slot;
      staging.copy(p, buffer, s, element_at(p.x_stride, g.b, g.row0 + r, g.h) + column,
                   r < g.count);
    }
    ptx::cp_async_commit();
  };
  stage(group, 0);
  if (kRotate) __syncthreads();  // sign_words
  int buffer = 0, turn = 0;
  for (; first_group < plan.groups; first_group += plan.stride, buffer ^= 1) {
    const int64_t g = first_group + unit;
    ptx::cp_async_wait<0>();  // this turn's rows
    // The next turn's rows copy while this one computes.
    at.advance(p, step);
    const GroupRows next = rows_of_group(p, at, g + plan.stride < plan.groups);
    if (first_group + plan.stride < plan.groups) stage(next, buffer ^ 1);
    float v[kSlices][kValues];
    uint32_t largest = 0;
#pragma unroll
    for (int s = 0; s < kSlices; ++s) {
      uint32_t w[In::kWords];
      staging.read(buffer, s, w);
      if (kRotate) apply_signs<T>(w, sign_words + in_row * In::kWords);
      if (!kRotate && !In::kWide) largest = max(largest, words_amax_bits<T>(w));
      unpack<T>(w, v[s]);
      if (kRotate) rotate<D>(v[s], in_row);
      if (kRotate || In::kWide) largest = max(largest, values_amax_bits(v[s]));
    }
    largest = unit_max(largest, plan.unit_log2, partial, turn);
    const float norm = norm_of<D, kRotate>();
    const float scale = scale_of_amax(largest, norm);
    if (g < plan.groups && in_unit == 0) p.scale[g] = scale;
    const quant::Fp8InputDivisor divisor = quant::fp8_input_divisor(scale, norm);
#pragma unroll
    for (int s = 0; s < kSlices; ++s) {
      const int r = s * rows_per_step + slot;
      if (r < group.count)
        encode_slice(
            v[s], divisor,
            p.codes + element_at(p.codes_stride, group.b, group.row0 + r, group.h) + column);
    }
    group = next;
  }
}

// --- two passes: warps over spans of (head, chunk of rows) items -------------------------------

// The warp's share of `items`: [begin, end), the same count give or take one for every warp.
struct Span {
  int64_t begin, end;

  __device__ explicit Span(int64_t items) {
    const int64_t warps = int64_t{gridDim.x} * kCtaWarps;
    const int64_t w = int64_t{blockIdx.x} * kCtaWarps + threadIdx.x / kWarpLanes;
    const int64_t each = items / warps, extra = items % warps;
    begin = w * each + min(w, extra);
    end = begin + each + (w < extra ? 1 : 0);
  }
};

// The sequence of flat rows near t: found once per head, then moved along with t.
struct Cursor {
  int64_t b = 0, first = 0, end = 0;  // sequence b holds flat rows [first, end)

  __device__ void find(const Fp8QuantizeProblem& p, int64_t t) {
    if (p.cu_seqlens == nullptr) {
      b = min(t / p.seqlen, p.batch - 1);
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
    first = p.first_row(b), end = p.first_row(b + 1);
  }

  __device__ void seek(const Fp8QuantizeProblem& p, int64_t t) {
    while (t >= end && b + 1 < p.batch) first = end, end = p.first_row(++b + 1);
    while (t < first && b > 0) end = first, first = p.first_row(--b);
  }
};

// A lane's row of an item: whether it is there, its group, where its codes go.
struct RowRef {
  int64_t group = -1;
  int64_t codes_at = 0;  // the lane's first code: an element offset
  bool live = false;
};

// Item (h, chunk)'s row of slice s for this lane; *x_at: where its values are.
template <int D>
__device__ __forceinline__ RowRef row_ref(const Fp8QuantizeProblem& p, Cursor& cursor, int64_t h,
                                          int64_t chunk, int s, int slot, int column,
                                          int64_t* x_at) {
  RowRef r;
  const int64_t t = chunk * RowShape<D>::kChunkRows + s * RowShape<D>::kRows + slot;
  if (t >= p.total) return r;
  cursor.seek(p, t);
  const int64_t i = t - cursor.first;
  // Varlen, out of contract: rows past scale's blocks are skipped, never written.
  if (p.granularity == Fp8Granularity::per_block && i / p.block_rows >= p.num_blocks) return r;
  const int64_t row = p.cu_seqlens != nullptr ? t : i;
  r.live = true;
  r.group = p.group(cursor.b, i, h);
  r.codes_at = element_at(p.codes_stride, cursor.b, row, h) + column;
  *x_at = element_at(p.x_stride, cursor.b, row, h) + column;
  return r;
}

// An item's coordinates, moved one item on (or back) along a span.
struct ItemAt {
  int64_t h, chunk;

  __device__ ItemAt(int64_t item, int64_t chunks) : h(item / chunks), chunk(item % chunks) {}

  // Returns whether the head changed (the cursor must be found again).
  __device__ bool step(int64_t chunks, bool forward) {
    chunk += forward ? 1 : -1;
    if (chunk >= 0 && chunk < chunks) return false;
    chunk = forward ? 0 : chunks - 1, h += forward ? 1 : -1;
    return true;
  }
};

// The lane's rows of item `at` into `buffer` (one commit group), and what they are.
template <int D, DType T>
__device__ __forceinline__ void stage_item(const Fp8QuantizeProblem& p, const Staging<T>& staging,
                                           int buffer, Cursor& cursor, const ItemAt& at, int slot,
                                           int column, RowRef (&rows)[kSlices]) {
#pragma unroll
  for (int s = 0; s < kSlices; ++s) {
    int64_t x_at = 0;
    rows[s] = row_ref<D>(p, cursor, at.h, at.chunk, s, slot, column, &x_at);
    staging.copy(p, buffer, s, x_at, rows[s].live);
  }
  ptx::cp_async_commit();
}

__device__ __forceinline__ void take_maximum(const Fp8QuantizeProblem& p, int64_t group,
                                             uint32_t largest) {
  if (group >= 0 && largest != 0)
    atomicMax(reinterpret_cast<uint32_t*>(p.scale) + group, kMaximumFlag | largest);
}

// Two-pass CTAs: the staged rows of their threads (64 KB of a 16-bit input, 128 KB of fp32).
template <DType T>
constexpr int two_pass_shared_bytes() {
  return Staging<T>::bytes(kCtaThreads);
}

// Two-pass CTAs an SM should hold: two of a 16-bit input (64 KB in flight), three for the
// unrotated amax pass, whose 62 registers let three fill shared memory (192 KB; the encode pass
// would spill at the 85 registers three allow). fp32's staging fits once.
template <DType T, bool kRotate, bool kEncode>
constexpr int two_pass_min_ctas() {
  return Input<T>::kWide ? 1 : kRotate || kEncode ? 2 : 3;
}

template <int D, DType T, bool kRotate>
__global__ void __launch_bounds__(kCtaThreads, (two_pass_min_ctas<T, kRotate, false>()))
    amax_kernel(const __grid_constant__ Fp8QuantizeProblem p, const int64_t chunks) {
  using In = Input<T>;
  constexpr int kLanes = RowShape<D>::kLanes;
  extern __shared__ uint4 staged[];
  __shared__ alignas(16) uint32_t sign_words[kMaxD];
  __shared__ int64_t warp_group[kCtaWarps];
  __shared__ uint32_t warp_largest[kCtaWarps];
  if (kRotate) load_sign_words<T>(p.signs, D, sign_words);
  const Staging<T> staging{staged, kCtaThreads};
  const int lane = int(threadIdx.x) % kWarpLanes, warp = int(threadIdx.x) / kWarpLanes;
  const int in_row = lane % kLanes, slot = lane / kLanes, column = in_row * kValues;
  const Span span(chunks * p.heads);
  ItemAt at(span.begin, chunks);
  Cursor cursor;
  RowRef rows[kSlices];
  if (span.begin < span.end) {
    cursor.find(p, min(at.chunk * RowShape<D>::kChunkRows + slot, p.total - 1));
    stage_item<D, T>(p, staging, 0, cursor, at, slot, column, rows);
  }
  ptx::allow_dependent_launch();
  if (kRotate) __syncthreads();  // sign_words
  ptx::wait_for_prior_grid();    // the maxima cleared
  int64_t group = -1;            // the lane's running group and the abs_bits of its largest |v|
  uint32_t largest = 0;
  int buffer = 0;
  for (int64_t item = span.begin; item < span.end; ++item, buffer ^= 1) {
    ptx::cp_async_wait<0>();  // this item's rows
    const RowRef current[kSlices] = {rows[0], rows[1]};
    static_assert(kSlices == 2, "current's initializer");
    if (item + 1 < span.end) {  // the next item's rows copy while this one computes
      if (at.step(chunks, true))
        cursor.find(p, min(at.chunk * RowShape<D>::kChunkRows + slot, p.total - 1));
      stage_item<D, T>(p, staging, buffer ^ 1, cursor, at, slot, column, rows);
    }
#pragma unroll
    for (int s = 0; s < kSlices; ++s) {
      uint32_t w[In::kWords], bits;
      staging.read(buffer, s, w);
      if (kRotate) {
        float v[kValues];
        apply_signs<T>(w, sign_words + in_row * In::kWords);
        unpack<T>(w, v);
        rotate<D>(v, in_row);
        bits = values_amax_bits(v);
      } else {
        bits = words_amax_bits<T>(w);
      }
      const RowRef& r = current[s];
      if (r.live) {
        if (r.group != group) {
          take_maximum(p, group, largest);
          group = r.group, largest = 0;
        }
        largest = max(largest, bits);
      }
    }
  }
  // The span's end: the warp's lanes mostly share their group, the CTA's warps too.
  const unsigned with_group = __ballot_sync(kFullMask, group >= 0);
  int64_t shared_group = -1;
  uint32_t shared_largest = 0;
  if (with_group != 0) {
    const int64_t candidate = __shfl_sync(kFullMask, group, __ffs(with_group) - 1);
    if (__all_sync(kFullMask, group == candidate || group < 0)) {
      shared_group = candidate;
      shared_largest = __reduce_max_sync(kFullMask, largest);
    } else {
      take_maximum(p, group, largest);
    }
  }
  if (lane == 0) warp_group[warp] = shared_group, warp_largest[warp] = shared_largest;
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t run = -1;
    uint32_t run_largest = 0;
    for (int w = 0; w < kCtaWarps; ++w) {
      if (warp_group[w] != run) {
        take_maximum(p, run, run_largest);
        run = warp_group[w], run_largest = 0;
      }
      run_largest = max(run_largest, warp_largest[w]);
    }
    take_maximum(p, run, run_largest);
  }
}

// A group's scale from its entry in scale's memory (either form).
__device__ __forceinline__ float scale_of_entry(uint32_t entry, float norm) {
  if ((entry & kMaximumFlag) == 0) return quant::from_bits(entry);
  return scale_of_amax(entry & ~kMaximumFlag, norm);
}

template <int D, DType T, bool kRotate>
__global__ void __launch_bounds__(kCtaThreads, (two_pass_min_ctas<T, kRotate, true>()))
    encode_kernel(const __grid_constant__ Fp8QuantizeProblem p, const int64_t chunks) {
  using In = Input<T>;
  constexpr int kLanes = RowShape<D>::kLanes;
  extern __shared__ uint4 staged[];
  __shared__ alignas(16) uint32_t sign_words[kMaxD];
  if (kRotate) load_sign_words<T>(p.signs, D, sign_words);
  const Staging<T> staging{staged, kCtaThreads};
  const int lane = int(threadIdx.x) % kWarpLanes;
  const int in_row = lane % kLanes, slot = lane / kLanes, column = in_row * kValues;
  const Span span(chunks * p.heads);
  ItemAt at(max(span.end - 1, int64_t{0}), chunks);  // backwards: from the span's end
  Cursor cursor;
  RowRef rows[kSlices];
  if (span.begin < span.end) {
    cursor.find(p, min(at.chunk * RowShape<D>::kChunkRows + slot, p.total - 1));
    stage_item<D, T>(p, staging, 0, cursor, at, slot, column, rows);
  }
  if (kRotate) __syncthreads();  // sign_words
  ptx::wait_for_prior_grid();    // the maxima complete
  const auto* entries = reinterpret_cast<const uint32_t*>(p.scale);
  const float norm = norm_of<D, kRotate>();
  // The final scales, each by one thread; readers of an entry get the same scale either way.
  for (int64_t g = int64_t{blockIdx.x} * kCtaThreads + threadIdx.x; g < p.scale_count();
       g += int64_t{gridDim.x} * kCtaThreads)
    p.scale[g] = scale_of_entry(entries[g], norm);
  int64_t group = -1;  // the lane's group and its divisor
  quant::Fp8InputDivisor divisor{};
  int buffer = 0;
  for (int64_t item = span.end - 1; item >= span.begin; --item, buffer ^= 1) {
    ptx::cp_async_wait<0>();  // this item's rows
    const RowRef current[kSlices] = {rows[0], rows[1]};
    if (item > span.begin) {  // the next item's rows copy while this one computes
      if (at.step(chunks, false))
        cursor.find(p, min(at.chunk * RowShape<D>::kChunkRows + slot, p.total - 1));
      stage_item<D, T>(p, staging, buffer ^ 1, cursor, at, slot, column, rows);
    }
#pragma unroll
    for (int s = 0; s < kSlices; ++s) {
      uint32_t w[In::kWords];
      float v[kValues];
      staging.read(buffer, s, w);
      if (kRotate) apply_signs<T>(w, sign_words + in_row * In::kWords);
      unpack<T>(w, v);
      if (kRotate) rotate<D>(v, in_row);
      const RowRef& r = current[s];
      if (r.live) {
        if (r.group != group) {
          group = r.group;
          divisor = quant::fp8_input_divisor(scale_of_entry(entries[group], norm), norm);
        }
        encode_slice(v, divisor, p.codes + r.codes_at);
      }
    }
  }
}

// Every entry of scale's memory set to `bits`: the cleared maxima (kMaximumFlag), or the scale
// 1 of every group when there are no rows.
__global__ void fill_scale_kernel(float* scale, int64_t count, uint32_t bits) {
  ptx::allow_dependent_launch();
  for (int64_t g = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; g < count;
       g += int64_t{gridDim.x} * blockDim.x)
    scale[g] = quant::from_bits(bits);
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

Status launched(const char* what, cudaError_t e = cudaGetLastError()) {
  if (e != cudaSuccess)
    return {Code::cuda,
            std::string("sm90 FP8 quantization: ") + what + ": " + cudaGetErrorString(e)};
  return Status::ok();
}

// CTAs of kKernel with kThreads threads and kShared bytes of dynamic shared memory that one SM
// holds at once, asked once (the same on every Hopper GPU); 0 if none.
template <auto kKernel, int kThreads, int kShared>
int64_t resident_ctas() {
  static const int ctas = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, kThreads, kShared) !=
        cudaSuccess)
      (void)cudaGetLastError(), n = 0;
    return n;
  }();
  return ctas;
}

// A persistent grid: `wanted` CTAs, at most as many as the SMs hold at once (and the problem's
// max_ctas).
Status persistent_grid(const Fp8QuantizeProblem& p, int64_t wanted, int64_t resident, int sm_count,
                       const char* what, int64_t* grid) {
  if (resident < 1)
    return {Code::cuda, std::string("sm90 FP8 quantization: ") + what + " fits no SM"};
  *grid = std::min(wanted, resident * sm_count);
  if (p.max_ctas > 0) *grid = std::min(*grid, p.max_ctas);
  return Status::ok();
}

// kernel<<<grid, threads, shared>>>(args...) allowed to start while the kernel before it drains;
// it waits for that one itself.
template <typename... Params, typename... Args>
Status launch_dependent(void (*kernel)(Params...), int64_t grid, int threads, int shared,
                        cudaStream_t stream, const char* what, Args&&... args) {
  return launched(what, sm90::launch_dependent(kernel, dim3(unsigned(grid)), threads, shared,
                                               stream, std::forward<Args>(args)...));
}

Status fill_scale(const Fp8QuantizeProblem& p, uint32_t bits, cudaStream_t stream) {
  fill_scale_kernel<<<blocks_for(p.scale_count()), kSmallThreads, 0, stream>>>(
      p.scale, p.scale_count(), bits);
  return launched("scale fill");
}

// The one-pass unit for blocks of block_rows rows: log2 of its threads, or −1 when no unit
// holds them (the two passes take such blocks).
template <int D, DType T>
int unit_log2_for(int64_t block_rows) {
  const int64_t steps = (block_rows + kSlices - 1) / kSlices;  // rows a unit covers per slice
  int log2 = 0;
  while ((int64_t{1} << log2) < steps * RowShape<D>::kLanes) ++log2;
  return (1 << log2) <= Input<T>::kMaxUnitThreads ? log2 : -1;
}

constexpr const char* kFamily = "sm90 FP8 quantization";

template <int D, DType T, bool kRotate>
Status one_pass(const Fp8QuantizeProblem& p, int unit_log2, int sm_count, cudaStream_t stream) {
  constexpr auto kKernel = block_kernel<D, T, kRotate>;
  constexpr int kMaxThreads = Input<T>::kMaxUnitThreads;
  HFA_RETURN_IF_ERROR(
      reserve_shared_memory<kKernel>(kFamily, Staging<T>::bytes(kMaxThreads), p.device.index));
  const int threads = std::max(1 << unit_log2, kCtaThreads);
  UnitPlan plan{unit_log2, threads >> unit_log2, p.scale_count(), 0};
  int64_t resident = resident_ctas<kKernel, kCtaThreads, Staging<T>::bytes(kCtaThreads)>();
  if constexpr (kMaxThreads > kCtaThreads)
    if (threads > kCtaThreads)
      resident = resident_ctas<kKernel, kMaxThreads, Staging<T>::bytes(kMaxThreads)>();
  int64_t grid = 0;
  HFA_RETURN_IF_ERROR(persistent_grid(p,
                                      (plan.groups + plan.groups_per_cta - 1) / plan.groups_per_cta,
                                      resident, sm_count, "block kernel", &grid));
  plan.stride = grid * plan.groups_per_cta;
  kKernel<<<unsigned(grid), unsigned(threads), Staging<T>::bytes(threads), stream>>>(p, plan);
  return launched("block kernel");
}

template <int D, DType T, bool kRotate>
Status two_passes(const Fp8QuantizeProblem& p, int sm_count, cudaStream_t stream) {
  constexpr auto kAmax = amax_kernel<D, T, kRotate>;
  constexpr auto kEncode = encode_kernel<D, T, kRotate>;
  constexpr int kShared = two_pass_shared_bytes<T>();
  HFA_RETURN_IF_ERROR(reserve_shared_memory<kAmax>(kFamily, kShared, p.device.index));
  HFA_RETURN_IF_ERROR(reserve_shared_memory<kEncode>(kFamily, kShared, p.device.index));
  const int64_t chunks = (p.total + RowShape<D>::kChunkRows - 1) / RowShape<D>::kChunkRows;
  const int64_t wanted = (chunks * p.heads + kCtaWarps - 1) / kCtaWarps;  // a warp an item
  int64_t amax_grid = 0, encode_grid = 0;
  HFA_RETURN_IF_ERROR(persistent_grid(p, wanted, resident_ctas<kAmax, kCtaThreads, kShared>(),
                                      sm_count, "amax kernel", &amax_grid));
  HFA_RETURN_IF_ERROR(persistent_grid(p, wanted, resident_ctas<kEncode, kCtaThreads, kShared>(),
                                      sm_count, "encode kernel", &encode_grid));
  HFA_RETURN_IF_ERROR(fill_scale(p, kMaximumFlag, stream));
  HFA_RETURN_IF_ERROR(
      launch_dependent(kAmax, amax_grid, kCtaThreads, kShared, stream, "amax kernel", p, chunks));
  return launch_dependent(kEncode, encode_grid, kCtaThreads, kShared, stream, "encode kernel", p,
                          chunks);
}

template <int D, DType T, bool kRotate>
Status quantize(const Fp8QuantizeProblem& p, int sm_count, cudaStream_t stream) {
  if (p.granularity == Fp8Granularity::per_block)
    if (const int unit_log2 = unit_log2_for<D, T>(p.block_rows); unit_log2 >= 0)
      return one_pass<D, T, kRotate>(p, unit_log2, sm_count, stream);
  return two_passes<D, T, kRotate>(p, sm_count, stream);
}

template <int D, DType T>
Status quantize(const Fp8QuantizeProblem& p, int sm_count, cudaStream_t stream) {
  return p.signs != nullptr ? quantize<D, T, true>(p, sm_count, stream)
                            : quantize<D, T, false>(p, sm_count, stream);
}

}  // namespace
}  // namespace hfa::sm90::fp8

namespace hfa::sm90 {

Status quantize_fp8(const detail::Fp8QuantizeProblem& p) {
  using namespace fp8;
  DeviceGuard guard(p.device.index);
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const DeviceFacts& facts = device_facts(p.device.index);
  if (!facts.status) return facts.status;
  if (p.total == 0) return fill_scale(p, quant::bits_of(1.0f), stream);  // no rows: scales 1
  return decode::with_head_dim(p.hdim, [&](auto head_dim) {
    constexpr int D = decltype(head_dim)::value;
    switch (p.x_dtype) {
      case DType::f32:
        return quantize<D, DType::f32>(p, facts.sm_count, stream);
      case DType::f16:
        return quantize<D, DType::f16>(p, facts.sm_count, stream);
      case DType::bf16:
        return quantize<D, DType::bf16>(p, facts.sm_count, stream);
      default:
        return Status{Code::internal, "sm90 FP8 quantization: x's dtype is not f32, f16 or bf16"};
    }
  });
}

Status hadamard_signs(const detail::HadamardSignsProblem& p) {
  using namespace fp8;
  DeviceGuard guard(p.device.index);
  signs_kernel<<<blocks_for(p.count), kSmallThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(
      p.seed, p.signs, p.count);
  return launched("signs kernel");
}

}  // namespace hfa::sm90
