// The tile kernel's producer (kernel.cuh): where a stage's cache rows are, their copies into the
// stage buffers, and the widening of quantized codes into bf16/fp16 tiles the consumer reads as
// a plain cache's. Each of the 4 warps owns 16 key rows of every stage end to end (lanes 0-15 one
// row each): it reads their pages, copies them and widens them, so a warp waits only for its own
// copies (__syncwarp), never for another warp's.
#pragma once

#include <cstdint>

#include "sm90/decode/config.hpp"
#include "sm90/decode/dequant.cuh"
#include "sm90/decode/params.hpp"
#include "sm90/decode/stage_buffers.cuh"
#include "sm90/decode/work.cuh"
#include "sm90/ptx/cp_async.cuh"
#include "sm90/ptx/mbarrier.cuh"

namespace hfa::sm90::decode {

inline constexpr int kSwizzleRows = 8;  // chunks XOR (row mod 8): conflict-free ldmatrix

// Byte offset of chunk `chunk` of row `row` in a swizzled tile of kRowBytes-byte rows. ldmatrix
// reads one chunk of 8 consecutive rows per phase: the XOR spreads them over 8 distinct chunks
// mod 8, i.e. all 32 banks, for any row length of at least 8 chunks (128 bytes, hdim 64), and
// only flips the low 3 bits of the chunk index, so the chunk stays inside its row.
template <int kRowBytes>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  static_assert(kRowBytes % (kSwizzleRows * kChunkBytes) == 0, "whole groups of 8 chunks a row");
  return row * kRowBytes + ((chunk ^ (row % kSwizzleRows)) * kChunkBytes);
}

// A key row of a stage, where the producer found it: byte offsets from the side's base; -1: no
// key (the copy zero-fills). Written by the lane that owns the row, read by the lanes that copy
// its pieces.
struct RowOffsets {
  int64_t k, v, k_scale, v_scale;
};
static_assert(sizeof(RowOffsets) == kRowOffsetsBytes, "config.hpp sizes the row table by it");

// The tile kernel's shared memory (config.hpp's offsets): the Q tile, the stages of K and V codes
// (and scales), the widened K and V tiles of quantized caches, the stages' row table.
template <typename C>
struct TileBuffers : StageBuffers<C> {
  unsigned char* const q_tile;
  RowOffsets* const row_table;
  unsigned char* const k_widened;
  unsigned char* const v_widened;

  __device__ __forceinline__ explicit TileBuffers(unsigned char* smem)
      : StageBuffers<C>(smem),
        q_tile(smem + C::kQOffset),
        row_table(reinterpret_cast<RowOffsets*>(smem + C::kRowTableOffset)),
        k_widened(smem + C::kDequantOffset),
        v_widened(k_widened + C::kTileBytes) {}
};

// What the consumer reads of a stage: K and V tiles in the swizzled bf16/fp16 layout (the codes
// themselves for a plain cache, else the widened tiles) and the stage's scales.
struct StageTiles {
  int stage;
  const unsigned char* k;
  const unsigned char* v;
};

template <typename Element, Storage kStorage, int kHeadDim>
struct TileProducer {
  using C = Config<kStorage, kHeadDim>;
  static constexpr int kRowBytes = C::kTileRowBytes;
  static constexpr int kN = C::kBlockN;
  static constexpr int kS = C::kStages;
  static constexpr int kWarpRows = C::kKeysPerWarp;

  const Params& p;
  const DecodeWork& work;  // the CTA's (work.cuh)
  const TileBuffers<C> buffers;
  const int own_row;    // the key row of every stage lane < kWarpRows owns
  const bool owns_row;
  const bool per_token;  // FP8 with a scale per token
  // A row's scale bytes in the cache: FP8's one fp32 (per token; known here, so its copy is one
  // word and no loop), FP4's block scales (NVFP4's or MXFP4's): whole words but MXFP4's at hdim 64.
  const int scale_bytes;
  const int scale_words;
  int pending_page = -1;  // the page of the lane's row of the next tile to publish

  __device__ __forceinline__ TileProducer(const Params& params, const DecodeWork& cta,
                                          unsigned char* smem)
      : p(params),
        work(cta),
        buffers(smem),
        own_row(work.warp * kWarpRows + work.lane),
        owns_row(work.lane < kWarpRows),
        per_token(params.scale_kind == ScaleKind::fp8_per_token),
        scale_bytes(kStorage == Storage::fp8                  ? int(sizeof(float))
                    : params.scale_kind == ScaleKind::nvfp4 ? C::kNvfp4ScaleBytes
                                                            : C::kMxfp4ScaleBytes),
        scale_words((scale_bytes + kScaleWordBytes - 1) / kScaleWordBytes) {}

