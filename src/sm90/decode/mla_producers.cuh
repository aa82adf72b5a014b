// The MLA decode kernel's producer (mla_kernel.cuh): the CTA's tiles, one block-table page each,
// in order into the ring of K stages, each slab of a tile completing its own full barrier: TMA
// copies of the page's rows. Sizes in mla_config.hpp.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "sm90/decode/mla_config.hpp"
#include "sm90/decode/params.hpp"
#include "sm90/decode/work.cuh"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/tma.cuh"

namespace hfa::sm90::decode::mla {

// The block table's page numbers 32 tiles at a time, one a lane, so that a table read's latency
// is paid once per 32 tiles rather than before each tile. Warp-collective: every lane asks for
// the same tile, the tiles in increasing order.
class PageWindow {
 public:
  __device__ __forceinline__ PageWindow(const Params& p, const DecodeWork& work, int lane)
      : pages_(p.block_table + int64_t(work.batch) * p.block_table_stride + work.first_tile),
        n_tiles_(work.n_tiles),
        lane_(lane) {}

  // The page of the CTA's tile t (t < n_tiles).
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

inline constexpr uint32_t kPieceBytes = uint32_t(kBlockN) * ptx::kSwizzleBytes;  // 64 rows × 128 B

// The copy producer: one warp, whose lane 0 issues each tile's 9 TMA copies.
template <typename Configuration>
struct CopyProducer {
  using C = Configuration;
  using Source = CUtensorMap;
  using Storage = typename C::Storage;

  const Params& p;
  const DecodeWork& work;
  Storage& s;
  const CUtensorMap& map;

  __device__ __forceinline__ CopyProducer(const Params& params, const DecodeWork& w,
                                          Storage& storage, const CUtensorMap& k_map)
      : p(params), work(w), s(storage), map(k_map) {}

  __device__ __forceinline__ void run() {
    if (int(threadIdx.x) - kConsumerThreads >= kWarpSize) return;  // one warp loads
    const int lane = int(threadIdx.x) % kWarpSize;
    if (lane == 0) ptx::prefetch_tensor_map(&map);
    PageWindow pages(p, work, lane);
    ptx::RingPosition<kStages> ring;
    for (int t = 0; t < work.n_tiles; ++t) {
      const int32_t page = pages.page(t);
      if (lane == 0) {
        s.k_empty[ring.stage].wait(ring.phase ^ 1);
#pragma unroll
        for (int piece = 0; piece < kPieces; ++piece) {
          ptx::Mbarrier* full = &s.k_full[ring.stage][piece];
          full->arrive_expect_tx(kPieceBytes);
          // Each page is read by this CTA once, and by its other row tile (128 heads) at
          // about the same time: evict-first, FlashMLA's hint (its better L2 hit rate).
          ptx::load_4d(reinterpret_cast<unsigned char*>(s.k[ring.stage].data) + piece * kPieceBytes,
                       &map, full, piece * kSlabColumns, 0, work.kv_head, page,
                       ptx::CacheHint::evict_first);
        }
      }
      __syncwarp();
      ring.advance();
    }
  }
};

}  // namespace hfa::sm90::decode::mla
