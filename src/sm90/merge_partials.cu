// hfa_merge_partials on a Hopper GPU: a memory-bound pass that reads each input once and writes
// each output once; the CPU (cpu/merge_partials.cpp) is its oracle, and both take a row's
// weights and LSE from merge_row (common/merge_partials.hpp) and add Σ weight_k · out_k in fp32,
// in partial order.
//
// A CTA merges a tile of rows at a time: the rows (b, i, h) of up to kTileHeads heads of a run
// of consecutive tokens (b, i), at most kTileRows of them, in two passes.
// - LSE pass, a thread a row, the tile's rows token fastest: a warp's LSE loads of one head are
//   consecutive floats of the (batch, heads, seqlen) LSE, full 32-byte sectors (a row's 4 bytes
//   of a sector per request, otherwise). merge_row issues the N loads before it uses one: one
//   round trip a tile. The thread writes the merged LSE at once: an lse that is the very view of
//   an input's (in place) has had this element read, by this thread, and no other reads it. The
//   row's address in each partial and in out, its weights and live partials go to shared memory.
// - Data pass, a group of lanes a row (a power of two within a warp), kSlicesInFlight slices of
//   kVector values a lane: lanes take consecutive slices, so every warp access is contiguous
//   runs of 128 bytes (fp32) or 64 (16-bit). A lane loads its slices of kPartialBatch live
//   partials before it adds them, and adds all of a slice's partials before it stores it: each
//   element of out is read and written by one thread, in that order (in place is safe). A
//   partial whose LSE is −inf is never read.
// As many CTAs as the GPU holds at once stride over the tiles, sized so that the last round of
// tiles keeps most CTAs busy. Without the vector path (hdim not a multiple of kVector, rows not
// aligned to a vector access) a slice is one value.
//
// Why (issue 14): the previous kernel gave each row to a group of lanes (16 at hdim 128) that
// loaded the row's LSEs (4 useful bytes of each 32-byte sector; merge_row then used each LSE as
// it loaded it) and only then its outputs, 48 bytes in flight a lane at the ring's fp32 + bf16
// merge, one row a thread, 768 threads an SM (80 registers): ~36 KB in flight an SM at best and
// none during the LSE round trips; it moved 0.47× a device copy's bytes a second. This one keeps
// 96 bytes a lane (72 KB an SM) in flight there, 128 (96 KB) at fp32 partials, and waits on LSEs
// once a tile (one round trip of the ~9 a tile takes there).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>