  // The page (or -1: past the keys, zero-filled) of the lane's key row of tile u. Read one
  // iteration before the copies that use it, so the block table's latency hides behind a tile.
  __device__ __forceinline__ int fetch_page(int u) const {
    const int key = (work.first_tile + u) * kN + own_row;
    if (u >= work.n_tiles || key >= work.key_end) return -1;
    if (p.block_table == nullptr) return work.batch;
    const int page_index = p.page_shift >= 0 ? key >> p.page_shift : key / p.page_size;
    return p.block_table[work.batch * p.block_table_stride + page_index];
  }

  // The lane's row's byte offsets in the K/V codes and scales, computed once for every lane that
  // copies a piece of the row.
  __device__ __forceinline__ void publish_page(int u, int page) const {
    const int key = (work.first_tile + u) * kN + own_row;
    const int slot = p.page_shift >= 0 ? key & ((1 << p.page_shift) - 1) : key % p.page_size;
    RowOffsets r{-1, -1, -1, -1};
    if (page >= 0) {
      r.k = page * p.k.page_stride + slot * p.k.slot_stride + work.kv_head * p.k.head_stride;
      r.v = page * p.v.page_stride + slot * p.v.slot_stride + work.kv_head * p.v.head_stride;
      if constexpr (kStorage != Storage::plain) {
        r.k_scale = page * p.k.scale_page_stride + slot * p.k.scale_slot_stride +
                    work.kv_head * p.k.scale_head_stride;
        r.v_scale = page * p.v.scale_page_stride + slot * p.v.scale_slot_stride +
                    work.kv_head * p.v.scale_head_stride;
      }
    }
    buffers.row_table[(u % kS) * kN + own_row] = r;
  }

  // Copies tile u's codes (and scales) into its stage; always commits a group, empty past the end.
  __device__ __forceinline__ void issue(int u) const {
    if (u < work.n_tiles) {
      const int stage = u % kS;
      const RowOffsets* rows = buffers.row_table + stage * kN;
      constexpr int kChunksPerRow = C::kCodeRowBytes / kChunkBytes;
      constexpr int kRowsPerPass = kWarpSize / kChunksPerRow;
      static_assert(kRowsPerPass * kChunksPerRow == kWarpSize && kWarpRows % kRowsPerPass == 0,
                    "a pass copies whole rows with every work.lane");
      const int chunk = work.lane % kChunksPerRow;
#pragma unroll
      for (int pass = 0; pass < kWarpRows / kRowsPerPass; ++pass) {
        const int row = work.warp * kWarpRows + work.lane / kChunksPerRow + pass * kRowsPerPass;
        const longlong2 at = *reinterpret_cast<const longlong2*>(&rows[row]);
        const int dst = kStorage == Storage::plain ? swizzled<kRowBytes>(row, chunk)
                                                   : row * C::kCodeRowBytes + chunk * kChunkBytes;
        const bool valid = at.x >= 0;
        const int64_t in_row = chunk * kChunkBytes;
        ptx::cp_async_16(ptx::smem_address(buffers.k_codes(stage) + dst),
                         p.k.data + (valid ? at.x + in_row : 0), valid ? kChunkBytes : 0);
        ptx::cp_async_16(ptx::smem_address(buffers.v_codes(stage) + dst),
                         p.v.data + (valid ? at.y + in_row : 0), valid ? kChunkBytes : 0);
      }
      if constexpr (kStorage != Storage::plain) {
        // One lane per row: K rows by lanes 0-15, V rows by lanes 16-31.
        if (kStorage == Storage::fp4 || per_token) {
          const int row = work.warp * kWarpRows + work.lane % kWarpRows;
          const bool is_v = work.lane >= kWarpRows;
          const int64_t offset = is_v ? rows[row].v_scale : rows[row].k_scale;
          unsigned char* dst =
              (is_v ? buffers.v_scales(stage) : buffers.k_scales(stage)) + row * C::kScaleRowBytes;
          for (int w = 0; w < scale_words; ++w) {
            const int at = w * kScaleWordBytes;
            const uint32_t word_bytes = uint32_t(min(kScaleWordBytes, scale_bytes - at));
            const bool valid = offset >= 0;
            const unsigned char* src = (is_v ? p.v.scale : p.k.scale) + (valid ? offset : 0);
            ptx::cp_async_4(ptx::smem_address(dst + at), src + (valid ? at : 0),
                            valid ? word_bytes : 0);
          }
        }
      }
    }
    ptx::cp_async_commit();
  }

  // The prologue: the page numbers of the first stages, then their copies, and the next page.
  __device__ __forceinline__ void start() {
    if (owns_row) {
#pragma unroll
      for (int u = 0; u < kS - 1; ++u) publish_page(u, fetch_page(u));
    }
    pending_page = owns_row ? fetch_page(kS - 1) : -1;
    __syncwarp();
#pragma unroll 1
    for (int u = 0; u < kS - 1; ++u) issue(u);
  }

