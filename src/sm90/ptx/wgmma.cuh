// wgmma: warpgroup-wide asynchronous matrix multiply-accumulate (sm_90a).
//
// One instruction computes D(64×N) (+)= A(64×K)·B(K×N) for the 128 threads of a warpgroup, K
// = 32 bytes of elements (k16 for bf16/fp16, k32 for e4m3).
// A comes from shared memory (ss) or registers (rs), B always from shared memory; both are
// described by 64-bit descriptors. Accumulators are fp32, N/2 per thread, in the fragment
// layout documented in fragment.cuh.
#pragma once

#include <cstdint>
#include <type_traits>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace hfa::sm90::ptx {

#include "sm90/ptx/wgmma_ops.inc"

// ---- Shared-memory matrix descriptors -------------------------------------------------------
// Bits 0–13 start address >> 4, 16–29 leading byte offset >> 4, 32–45 stride byte offset >> 4,
// 62–63 swizzle mode. Tiles here use the 128-byte swizzle: a tile is stored as slabs of
// rows × 64 16-bit elements (128 B a row), each slab 1024-byte aligned, so the swizzle pattern
// (which repeats every 8 rows = 1024 B) starts at every slab and the base offset field stays 0.
inline constexpr uint32_t kSwizzleBytes = 128;
inline constexpr uint32_t kSwizzleAtomBytes = 8 * kSwizzleBytes;  // 8 rows of 128 B
inline constexpr uint64_t kSwizzle128Mode = 1;

__device__ __forceinline__ uint64_t descriptor_field(uint32_t bytes) { return (bytes & 0x3FFFF) >> 4; }

__device__ __forceinline__ uint64_t make_descriptor(uint32_t smem_addr, uint32_t leading_bytes,
                                                    uint32_t stride_bytes) {
  return descriptor_field(smem_addr) | descriptor_field(leading_bytes) << 16 |
         descriptor_field(stride_bytes) << 32 | kSwizzle128Mode << 62;
}

// K-major operand (K contiguous: Q and K as stored, A of Q·Kᵀ, B of Q·Kᵀ). The leading offset is
// unused with 128 B swizzle (one swizzle row spans the whole k16 step); 8-row groups are
// kSwizzleAtomBytes apart.
__device__ __forceinline__ uint64_t kmajor_descriptor(uint32_t smem_addr) {
  return make_descriptor(smem_addr, 16, kSwizzleAtomBytes);
}

// MN-major operand (M or N contiguous: V as stored, the B of P·V). Consecutive 64-wide column
// slabs are slab_bytes apart (leading offset); 8-row groups of K are kSwizzleAtomBytes apart.
// An operand must start on a slab: an MN extent that starts inside one would run into the next
// row of it, not the next slab.
__device__ __forceinline__ uint64_t mnmajor_descriptor(uint32_t smem_addr, uint32_t slab_bytes) {
  return make_descriptor(smem_addr, slab_bytes, kSwizzleAtomBytes);
}

// Moving a descriptor by a byte offset is adding to its address field (no carry can reach the
// next field while the offset stays inside shared memory). A GEMM's k-steps build one descriptor
// per operand and advance it: built anew for each step, the address masking and the constant
// upper word cost about four instructions a wgmma (SASS), while an advance is one 32-bit add on
// the lower word.
__device__ __forceinline__ uint64_t advance(uint64_t descriptor, uint32_t bytes) {
  const uint32_t lower = uint32_t(descriptor) + (bytes >> 4);
  return (descriptor & ~uint64_t(0xFFFFFFFFu)) | lower;
}

// ---- Ordering --------------------------------------------------------------------------------
// Registers an asynchronous wgmma reads or writes must not be touched by ordinary instructions
// in between: fence before issuing, commit the batch, wait until at most N batches are pending.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// The compiler does not know that an in-flight wgmma owns these registers; this empty asm makes
// each one opaque so no read or write of it is moved across a fence or wait.
template <int kCount>
__device__ __forceinline__ void fence_operands(float (&regs)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(regs[i])::"memory");
}
template <int kCount>
__device__ __forceinline__ void fence_operands(uint32_t (&regs)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(regs[i])::"memory");
}

