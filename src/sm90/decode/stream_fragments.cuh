// Where the stream kernel's lanes find their cache values, and how codes become mma fragments
// without a trip through a widened tile in shared memory.
//
// The stream kernel (stream_kernel.cuh) computes Sᵀ = K·Qᵀ and Oᵀ = Vᵀ·Pᵀ with mma.sync
// m16n8k16: 16 keys are the M of the score tile, the ≤ 8 query rows its N. A lane's A fragment
// then holds values of two keys (Sᵀ) or of four keys at two dims (Oᵀ), and because a dot product
// does not care about the order of its terms, the kernel chooses which head dims and which keys a
// fragment slot means so that each lane reads whole 16-byte chunks (or 8-byte halves) of a few
// cache rows and widens them in registers:
//   - K (Sᵀ's A): lane (g, c) owns keys key_of_m(g) and key_of_m(g + 8) and 32 of their dims;
//     q's B fragment is gathered at the same dims (q_dim), once per CTA.
//   - V (Oᵀ's A): lane (g, c) owns the consecutive keys 4c … 4c+3 (Pᵀ's k slots 2c, 2c+1, 2c+8,
//     2c+9 mean those keys) and the 16 dims 16g … 16g+15; an output fragment row is dim
//     16g + 2·mt (+1 for the fragment's lower half).
// Pairs across two keys (what Vᵀ's fragment needs) come from one byte permute (PRMT) of the two
// rows' code words, so the widening of V costs what K's does.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "sm90/decode/dequant.cuh"
#include "sm90/decode/params.hpp"
#include "sm90/decode/stream_shape.hpp"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::decode::stream {

inline constexpr int kKSteps = kHeadDim / 16;     // Sᵀ's k steps over the head dim
inline constexpr int kDimTiles = kHeadDim / 16;   // Oᵀ's M tiles over the head dim
inline constexpr int kDimsPerLaneV = 16;          // V dims a lane owns: 16g … 16g+15

// Sᵀ's M index (and Pᵀ's K index) m ↔ the warp-local key. Lane c's Pᵀ slots 2c, 2c+1, 2c+8,
// 2c+9 are the keys 4c … 4c+3.
__host__ __device__ constexpr int key_of_m(int m) {
  return 4 * ((m & 7) >> 1) + 2 * (m >> 3) + (m & 1);
}

// Byte permutes (PRMT selectors): result byte i = source byte (selector nibble i) of {a, b}.
inline constexpr uint32_t kInterleaveLowBytes = 0x5140;   // a0 b0 a1 b1
inline constexpr uint32_t kInterleaveHighBytes = 0x7362;  // a2 b2 a3 b3
inline constexpr uint32_t kLowHalves = 0x5410;            // a0 a1 b0 b1
inline constexpr uint32_t kHighHalves = 0x7632;           // a2 a3 b2 b3

// Two E4M3 codes (the low or high half of a word) as an f16 pair: exact, one instruction.
template <int kHalf>
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t word) {
  const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(kHalf == 0 ? word & 0xffffu : word >> 16), __NV_E4M3);
  return *reinterpret_cast<const uint32_t*>(&r);
}

// ---- bf16 / fp16, 256-byte rows of 16 chunks -------------------------------------------------

// Plain caches need no widening: ldmatrix reads K's fragments and Vᵀ's (transposed) straight
// from the staged rows, the head dims in their natural order: k step ks is dims 16ks … 16ks+15
// (q's fragment slot 1 the upper 8) and Oᵀ's dim tile mt is dims 16mt … 16mt+15.
__host__ __device__ constexpr int plain_q_dim(int c, int ks, int slot, int e) {
  return 16 * ks + 8 * slot + 2 * c + e;
}
// An ldmatrix reads the 8 rows key_of_m(0..7) (or key_of_m(8..15)) of a tile at one chunk:
// XOR the chunk with a function that is distinct over each of those row sets.
__device__ __forceinline__ int plain_chunk(int row, int chunk) {
  return chunk ^ (((row >> 1) & 6) | (row & 1));
}
// Lane l's row (an m index) and chunk offset for ldmatrix.x4: matrix l / 8, row l % 8. K: the
// matrices are (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15), a0 … a3.
// Vᵀ (transposed, keys are its k): (dims 0-7, keys m 0-7), (dims 8-15, m 0-7), (dims 0-7,
// m 8-15), (dims 8-15, m 8-15).
__device__ __forceinline__ int plain_k_m(int lane) { return lane % 8 + 8 * ((lane / 8) & 1); }
__device__ __forceinline__ int plain_k_chunk(int lane) { return lane / 16; }
__device__ __forceinline__ int plain_v_m(int lane) { return lane % 8 + 8 * (lane / 16); }
__device__ __forceinline__ int plain_v_chunk(int lane) { return (lane / 8) & 1; }

