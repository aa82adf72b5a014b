// The stream kernel's producer (stream_kernel.cuh): its stage buffers, where each stage's cache
// rows are and their copies. Each 16-key tile of a warp's stage lies in one page (the dispatch
// sends only page sizes that are multiples of 16 here), so a tile costs one block-table read (one
// stage ahead of its copies, which hides its latency behind a stage of compute) and each copy
// one 64-bit add: row r of the tile is r slot strides from its first. Each of the 4 warps copies
// and consumes its own tiles of a stage, so warps meet only at the final merge. There is no
// widening pass: the consumer widens codes straight into mma fragments (stream_fragments.cuh).
#pragma once

#include <cstdint>

#include "sm90/decode/config.hpp"
#include "sm90/decode/params.hpp"
#include "sm90/decode/stage_buffers.cuh"
#include "sm90/decode/stream_fragments.cuh"
#include "sm90/decode/work.cuh"
#include "sm90/ptx/cp_async.cuh"
#include "sm90/ptx/mbarrier.cuh"

namespace hfa::sm90::decode {

// The stream kernel's shared memory: its stages (stage_buffers.cuh), nothing else, each row's
// chunks in the swizzled order its consumer's reads want (stream_fragments.cuh).
template <Storage kStorage>
struct StreamBuffers : StageBuffers<StreamConfig<kStorage>> {
  using C = StreamConfig<kStorage>;
  static constexpr bool kPlain = kStorage == Storage::plain;
  static constexpr bool kFp8 = kStorage == Storage::fp8;

  __device__ __forceinline__ explicit StreamBuffers(unsigned char* smem) : StageBuffers<C>(smem) {}

  // Where chunk `chunk` of stage row `row` of K / V lives (stream_fragments.cuh's swizzles).
  __device__ __forceinline__ static int k_chunk_offset(int row, int chunk) {
    if constexpr (kPlain) return row * C::kCodeRowBytes + stream::plain_chunk(row, chunk) * kChunkBytes;
    else if constexpr (kFp8) return row * C::kCodeRowBytes + stream::fp8_k_chunk(row, chunk) * kChunkBytes;
    else return row * C::kCodeRowBytes + chunk * kChunkBytes;
  }
  __device__ __forceinline__ static int v_chunk_offset(int row, int chunk) {
    if constexpr (kPlain) return row * C::kCodeRowBytes + stream::plain_chunk(row, chunk) * kChunkBytes;
    else if constexpr (kFp8) return row * C::kCodeRowBytes + stream::fp8_v_chunk(row, chunk) * kChunkBytes;
    else return stream::fp4_v_row(row) * C::kCodeRowBytes + stream::fp4_v_chunk(row, chunk) * kChunkBytes;
  }
};

// What the consumer reads of a stage: its index (for the scales) and its K and V codes.
struct StreamStage {
  int stage;
  const unsigned char* k;
  const unsigned char* v;
};

template <typename Element, Storage kStorage>
struct StreamProducer {
  using C = StreamConfig<kStorage>;
  static constexpr int kN = C::kBlockN;
  static constexpr int kS = C::kStages;
  static constexpr int kWarpRows = C::kWarpKeys;
  static constexpr int kTileKeys = stream::kKeysPerWarp;
  static constexpr int kChunksPerRow = C::kCodeRowBytes / kChunkBytes;
  static constexpr int kRowsPerPass = kWarpSize / kChunksPerRow;
  static constexpr int kPassesPerTile = kTileKeys / kRowsPerPass;
  // The warp's K and V scale rows, a lane each.
  static constexpr int kScaleRowPasses = 2 * kWarpRows / kWarpSize;
  static_assert(kScaleRowPasses * kWarpSize == 2 * kWarpRows, "every lane a row each pass");

  // A 16-key tile's page and first slot.
  struct TilePage {
    int page;  // -1: no keys (zero-filled)
    int slot;  // of the tile's first key
  };
  using StagePages = TilePage[C::kKeyTiles];

  const Params& p;
  const DecodeWork& work;  // the CTA's (work.cuh)
  const StreamBuffers<kStorage> buffers;
  const int copy_row, copy_chunk;  // the lane's row of a copy pass and its chunk
  const bool row_scales;  // FP4's block scales or FP8's per-token scales travel with the rows
  const bool two_scale_words;  // NVFP4's 8 scale bytes a row; MXFP4's 4 and FP8's fp32 are one
  StagePages pending;  // the pages of the next stage to copy

  __device__ __forceinline__ StreamProducer(const Params& params, const DecodeWork& cta,
                                            unsigned char* smem)
      : p(params),
        work(cta),
        buffers(smem),
        copy_row(work.lane / kChunksPerRow),
        copy_chunk(work.lane % kChunksPerRow),
        row_scales(kStorage == Storage::fp4 ||
                   (kStorage == Storage::fp8 && params.scale_kind == ScaleKind::fp8_per_token)),
        two_scale_words(params.scale_kind == ScaleKind::nvfp4) {}