// ---- Issue -----------------------------------------------------------------------------------
// Which dimension of a shared-memory operand is contiguous: K (A of Q·Kᵀ, both operands of the
// forward's first GEMM) or M/N (V as B of P·V; the transposed operands of the backward's dQ, dK
// and dV GEMMs). 16-bit operands take either; descriptors above say how each is laid out.
enum class Major : int { k = 0, mn = 1 };

template <typename Element>
inline constexpr bool kIsFp8 = std::is_same_v<Element, __nv_fp8_e4m3>;

template <typename Element>
inline constexpr bool kIs16Bit =
    std::is_same_v<Element, __nv_bfloat16> || std::is_same_v<Element, __half>;

#define HFA_IS(W) || N == W
// accumulate = false overwrites D (the first k-step of a GEMM). e4m3 operands are K-major only.
template <int N, typename Element, Major kMajorA = Major::k, Major kMajorB = Major::k>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                       bool accumulate) {
  static_assert(kIs16Bit<Element> || kIsFp8<Element>, "wgmma: bf16, fp16 or e4m3 operands");
  if constexpr (kIsFp8<Element>) {
    static_assert(kMajorA == Major::k && kMajorB == Major::k, "wgmma: e4m3 operands are K-major");
    static_assert(false HFA_WGMMA_FP8_WIDTHS(HFA_IS), "wgmma: e4m3 N not generated (gen_wgmma.py)");
#define HFA_CASE(W) \
  if constexpr (N == W) wgmma_ss_m64n##W##k32_e4m3(d, desc_a, desc_b, accumulate);
    HFA_WGMMA_FP8_WIDTHS(HFA_CASE)
#undef HFA_CASE
  } else {
    static_assert(false HFA_WGMMA_SS_WIDTHS(HFA_IS), "wgmma: N not generated (gen_wgmma.py)");
    constexpr bool kBf16 = std::is_same_v<Element, __nv_bfloat16>;
    constexpr int kA = int(kMajorA), kB = int(kMajorB);
#define HFA_CASE(W)                                                                         \
  if constexpr (N == W) {                                                                   \
    if constexpr (kBf16) wgmma_ss_m64n##W##k16_bf16<kA, kB>(d, desc_a, desc_b, accumulate); \
    else wgmma_ss_m64n##W##k16_f16<kA, kB>(d, desc_a, desc_b, accumulate);                  \
  }
    HFA_WGMMA_SS_WIDTHS(HFA_CASE)
#undef HFA_CASE
  }
}

// A is the m64 fragment of 32 bytes of K (fragment.cuh); B is MN-major for 16-bit elements
// (V as stored), K-major for e4m3 (V transposed).
template <int N, typename Element>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                       bool accumulate) {
  static_assert(kIs16Bit<Element> || kIsFp8<Element>, "wgmma: bf16, fp16 or e4m3 operands");
  if constexpr (kIsFp8<Element>) {
    static_assert(false HFA_WGMMA_FP8_WIDTHS(HFA_IS), "wgmma: e4m3 N not generated (gen_wgmma.py)");
#define HFA_CASE(W) \
  if constexpr (N == W) wgmma_rs_m64n##W##k32_e4m3(d, a, desc_b, accumulate);
    HFA_WGMMA_FP8_WIDTHS(HFA_CASE)
#undef HFA_CASE
  } else {
    static_assert(false HFA_WGMMA_RS_WIDTHS(HFA_IS), "wgmma: N not generated (gen_wgmma.py)");
    constexpr bool kBf16 = std::is_same_v<Element, __nv_bfloat16>;
#define HFA_CASE(W)                                                             \
  if constexpr (N == W) {                                                       \
    if constexpr (kBf16) wgmma_rs_m64n##W##k16_bf16(d, a, desc_b, accumulate);  \
    else wgmma_rs_m64n##W##k16_f16(d, a, desc_b, accumulate);                   \
  }
    HFA_WGMMA_RS_WIDTHS(HFA_CASE)
#undef HFA_CASE
  }
}
#undef HFA_IS

}  // namespace hfa::sm90::ptx