#include "common/errors.hpp"
#include "common/merge_partials.hpp"
#include "sm90/common/launch.hpp"
#include "sm90/device.hpp"
#include "sm90/operations.hpp"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::merge {
namespace {

using detail::kMaxMergePartials;
using detail::MergePartialsProblem;
using detail::MergeRow;
using detail::RowAt;
using Partial = MergePartialsProblem::Partial;

constexpr int kThreads = 256;  // per CTA
constexpr int kWarpLanes = 32;
// Rows of a tile: one a thread in the LSE pass.
constexpr int kTileRows = kThreads;
// Tokens whose LSEs of one head fill a sector, the unit of L2's and DRAM's accesses (8 floats);
// a tile of that many tokens holds the most heads, 32 (a warp then loads 4 heads × 8 tokens: 4
// full sectors).
constexpr int kSectorBytes = 32;
constexpr int kSectorTokens = kSectorBytes / int(sizeof(float));
constexpr int kTileHeads = kTileRows / kSectorTokens;
// Values of a vector slice: one 16-byte access of fp32, one 8-byte access of a 16-bit dtype, so
// that lanes taking consecutive slices make every access of a warp contiguous in every dtype
// (8 values a lane split each fp32 access into halves of sectors, two requests a sector).
constexpr int kVector = 4;
// Slices and partials a lane loads before it adds them: 8 loads, 96 bytes in flight a lane at
// the ring's merge (fp32 + bf16, into fp32), 128 at fp32 partials; at kCtasPerSm that is 72 and
// 96 KB an SM, where an H200 needs ~32-64 KB to reach its bandwidth.
constexpr int kSlicesInFlight = 4;
constexpr int kPartialBatch = 2;
// CTAs an SM holds, for ptxas: at most 85 registers a thread, of which the data pass takes 80
// without spills (93 unbounded, 64 at 4 CTAs an SM with 80 bytes of spills). More bytes in
// flight (16 loads a lane) would take ~112 registers and 2 CTAs an SM: no more in flight an SM.
constexpr int kCtasPerSm = 3;
constexpr int64_t kMaxBlocks = INT32_MAX;  // grid.x

// How a call's rows are cut into tiles and their rows into lanes.
struct Tiling {
  int lanes_log2;      // lanes per row: 1 << lanes_log2, within one warp
  int slices;          // per row: hdim / V rounded up
  int tile_tokens;     // tokens of a tile (its last token tile may have fewer)
  int tile_heads;      // heads of a tile, ≤ kTileHeads (its last head tile may have fewer)
  int64_t head_tiles;  // tiles across the heads
  int64_t tiles;       // token tiles × head_tiles, head tiles fastest (out's order)
};

// What the LSE pass hands the data pass, in dynamic shared memory sized for the call's N
// partials (12 (N + 1) bytes a row: 9 KB at N = 2, 51 at N = 16): each tile row's address in
// every partial and in out (no 64-bit stride products in the data pass, and no registers
// holding them across it), its weights and its live partials. [partial][row]: the data pass's
// groups of a warp read distinct banks, a group's lanes the same word (a broadcast).
struct TileRows {
  uintptr_t* address;  // [N + 1][kTileRows]: partial k's row at [k], out's at [N]
  float* weight;       // [N][kTileRows]
  uint32_t* live;      // [kTileRows]

