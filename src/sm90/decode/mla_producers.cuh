// The MLA decode kernel's producers (mla_kernel.cuh): a piece of work's tiles (work.cuh's
// WorkWalk: the uniform plan's one piece, or each of a persistent CTA's pieces of the balanced
// schedule in turn), one block-table page each, tile t into stage t % 2 (the pairs of
// mla_config.hpp), each slab of a tile completing its own full barrier, each half of a stage
// written once its readers have given it back. A producer is built per piece where the piece
// before left the stages, as the consumers are. The copy producer (Cache::plain) has TMA copy
// the page's rows; the record producer (Cache::fp8_record) dequantizes the page's FP8 records
// into the same swizzled tile. Sizes, and why the records wait in registers, in mla_config.hpp.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "quant/mla_fp8.hpp"
#include "sm90/decode/dequant.cuh"
#include "sm90/decode/mla_config.hpp"
#include "sm90/decode/params.hpp"
#include "sm90/decode/work.cuh"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/tma.cuh"

namespace hfa::sm90::decode::mla {

// A piece's pages: the block table's page numbers of its tiles (work.first_tile … of sequence
// work.batch) 32 at a time, one a lane, so that a table read's latency is paid once per 32 tiles
// rather than before each tile. Warp-collective: every lane asks for the same tile, the tiles in
// increasing order.
class PageWindow {
 public:
  __device__ __forceinline__ PageWindow(const Params& p, const DecodeWork& work, int lane)
      : pages_(p.block_table + int64_t(work.batch) * p.block_table_stride + work.first_tile),
        n_tiles_(work.n_tiles),
        lane_(lane) {}

  // The page of the piece's tile t (t < n_tiles).
  __device__ __forceinline__ int32_t page(int t) {
    if (t - base_ >= kWarpSize) {
      base_ = t - t % kWarpSize;
      lane_page_ = base_ + lane_ < n_tiles_ ? pages_[base_ + lane_] : 0;
    }
    return __shfl_sync(kFullWarp, lane_page_, t - base_);
  }

 private:
  const int32_t* pages_;
  int n_tiles_, lane_;
  int base_ = -kWarpSize;  // no window read yet
  int32_t lane_page_ = 0;
};

// The copy producer: one warp, whose lane 0 issues each tile's 9 TMA copies.
template <typename Configuration>
struct CopyProducer {
  using C = Configuration;
  using Source = CUtensorMap;
  using Storage = typename C::Storage;
  using KTile = typename Storage::KTile;

  const Params& p;
  const DecodeWork& work;
  Storage& s;
  const CUtensorMap& map;
  typename C::Ring ring;  // from where the piece before left it

  __device__ __forceinline__ CopyProducer(const Params& params, const DecodeWork& w,
                                          Storage& storage, const CUtensorMap& k_map,
                                          const typename C::Ring& start)
      : p(params), work(w), s(storage), map(k_map), ring(start) {}