// The head dim of Oᵀ's accumulator o[mt][2·half + …] of lane group g: dims follow the V
// fragments' layout (natural tiles for plain caches, 16 dims a lane for the widened ones).
template <Storage kStorage>
__device__ __forceinline__ int output_dim(int g, int mt, int half) {
  if constexpr (kStorage == Storage::plain) return 16 * mt + 8 * half + g;
  else return kDimsPerLaneV * g + 2 * mt + half;
}

// ---- FP8 (E4M3), 128-byte rows of 8 chunks -------------------------------------------------

// Lane c reads chunks c and c + 4 of its two K rows; word j of chunk h holds the dims of k step
// 4h + j: its low half slot 0 (fragment k 2c, 2c+1), its high half slot 1 (k 2c+8, 2c+9).
__host__ __device__ constexpr int fp8_q_dim(int c, int ks, int slot, int e) {
  return 16 * (c + 4 * (ks >> 2)) + 4 * (ks & 3) + 2 * slot + e;
}

// Chunk swizzles (16-byte chunk index XOR a function of the warp-local row), each chosen so that
// the 8 lanes of an LDS.128 phase read 8 distinct bank groups. K: a phase reads chunks 0-3 of
// keys 4p and 4p+1. V: a phase reads chunks g, g+1 of keys 4c + j for c = 0..3.
__device__ __forceinline__ int fp8_k_chunk(int row, int chunk) { return chunk ^ ((row & 1) << 2); }
__device__ __forceinline__ int fp8_v_chunk(int row, int chunk) {
  return chunk ^ (((row >> 2) & 3) << 1);
}

// K's A fragment of one k step from word j of chunk h of keys key_of_m(g) (lo) and
// key_of_m(g + 8) (hi): k step 4h + j, {lo slot 0, hi slot 0, lo slot 1, hi slot 1}.
__device__ __forceinline__ void fp8_k_step(uint32_t lo, uint32_t hi, uint32_t (&a)[4]) {
  a[0] = e4m3x2_to_f16x2<0>(lo);
  a[1] = e4m3x2_to_f16x2<0>(hi);
  a[2] = e4m3x2_to_f16x2<1>(lo);
  a[3] = e4m3x2_to_f16x2<1>(hi);
}