  // Tile t for the warp's consumer: waits for its stage, refills the stage freed by tile t - 1
  // with tile t + kS - 1 (whose page was read a tile ago; tile t + kS's is read now) and widens
  // quantized codes. The warp reads only its own rows, so __syncwarp is the only barrier.
  __device__ __forceinline__ StageTiles acquire(int t) {
    if (owns_row) {
      publish_page(t + kS - 1, pending_page);
      pending_page = fetch_page(t + kS);
    }
    ptx::cp_async_wait<kS - 2>();
    __syncwarp();  // the warp's rows of tile t landed; its reads of tile t-1 are done
    issue(t + kS - 1);
    StageTiles tiles{t % kS, buffers.k_codes(t % kS), buffers.v_codes(t % kS)};
    if constexpr (C::kDequantizes) {
      widen(tiles.stage);
      __syncwarp();
      tiles.k = buffers.k_widened;
      tiles.v = buffers.v_widened;
    }
    return tiles;
  }

  // After the last tile: every copy landed (the stage buffers take the warps' partials next).
  __device__ __forceinline__ void finish() const {
    ptx::cp_async_wait<0>();
    __syncthreads();
  }

 private:
  // The 16-byte code chunks of row `row` of side `side` (0: K, 1: V) of stage `stage` that the
  // lane widens: the warp's rows, K's then V's, spread over its lanes.
  static constexpr int kChunksPerCodeRow = C::kCodeRowBytes / kChunkBytes;
  static constexpr int kWidenJobs = kWarpRows * kChunksPerCodeRow / kWarpSize;
  static_assert(kWidenJobs * kWarpSize == kWarpRows * kChunksPerCodeRow);

  // Widens stage `stage`'s codes into the widened K and V tiles.
  __device__ __forceinline__ void widen(int stage) const {
#pragma unroll
    for (int side = 0; side < 2; ++side) {
      const unsigned char* codes = side == 0 ? buffers.k_codes(stage) : buffers.v_codes(stage);
#pragma unroll
      for (int j = 0; j < kWidenJobs; ++j) {
        const unsigned job = work.lane + j * kWarpSize;
        const int row = work.warp * kWarpRows + job / kChunksPerCodeRow;
        const int chunk = job % kChunksPerCodeRow;
        const uint4 w = *reinterpret_cast<const uint4*>(codes + row * C::kCodeRowBytes +
                                                        chunk * kChunkBytes);
        unsigned char* tile = side == 0 ? buffers.k_widened : buffers.v_widened;
        if constexpr (kStorage == Storage::fp8) widen_fp8(stage, side, row, chunk, w, tile);
        else if constexpr (kStorage == Storage::fp4) widen_fp4(stage, side, row, chunk, w, tile);
      }
    }
  }

  // 16 E4M3 values a chunk. K's per-token scale multiplies the scores instead (one multiply per
  // key, not per value).
  __device__ __forceinline__ void widen_fp8(int stage, int side, int row, int chunk, uint4 w,
                                            unsigned char* tile) const {
    uint4 lo, hi;
    if (side == 1 && per_token)
      e4m3x16_to<Element, true>(w, reinterpret_cast<const float*>(buffers.v_scales(stage))[row],
                                lo, hi);
    else
      e4m3x16_to<Element, false>(w, 1.0f, lo, hi);
    *reinterpret_cast<uint4*>(tile + swizzled<kRowBytes>(row, 2 * chunk)) = lo;
    *reinterpret_cast<uint4*>(tile + swizzled<kRowBytes>(row, 2 * chunk + 1)) = hi;
  }

  // 32 E2M1 values a chunk: 8 (one 16-byte tile chunk) per code word, times its block's scale.
  __device__ __forceinline__ void widen_fp4(int stage, int side, int row, int chunk, uint4 w,
                                            unsigned char* tile) const {
    const unsigned char* row_scales =
        (side == 0 ? buffers.k_scales(stage) : buffers.v_scales(stage)) + row * C::kScaleRowBytes;
    uint32_t first, second;  // multipliers of words 0-1 and 2-3
    if (p.scale_kind == ScaleKind::nvfp4) {  // two blocks of 16 values, one conversion
      nvfp4_block_multipliers<Element>(*reinterpret_cast<const uint16_t*>(row_scales + 2 * chunk),
                                       first, second);
    } else {  // one block of 32
      first = second = mxfp4_block_multiplier<Element>(row_scales[chunk]);
    }
    const int base_chunk = 4 * chunk;
    *reinterpret_cast<uint4*>(tile + swizzled<kRowBytes>(row, base_chunk + 0)) =
        e2m1x8_scaled<Element>(w.x, first);
    *reinterpret_cast<uint4*>(tile + swizzled<kRowBytes>(row, base_chunk + 1)) =
        e2m1x8_scaled<Element>(w.y, first);
    *reinterpret_cast<uint4*>(tile + swizzled<kRowBytes>(row, base_chunk + 2)) =
        e2m1x8_scaled<Element>(w.z, second);
    *reinterpret_cast<uint4*>(tile + swizzled<kRowBytes>(row, base_chunk + 3)) =
        e2m1x8_scaled<Element>(w.w, second);
  }
};

}  // namespace hfa::sm90::decode