  static constexpr std::size_t bytes(int n) {
    return std::size_t{kTileRows} *
           ((n + 1) * sizeof(uintptr_t) + n * sizeof(float) + sizeof(uint32_t));
  }
  __device__ TileRows(void* shared, int n)
      : address(static_cast<uintptr_t*>(shared)),
        weight(reinterpret_cast<float*>(address + (n + 1) * kTileRows)),
        live(reinterpret_cast<uint32_t*>(weight + n * kTileRows)) {}
};

__device__ __forceinline__ float half_to_float(DType dtype, uint32_t bits) {
  const auto h = static_cast<unsigned short>(bits);
  return dtype == DType::bf16 ? __uint_as_float(bits << 16) : __half2float(__ushort_as_half(h));
}

// The raw bits of V values of a partial's row from `address` on (streaming loads: read once):
// V words of fp32, V / 2 of a 16-bit dtype (one value in raw[0] where V is 1).
template <int V>
__device__ __forceinline__ void load_raw(DType dtype, uintptr_t address, uint32_t* raw) {
  static_assert(V == 1 || V == 4, "one value, or one 16-byte (fp32) / 8-byte (16-bit) access");
  if (dtype == DType::f32) {
    if constexpr (V == 1) {
      raw[0] = __ldcs(reinterpret_cast<const unsigned int*>(address));
    } else {
      const uint4 w = __ldcs(reinterpret_cast<const uint4*>(address));
      raw[0] = w.x, raw[1] = w.y, raw[2] = w.z, raw[3] = w.w;
    }
  } else if constexpr (V == 1) {
    raw[0] = __ldcs(reinterpret_cast<const unsigned short*>(address));
  } else {
    const uint2 w = __ldcs(reinterpret_cast<const uint2*>(address));
    raw[0] = w.x, raw[1] = w.y;
  }
}

// Value v of what load_raw<V> loaded, as fp32.
template <int V>
__device__ __forceinline__ float raw_value(DType dtype, const uint32_t* raw, int v) {
  if (dtype == DType::f32) return __uint_as_float(raw[v]);
  return half_to_float(dtype, V == 1 ? raw[0] : raw[v / 2] >> (16 * (v % 2)));
}

template <typename Element, int V>
__device__ __forceinline__ void store_16bit(uintptr_t address, const float* v) {
  if constexpr (V == 1) {
    *reinterpret_cast<Element*>(address) = ptx::to_element<Element>(v[0]);
  } else {
    *reinterpret_cast<uint2*>(address) =
        make_uint2(ptx::pack_pair<Element>(v[0], v[1]), ptx::pack_pair<Element>(v[2], v[3]));
  }
}

template <int V>
__device__ __forceinline__ void store_slice(DType dtype, uintptr_t address, const float* v) {
  switch (dtype) {
    case DType::bf16:
      return store_16bit<__nv_bfloat16, V>(address, v);
    case DType::f16:
      return store_16bit<__half, V>(address, v);
    default:
      break;
  }
  if constexpr (V == 1) {
    *reinterpret_cast<float*>(address) = v[0];
  } else {
    *reinterpret_cast<float4*>(address) = make_float4(v[0], v[1], v[2], v[3]);
  }
}

__device__ __forceinline__ uintptr_t row_address(const void* base, DType dtype,
                                                 const detail::Strides& s, const RowAt& at) {
  const auto bytes = static_cast<int64_t>(dtype == DType::f32 ? sizeof(float) : sizeof(uint16_t));
  return reinterpret_cast<uintptr_t>(base) + detail::offset_of(s, at.b, at.i, at.h) * bytes;
}

// Bytes of `column` values of `dtype`.
__device__ __forceinline__ uintptr_t column_bytes(DType dtype, int column) {
  return uintptr_t(column) * (dtype == DType::f32 ? sizeof(float) : sizeof(uint16_t));
}

// Slices first, first + lanes, ... (kSlicesInFlight of them, those below `slices`) of tile row
// q: Σ weight_k · out_k over the row's live partials, in partial order, each value in fp32.
template <int V>
__device__ __forceinline__ void merge_slices(const MergePartialsProblem& p, const TileRows& tile,
                                             int q, int first, int lanes, int slices) {
  const int n = p.num_partials;
  const uint32_t live = tile.live[q];
  float sum[kSlicesInFlight][V] = {};
#pragma unroll
  for (int batch = 0; batch < kMaxMergePartials; batch += kPartialBatch) {
    if (batch >= n) break;
    uint32_t raw[kPartialBatch][kSlicesInFlight][V];
#pragma unroll
    for (int j = 0; j < kPartialBatch; ++j) {
      const int k = batch + j;
      if (k >= n) break;
      if ((live >> k & 1u) == 0) continue;
      const DType dtype = p.partials[k].dtype;
      const uintptr_t row = tile.address[k * kTileRows + q];
#pragma unroll
      for (int u = 0; u < kSlicesInFlight; ++u)
        if (const int slice = first + u * lanes; slice < slices)
          load_raw<V>(dtype, row + column_bytes(dtype, slice * V), raw[j][u]);
    }
#pragma unroll
    for (int j = 0; j < kPartialBatch; ++j) {
      const int k = batch + j;
      if (k >= n) break;
      if ((live >> k & 1u) == 0) continue;
      const DType dtype = p.partials[k].dtype;
      const float weight = tile.weight[k * kTileRows + q];
#pragma unroll
      for (int u = 0; u < kSlicesInFlight; ++u)
#pragma unroll
        for (int v = 0; v < V; ++v) sum[u][v] += weight * raw_value<V>(dtype, raw[j][u], v);
    }
  }
  const uintptr_t row = tile.address[n * kTileRows + q];
#pragma unroll
  for (int u = 0; u < kSlicesInFlight; ++u)
    if (const int slice = first + u * lanes; slice < slices)
      store_slice<V>(p.out_dtype, row + column_bytes(p.out_dtype, slice * V), sum[u]);
}

template <int V>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    merge_kernel(const __grid_constant__ MergePartialsProblem p, const Tiling tiling) {
  static_assert(kThreads % kWarpLanes == 0, "whole warps, so a row's group is within one");
  extern __shared__ __align__(16) unsigned char shared[];
  const TileRows tile(shared, p.num_partials);
  const int lanes = 1 << tiling.lanes_log2;
  const int lane = int(threadIdx.x) & (lanes - 1);
  const int group = int(threadIdx.x) >> tiling.lanes_log2;
  const int groups = kThreads >> tiling.lanes_log2;
  const int64_t tokens = p.batch * p.seqlen;
  // This thread's row of the LSE pass: token fastest.
  const int lse_token = int(threadIdx.x) % tiling.tile_tokens;
  const int lse_head = int(threadIdx.x) / tiling.tile_tokens;
  for (int64_t t = blockIdx.x; t < tiling.tiles; t += gridDim.x) {
    const int64_t first_token = t / tiling.head_tiles * tiling.tile_tokens;
    const int64_t first_head = t % tiling.head_tiles * tiling.tile_heads;
    const int tile_tokens = int(std::min<int64_t>(tiling.tile_tokens, tokens - first_token));
    const int tile_heads = int(std::min<int64_t>(tiling.tile_heads, p.heads - first_head));
    const int rows = tile_tokens * tile_heads;  // in out's order: q = token · tile_heads + head

    if (lse_token < tile_tokens && lse_head < tile_heads) {
      const int q = lse_token * tile_heads + lse_head;
      const int64_t token = first_token + lse_token;
      const RowAt at{token / p.seqlen, token % p.seqlen, first_head + lse_head};
      const MergeRow row = detail::merge_row(p, at);
#pragma unroll
      for (int k = 0; k < kMaxMergePartials; ++k) {
        if (k >= p.num_partials) continue;
        const Partial& part = p.partials[k];
        tile.address[k * kTileRows + q] = row_address(part.out, part.dtype, part.out_stride, at);
        tile.weight[k * kTileRows + q] = row.weight[k];
      }
      tile.address[p.num_partials * kTileRows + q] =
          row_address(p.out, p.out_dtype, p.out_stride, at);
      tile.live[q] = row.live;
      if (p.lse != nullptr) p.lse[detail::offset_of(p.lse_stride, at.b, at.i, at.h)] = row.lse;
    }
    __syncthreads();  // the tile's rows are in shared memory

    for (int q = group; q < rows; q += groups)
      for (int first = lane; first < tiling.slices; first += lanes * kSlicesInFlight)
        merge_slices<V>(p, tile, q, first, lanes, tiling.slices);
    __syncthreads();  // done with them: the next tile's LSE pass may overwrite them
  }
}

// Rows of `dtype` at `base` with these strides start at multiples of a V-value access: the
// address and every stride that moves (a dim of extent 1 never does, whatever its stride).
bool rows_aligned(const MergePartialsProblem& p, const void* base, DType dtype,
                  const detail::Strides& s) {
  const auto bytes = static_cast<int64_t>(dtype_size(dtype));
  const int64_t access = kVector * bytes;
  const auto moves_off = [&](int64_t extent, int64_t stride) {
    return extent > 1 && stride * bytes % access != 0;
  };
  return reinterpret_cast<uintptr_t>(base) % access == 0 && !moves_off(p.batch, s.batch) &&
         !moves_off(p.seqlen, s.row) && !moves_off(p.heads, s.head);
}

bool vector_path(const MergePartialsProblem& p) {
  bool aligned = p.hdim % kVector == 0 && rows_aligned(p, p.out, p.out_dtype, p.out_stride);
  for (int k = 0; k < p.num_partials; ++k)
    aligned = aligned &&
              rows_aligned(p, p.partials[k].out, p.partials[k].dtype, p.partials[k].out_stride);
  return aligned;
}

// CTAs of merge_kernel<V> an SM holds at once with the shared memory of n partials (registers
// and shared memory decide), asked once for each n.
template <int V>
Status resident_ctas_per_sm(int n, int* ctas) {
  static std::atomic<int> cached[kMaxMergePartials + 1] = {};
  if (const int known = cached[n].load(std::memory_order_relaxed); known > 0) {
    *ctas = known;
    return Status::ok();
  }
  int count = 0;
  if (const cudaError_t error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &count, merge_kernel<V>, kThreads, TileRows::bytes(n));
      error != cudaSuccess)
    return cuda_status("sm90 merge_partials", "occupancy", error);
  *ctas = std::max(count, 1);
  cached[n].store(*ctas, std::memory_order_relaxed);
  return Status::ok();
}