  // The pages of the warp's tiles of stage u.
  __device__ __forceinline__ void fetch_pages(int u, StagePages& pages) const {
#pragma unroll
    for (int kt = 0; kt < C::kKeyTiles; ++kt) {
      const int key = (work.first_tile + u) * kN + work.warp * kWarpRows + kt * kTileKeys;
      if (u >= work.n_tiles || key >= work.key_end) pages[kt] = {-1, 0};
      else if (p.page_shift >= 0)
        pages[kt] = {p.block_table ? p.block_table[work.batch * p.block_table_stride + (key >> p.page_shift)] : work.batch,
                     key & ((1 << p.page_shift) - 1)};
      else
        pages[kt] = {p.block_table ? p.block_table[work.batch * p.block_table_stride + key / p.page_size] : work.batch,
                     key % p.page_size};
    }
  }

  // Copies stage u's codes (and scales) of the warp's tiles; always commits a group, empty past
  // the end.
  __device__ __forceinline__ void issue(int u, const StagePages& pages) const {
    if (u < work.n_tiles) {
      const int stage = u % kS;
      const int key0 = (work.first_tile + u) * kN + work.warp * kWarpRows;
#pragma unroll
      for (int kt = 0; kt < C::kKeyTiles; ++kt) {
        const TilePage at = pages[kt];
        const unsigned char* k_row = p.k.data + at.page * p.k.page_stride + work.kv_head * p.k.head_stride +
                                     (at.slot + copy_row) * p.k.slot_stride + copy_chunk * kChunkBytes;
        const unsigned char* v_row = p.v.data + at.page * p.v.page_stride + work.kv_head * p.v.head_stride +
                                     (at.slot + copy_row) * p.v.slot_stride + copy_chunk * kChunkBytes;
#pragma unroll
        for (int pass = 0; pass < kPassesPerTile; ++pass) {
          const int r = kt * kTileKeys + copy_row + pass * kRowsPerPass;
          const int row = work.warp * kWarpRows + r;
          const bool valid = at.page >= 0 && key0 + r < work.key_end;
          const int bytes = valid ? kChunkBytes : 0;
          ptx::cp_async_16(ptx::smem_address(buffers.k_codes(stage) + buffers.k_chunk_offset(row, copy_chunk)),
                           valid ? k_row : p.k.data, bytes);
          ptx::cp_async_16(ptx::smem_address(buffers.v_codes(stage) + buffers.v_chunk_offset(row, copy_chunk)),
                           valid ? v_row : p.v.data, bytes);
          k_row += kRowsPerPass * p.k.slot_stride;
          v_row += kRowsPerPass * p.v.slot_stride;
        }
      }
      if (row_scales) {  // one lane per scale row: K's, then V's
#pragma unroll
        for (int pass = 0; pass < kScaleRowPasses; ++pass) {
          const int job = work.lane + pass * kWarpSize;
          const bool is_v = job >= kWarpRows;
          const int r = job % kWarpRows;
          TilePage at = pages[0];  // pages[r / kTileKeys], without indexing registers at run time
#pragma unroll
          for (int kt = 1; kt < C::kKeyTiles; ++kt)
            if (r >= kt * kTileKeys) at = pages[kt];
          const CacheView& side = is_v ? p.v : p.k;
          const bool valid = at.page >= 0 && key0 + r < work.key_end;
          const unsigned char* src =
              valid ? side.scale + at.page * side.scale_page_stride + work.kv_head * side.scale_head_stride +
                          (at.slot + r % kTileKeys) * side.scale_slot_stride
                    : side.scale;
          unsigned char* dst = (is_v ? buffers.v_scales(stage) : buffers.k_scales(stage)) +
                               (work.warp * kWarpRows + r) * C::kScaleRowBytes;
          ptx::cp_async_4(ptx::smem_address(dst), src, valid ? 4 : 0);
          if (two_scale_words)
            ptx::cp_async_4(ptx::smem_address(dst + kScaleWordBytes), src + (valid ? kScaleWordBytes : 0),
                            valid ? 4 : 0);
        }
      }
    }
    ptx::cp_async_commit();
  }

  // The prologue: the first stages' copies, and the next stage's pages.
  __device__ __forceinline__ void start() {
    for (int u = 0; u < kS - 1; ++u) {
      StagePages pages;
      fetch_pages(u, pages);
      issue(u, pages);
    }
    fetch_pages(kS - 1, pending);
  }

  // Stage t for the warp's consumer: reads stage t + kS's pages, waits for stage t, and refills
  // the stage freed by t - 1 with t + kS - 1 (its pages read a stage ago).
  __device__ __forceinline__ StreamStage acquire(int t) {
    StagePages next;
#pragma unroll
    for (int kt = 0; kt < C::kKeyTiles; ++kt) next[kt] = pending[kt];
    fetch_pages(t + kS, pending);
    ptx::cp_async_wait<kS - 2>();
    __syncwarp();  // the warp's rows of stage t landed; its reads of stage t-1 are done
    issue(t + kS - 1, next);
    const int stage = t % kS;
    return {stage, buffers.k_codes(stage), buffers.v_codes(stage)};
  }

  // After the last stage: every copy landed (the stage buffers take the warps' partials next).
  __device__ __forceinline__ void finish() const {
    ptx::cp_async_wait<0>();
    __syncthreads();
  }
};

}  // namespace hfa::sm90::decode
