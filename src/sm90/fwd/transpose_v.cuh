// The FP8 forward's copy of v, transposed: e4m3 wgmma takes K-major operands only, and P·V's K
// is the keys, so the kernel reads v as (kv head, dim, key) rows of keys (FlashAttention-3
// transposes in shared memory instead, in its producer warpgroup; a copy through global memory
// keeps the kernel's producer one thread, for one extra read and write of v).
//
// Layout: row (kv head h, dim d) holds every sequence's keys, sequence b from key
// vt_key_offset(b), a multiple of 16, to the next sequence's offset. Within each 16 keys the
// order is ptx::fp8_key_order's, the order in which P's registers hold its columns
// (fragment.cuh), so P·V needs no data movement between threads. Keys past the sequence's
// used length (seqused_k) and the gap up to the next sequence are zeros: a padded allocation's
// garbage, NaN included, never meets a zero probability (0·NaN = NaN).
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/problem.hpp"
#include "sm90/fwd/transposed_v_layout.hpp"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::fwd {

inline constexpr int kTransposeKeys = 128;  // keys a CTA of the transpose writes
inline constexpr int kTransposeThreads = 128;

struct TransposeVParams {
  const uint8_t* v;  // e4m3 codes
  detail::Strides v_stride;
  uint8_t* vt;
  int64_t row_keys;  // vt_row_keys
  int batch;
  int heads_kv;
  int hdim_v;
  int seqlen_k;  // fixed length: every sequence's allocated keys
  const int32_t* cu_seqlens_k;
  const int32_t* seqused_k;
  int ctas_per_sequence;  // of kTransposeKeys keys: a sequence's keys and the gap to the next
};

// One CTA per (sequence, 128 keys) × kv head (sequences along x: a batch may exceed grid.z's
// 65535): the keys' rows of v into shared memory (zeros past the used length), then each
// thread writes 16-key groups of a dim's transposed row.
//
// A warp of the second phase reads one byte of 8 key groups × 4 dims at a time. Rows are 128 or
// 256 bytes, so the groups' keys (16 rows apart) would share a bank: 8 wavefronts a load. Each
// row's 16-byte chunks are stored XOR its group (mod 8) instead, putting the groups' bytes in 8
// different banks (the 4 dims share a word).
__device__ __forceinline__ int swizzled_chunk(int key, int chunk) {
  return chunk ^ (key / kKeyGroup % 8);
}
template <int kMaxHeadDim>
__global__ void __launch_bounds__(kTransposeThreads)
    transpose_v_kernel(const __grid_constant__ TransposeVParams p) {
  static_assert(kMaxHeadDim >= 8 * 16, "the swizzle spreads 8 key groups over 8 chunks");
  __shared__ alignas(16) uint8_t rows[kTransposeKeys][kMaxHeadDim];
  const int b = int(blockIdx.x) / p.ctas_per_sequence, head = blockIdx.y;
  const int64_t first_key =
      p.cu_seqlens_k != nullptr ? p.cu_seqlens_k[b] : int64_t(b) * p.seqlen_k;
  const int allocated =
      p.cu_seqlens_k != nullptr ? p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b] : p.seqlen_k;
  const int used = p.seqused_k != nullptr ? min(p.seqused_k[b], allocated) : allocated;
  const int64_t begin = vt_key_offset(first_key, b);
  const int64_t end = b + 1 < p.batch ? vt_key_offset(first_key + allocated, b + 1) : p.row_keys;
  const int key0 = int(blockIdx.x) % p.ctas_per_sequence * kTransposeKeys;
  if (begin + key0 >= end) return;

  const int chunks = p.hdim_v / 16;
  const uint8_t* v = p.v + (p.cu_seqlens_k != nullptr ? 0 : int64_t(b) * p.v_stride.batch) +
                     (p.cu_seqlens_k != nullptr ? first_key * p.v_stride.row : 0) +
                     int64_t(head) * p.v_stride.head;
  for (int i = threadIdx.x; i < kTransposeKeys * chunks; i += kTransposeThreads) {
    const int key = i / chunks, chunk = i % chunks;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (key0 + key < used) {
      const uint8_t* row = v + int64_t(key0 + key) * p.v_stride.row;
      value = *reinterpret_cast<const uint4*>(row + chunk * 16);
    }
    *reinterpret_cast<uint4*>(&rows[key][swizzled_chunk(key, chunk) * 16]) = value;
  }
  __syncthreads();

  constexpr int kGroups = kTransposeKeys / kKeyGroup;
  for (int i = threadIdx.x; i < p.hdim_v * kGroups; i += kTransposeThreads) {
    const int group = i % kGroups, dim = i / kGroups;
    const int64_t at = begin + key0 + group * kKeyGroup;
    if (at >= end) continue;
    uint32_t words[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      uint32_t word = 0;
#pragma unroll
      for (int byte = 0; byte < 4; ++byte) {
        const int key = group * kKeyGroup + ptx::fp8_key_order(4 * w + byte);
        word |= uint32_t(rows[key][swizzled_chunk(key, dim / 16) * 16 + dim % 16]) << (8 * byte);
      }
      words[w] = word;
    }
    uint8_t* row = p.vt + (int64_t(head) * p.hdim_v + dim) * p.row_keys;
    *reinterpret_cast<uint4*>(row + at) = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

}  // namespace hfa::sm90::fwd