  __device__ __forceinline__ void run() {
    if (int(threadIdx.x) - kConsumerThreads >= kWarpSize) return;  // one warp loads
    const int lane = int(threadIdx.x) % kWarpSize;
    if (lane == 0) ptx::prefetch_tensor_map(&map);
    PageWindow pages(p, work, lane);
    for (int t = 0; t < work.n_tiles; ++t) {
      const int32_t page = pages.page(t);
      const int stage = t % kStages;
      if (lane == 0) {
#pragma unroll
        for (int slab = 0; slab < kSlabsPerTile; ++slab) {
          if (starts_half(slab))
            s.k_empty[stage][int(stage_half(slab))].wait(ring.phase(stage) ^ 1);
          ptx::Mbarrier* full = &s.k_full[stage][slab];
          full->arrive_expect_tx(KTile::kSlabBytes);
          // Each page is read by this CTA once, and by its other row tile (128 heads) at
          // about the same time: evict-first, FlashMLA's hint (its better L2 hit rate).
          ptx::load_4d(reinterpret_cast<unsigned char*>(s.k[stage].data) +
                           slab * KTile::kSlabBytes,
                       &map, full, slab * kSlabColumns, 0, work.kv_head, page,
                       ptx::CacheHint::evict_first);
        }
      }
      __syncwarp();
      ring.advance(stage);
    }
  }
};

// The record producer: every thread of the warpgroup loads its chunks of each tile's records
// (2 rows, 16 codes of each 64-column slab: mla_config.hpp), dequantizes them and stores them
// where the TMA would have put a bf16 cache's values, a pass (one scale's 128 columns, or the
// rotary slab) at a time; then its warp arrives on the full barriers of the slabs the pass wrote.
// The next pass's chunks are loaded before the current one is converted (the next tile's first
// pass before the stage is free), and warp 0 prefetches pages into L2 kPrefetchTiles ahead.
// Rows past the sequence's end are dequantized like the others (NaN from NaN bytes): the
// consumers mask their scores and zero their V rows.
template <typename Configuration>
struct RecordProducer {
  using C = Configuration;
  using Source = CacheView;  // the records: K's cache view (V's is the same bytes)
  using Storage = typename C::Storage;
  using Element = typename C::Element;
  using KTile = typename Storage::KTile;
  static_assert(kIsBf16<Element>, "the records' rotary values are bf16, copied as they are");
  static constexpr int kValuesPerStore = kChunkBytes / int(sizeof(Element));  // 8
  static constexpr int kRowStride = kBlockN / kRowsPerThread;  // 32: the thread's second row

  // A pass's chunks of the thread's rows, [row][slab of the scale] (latent) or [row][chunk]
  // (rotary), and each row's scale of the pass's columns (latent passes).
  struct Pass {
    uint4 chunk[kRowsPerThread][kSlabsPerScale];
    float scale[kRowsPerThread];
  };

  const Params& p;
  const DecodeWork& work;
  Storage& s;
  const CacheView& cache;
  const int warp, lane;
  const int first_row;     // of the thread's rows in every tile
  const int chunk_in_row;  // which 16 codes of each slab row (of 64), which rotary chunks
  typename C::Ring ring;   // from where the piece before left it

  __device__ __forceinline__ RecordProducer(const Params& params, const DecodeWork& w,
                                            Storage& storage, const CacheView& records,
                                            const typename C::Ring& start)
      : p(params),
        work(w),
        s(storage),
        cache(records),
        // Shuffled from lane 0: one value a warp, so the branches on it are uniform.
        warp(__shfl_sync(kFullWarp, (int(threadIdx.x) - kConsumerThreads) / kWarpSize, 0)),
        lane(int(threadIdx.x) % kWarpSize),
        first_row(warp * kRowsPerWarpPass + lane / kLanesPerSlabRow),
        chunk_in_row(lane % kLanesPerSlabRow),
        ring(start) {}

  __device__ __forceinline__ void run() {
    if (work.n_tiles == 0) return;
    PageWindow pages(p, work, lane), ahead(p, work, lane);
    for (int t = 0; t < kPrefetchTiles; ++t) prefetch(ahead, t);
    int32_t next_page = pages.page(0);
    Pass next = load(next_page, 0);
    for (int t = 0; t < work.n_tiles; ++t) {
      prefetch(ahead, t + kPrefetchTiles);
      const int32_t page = next_page;
      const bool more = t + 1 < work.n_tiles;
      if (more) next_page = pages.page(t + 1);
      const int stage = t % kStages;
      unsigned char* tile = reinterpret_cast<unsigned char*>(s.k[stage].data);
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const Pass current = next;
        if (pass + 1 < kPasses) {
          next = load(page, pass + 1);
        } else if (more) {
          next = load(next_page, 0);
        }
        if (starts_half(first_slab(pass)))
          s.k_empty[stage][int(stage_half(first_slab(pass)))].wait(ring.phase(stage) ^ 1);
        store(tile, pass, current);
        publish(stage, pass);
      }
      ring.advance(stage);
    }
  }

 private:
  // The page's record of the CTA's kv-head in slot 0 (the page's bytes, for h_kv = 1).
  __device__ __forceinline__ const unsigned char* records_of(int32_t page) const {
    return cache.data + int64_t(page) * cache.page_stride +
           int64_t(work.kv_head) * cache.head_stride;
  }