// Vᵀ's A fragments for the 8 dim tiles from chunk g of keys 4c … 4c+3 (rows[0..3]):
// a[mt] = {keys (4c, 4c+1) at dim 16g+2mt, same keys at dim +1, keys (4c+2, 4c+3) at 16g+2mt,
// those at +1}.
__device__ __forceinline__ void fp8_v_fragments(const uint4 (&rows)[4], uint32_t (&a)[kDimTiles][4]) {
#pragma unroll
  for (int pair = 0; pair < 2; ++pair) {
    const uint4 x = rows[2 * pair], y = rows[2 * pair + 1];
    const uint32_t first[4] = {x.x, x.y, x.z, x.w};
    const uint32_t second[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {  // word w: dims 16g + 4w … 4w+3
      const uint32_t low = __byte_perm(first[w], second[w], kInterleaveLowBytes);
      const uint32_t high = __byte_perm(first[w], second[w], kInterleaveHighBytes);
      a[2 * w][2 * pair] = e4m3x2_to_f16x2<0>(low);
      a[2 * w][2 * pair + 1] = e4m3x2_to_f16x2<1>(low);
      a[2 * w + 1][2 * pair] = e4m3x2_to_f16x2<0>(high);
      a[2 * w + 1][2 * pair + 1] = e4m3x2_to_f16x2<1>(high);
    }
  }
}

// ---- FP4 (E2M1), 64-byte rows of 4 chunks --------------------------------------------------

// Lane c reads chunk c (dims 32c … 32c+31) of its two K rows: word j, nibble pair p (nibbles p,
// p+4: dims 8j+p, 8j+p+4, dequant.cuh) is k step 2j + p/2, slot p % 2.
__host__ __device__ constexpr int fp4_q_dim(int c, int ks, int slot, int e) {
  return 32 * c + 8 * (ks >> 1) + 2 * (ks & 1) + slot + 4 * e;
}
// The NVFP4 (16 values) and MXFP4 (32) block of K word j in lane c's chunk.
__host__ __device__ constexpr int nvfp4_k_block(int c, int j) { return 2 * c + (j >> 1); }

// V: lane g reads the 8-byte half g % 2 of chunk g / 2 of keys 4c + j. Those rows are 256 bytes
// apart, so a phase (16 lanes of an LDS.64) would hit one 64-byte half of the banks: odd c keys
// swap rows within their pair and keys 8-15 swap chunk halves, which spreads the phase over all
// four 32-byte quarters. K needs neither (a phase reads two adjacent rows whole).
__device__ __forceinline__ int fp4_v_row(int row) { return row ^ ((row >> 2) & 1); }
__device__ __forceinline__ int fp4_v_chunk(int row, int chunk) { return chunk ^ (((row >> 3) & 1) << 1); }

// K's A fragments of k steps 2j and 2j + 1 from word j of the two keys' chunks, each word
// times its block's multiplier.
template <typename Element>
__device__ __forceinline__ void fp4_k_steps(uint32_t lo, uint32_t hi, uint32_t lo_multiplier,
                                            uint32_t hi_multiplier, uint32_t (&a)[2][4]) {
  const uint4 l = e2m1x8_scaled<Element>(lo, lo_multiplier);
  const uint4 h = e2m1x8_scaled<Element>(hi, hi_multiplier);
  a[0][0] = l.x;  a[0][1] = h.x;  a[0][2] = l.y;  a[0][3] = h.y;
  a[1][0] = l.z;  a[1][1] = h.z;  a[1][2] = l.w;  a[1][3] = h.w;
}

// Vᵀ's A fragments from the 8 bytes (dims 16g … 16g+15) of keys 4c … 4c+3: a PRMT puts four
// nibbles of each key of a pair into one word (first key low, second high), so the pair
// extraction of dequant.cuh yields (key, next key) at one dim. multiplier[pair]: the block
// scales of the two keys, one per half.
template <typename Element>
__device__ __forceinline__ void fp4_v_fragments(const uint2 (&rows)[4], const uint32_t (&multiplier)[2],
                                                uint32_t (&a)[kDimTiles][4]) {
#pragma unroll
  for (int pair = 0; pair < 2; ++pair) {
    const uint2 x = rows[2 * pair], y = rows[2 * pair + 1];
    const uint32_t first[2] = {x.x, x.y};
    const uint32_t second[2] = {y.x, y.y};
#pragma unroll
    for (int w = 0; w < 2; ++w) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {  // dims 8w + 4q … 8w + 4q + 3
        const uint32_t word = __byte_perm(first[w], second[w], q == 0 ? kLowHalves : kHighHalves);
        const uint4 v = e2m1x8_scaled<Element>(word, multiplier[pair]);
        const int mt = 4 * w + 2 * q;
        a[mt][2 * pair] = v.x;      a[mt][2 * pair + 1] = v.y;
        a[mt + 1][2 * pair] = v.z;  a[mt + 1][2 * pair + 1] = v.w;
      }
    }
  }
}

// The pair multiplier of two keys' blocks (one scale byte each): (first, second).
template <typename Element>
__device__ __forceinline__ uint32_t nvfp4_pair_multiplier(uint8_t first, uint8_t second) {
  const float2 scales = nvfp4_block_scales<Element>(uint16_t(first | (second << 8)));
  return ptx::pack_pair<Element>(scales.x, scales.y);
}

template <typename Element>
__device__ __forceinline__ uint32_t mxfp4_pair_multiplier(uint8_t first, uint8_t second) {
  const uint32_t a = mxfp4_block_multiplier<Element>(first);
  const uint32_t b = mxfp4_block_multiplier<Element>(second);
  return __byte_perm(a, b, kLowHalves);  // both are broadcast pairs: (a, b) from their low halves
}

}  // namespace hfa::sm90::decode::stream