template <int V>
Status launch(const MergePartialsProblem& p, int sm_count) {
  const int slices = (p.hdim + V - 1) / V;
  // Lanes a row: kSlicesInFlight slices a lane where the row has that many, at most a warp.
  const int lanes = std::clamp(int(std::bit_ceil(unsigned(std::max(slices, 1)))) / kSlicesInFlight,
                               1, kWarpLanes);
  const std::size_t shared_bytes = TileRows::bytes(p.num_partials);
  HFA_RETURN_IF_ERROR(reserve_shared_memory<merge_kernel<V>>(
      "sm90 merge_partials", int(TileRows::bytes(kMaxMergePartials)), p.device.index));
  int ctas_per_sm = 0;
  HFA_RETURN_IF_ERROR(resident_ctas_per_sm<V>(p.num_partials, &ctas_per_sm));
  const int64_t resident = int64_t{sm_count} * ctas_per_sm;

  Tiling tiling{};
  tiling.lanes_log2 = std::countr_zero(unsigned(lanes));
  tiling.slices = slices;
  tiling.tile_heads = int(std::min<int64_t>(p.heads, kTileHeads));
  tiling.head_tiles = (p.heads + tiling.tile_heads - 1) / tiling.tile_heads;
  // As many tokens a tile as fit, or fewer: rounds of `resident` tiles, as many rounds as full
  // tiles need, with tiles cut evenly across them, so that the last round is not a few CTAs
  // holding the GPU up (16k tokens of 32 heads: 2341 tiles of 7 tokens on 396 CTAs, not 2048 of
  // 8 that leave the sixth round 68 CTAs), nor a short call a few SMs busy.
  const int64_t tokens = p.batch * p.seqlen;
  const int max_tokens = kTileRows / tiling.tile_heads;
  const int64_t full_tiles = (tokens + max_tokens - 1) / max_tokens * tiling.head_tiles;
  const int64_t rounds = (full_tiles + resident - 1) / resident;
  const int64_t token_tiles = (rounds * resident + tiling.head_tiles - 1) / tiling.head_tiles;
  tiling.tile_tokens =
      int(std::clamp<int64_t>((tokens + token_tiles - 1) / token_tiles, 1, max_tokens));
  tiling.tiles = (tokens + tiling.tile_tokens - 1) / tiling.tile_tokens * tiling.head_tiles;

  const int64_t blocks = std::min({kMaxBlocks, resident, tiling.tiles});
  merge_kernel<V>
      <<<unsigned(blocks), kThreads, shared_bytes, static_cast<cudaStream_t>(p.stream)>>>(p,
                                                                                          tiling);
  if (const cudaError_t error = cudaGetLastError(); error != cudaSuccess)
    return cuda_status("sm90 merge_partials", "launch", error);
  return Status::ok();
}

}  // namespace
}  // namespace hfa::sm90::merge

namespace hfa::sm90 {

Status merge_partials(const detail::MergePartialsProblem& p) {
  DeviceGuard guard(p.device.index);
  const DeviceFacts& facts = device_facts(p.device.index);
  if (!facts.status) return facts.status;
  return merge::vector_path(p) ? merge::launch<merge::kVector>(p, facts.sm_count)
                               : merge::launch<1>(p, facts.sm_count);
}

}  // namespace hfa::sm90