  // The first slab a pass writes: a latent pass writes kSlabsPerScale, the rotary pass the last.
  __device__ __forceinline__ static constexpr int first_slab(int pass) {
    return pass < kLatentPasses ? pass * kSlabsPerScale : kRotarySlab;
  }

  // The thread's h-th row of each tile.
  __device__ __forceinline__ int row_of(int h) const { return first_row + h * kRowStride; }

  // The first of the 16 latent columns the thread takes of slab i of a latent pass.
  __device__ __forceinline__ int latent_column(int pass, int i) const {
    return (pass * kSlabsPerScale + i) * kSlabColumns + chunk_in_row * kCodesPerChunk;
  }

  // Which of a row's 8 rotary chunks is the thread's i-th.
  __device__ __forceinline__ int rotary_chunk(int i) const {
    return i * kLanesPerSlabRow + chunk_in_row;
  }

  // Warp 0's lane 0 asks L2 for tile t's page (when the CTA has one).
  __device__ __forceinline__ void prefetch(PageWindow& ahead, int t) const {
    if (warp != 0 || t >= work.n_tiles) return;
    const int32_t page = ahead.page(t);
    if (lane == 0) ptx::prefetch_l2_1d(records_of(page), kPageBytes);
  }

  __device__ __forceinline__ Pass load(int32_t page, int pass) const {
    const unsigned char* records = records_of(page);
    Pass x;
#pragma unroll
    for (int h = 0; h < kRowsPerThread; ++h) {
      const unsigned char* record = records + int64_t(row_of(h)) * cache.slot_stride;
      const auto* scales = reinterpret_cast<const float*>(record + quant::kMlaScaleOffset);
#pragma unroll
      for (int i = 0; i < kSlabsPerScale; ++i) {
        const int offset = pass < kLatentPasses
                               ? latent_column(pass, i)  // a code a byte
                               : quant::kMlaRopeOffset + rotary_chunk(i) * kChunkBytes;
        x.chunk[h][i] = __ldg(reinterpret_cast<const uint4*>(record + offset));
      }
      x.scale[h] = pass < kLatentPasses ? __ldg(scales + pass) : 0.0f;
    }
    return x;
  }

  // The pass's chunks into the tile: latent codes times their row's scale as 16 Elements (two
  // 16-byte stores), rotary chunks as they are (8 bf16 values).
  __device__ __forceinline__ void store(unsigned char* tile, int pass, const Pass& x) const {
#pragma unroll
    for (int h = 0; h < kRowsPerThread; ++h) {
#pragma unroll
      for (int i = 0; i < kSlabsPerScale; ++i) {
        if (pass < kLatentPasses) {
          const int column = latent_column(pass, i);
          uint4 low, high;
          e4m3x16_to<Element, true>(x.chunk[h][i], x.scale[h], low, high);
          *reinterpret_cast<uint4*>(tile + KTile::offset(row_of(h), column)) = low;
          *reinterpret_cast<uint4*>(tile + KTile::offset(row_of(h), column + kValuesPerStore)) =
              high;
        } else {
          const int column = kHeadDimV + rotary_chunk(i) * kValuesPerStore;
          *reinterpret_cast<uint4*>(tile + KTile::offset(row_of(h), column)) = x.chunk[h][i];
        }
      }
    }
  }

  // The slabs a pass wrote, to the consumers: each thread's stores made visible to wgmma's
  // async proxy, the warp's then ordered before lane 0's arrivals (one a warp on each barrier).
  __device__ __forceinline__ void publish(int stage, int pass) const {
    ptx::fence_proxy_async_smem();
    __syncwarp();
    if (lane != 0) return;
    if (pass < kLatentPasses) {
#pragma unroll
      for (int i = 0; i < kSlabsPerScale; ++i) s.k_full[stage][pass * kSlabsPerScale + i].arrive();
    } else {
      s.k_full[stage][kSlabsPerTile - 1].arrive();
    }
  }
};

}  // namespace hfa::sm90::decode::mla
