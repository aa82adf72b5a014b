// The forward kernel's shared memory: Q, a ring of K and V stages, and their barriers.
#pragma once

#include <climits>
#include <cstdint>
#include <type_traits>

#include "sm90/common/swizzled_tile.cuh"
#include "sm90/fwd/tile_config.hpp"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/tma.cuh"

namespace hfa::sm90::fwd {

// The N of the row sums' GEMM: wgmma's narrowest.
inline constexpr int kRowSumColumns = 8;

// Every byte of the ones tile is e4m3's 1.0, so the swizzle does not matter. All threads of the
// CTA write it before the barrier that follows barrier init; fenced for wgmma's async proxy.
template <typename Storage>
__device__ __forceinline__ void fill_ones(Storage& smem) {
  if constexpr (!std::is_empty_v<typename Storage::OnesTile>) {
    constexpr uint32_t kOnes = 0x38383838u;  // four e4m3 1.0
    constexpr int kWords = int(Storage::OnesTile::kBytes / sizeof(uint32_t));
    uint32_t* words = reinterpret_cast<uint32_t*>(smem.ones.data);
    for (int i = threadIdx.x; i < kWords; i += blockDim.x) words[i] = kOnes;
    ptx::fence_proxy_async_smem();
  }
}

// kQStages: Q single- or double-buffered; kOutColumns: O leaves through a buffer of its own and
// TMA stores, this many columns at a time (all of them, or one 128-byte slab; 0: no buffer, O is
// stored from registers; epilogue.cuh). SharedStorage below picks both.
template <typename Config, int kQStages_, int kOutColumns_>
struct SharedStorageWith {
  static constexpr int kQStages = kQStages_;
  static constexpr int kOutColumns = kOutColumns_;
  static constexpr bool kStagesOut = kOutColumns > 0;
  static constexpr int kStagingStages = 0;  // of V as stored (SharedStorageStagingV)
  using Element = typename Config::Element;
  using QTile = SwizzledTile<Element, Config::kBlockM, Config::kHeadDimQK>;
  using KTile = SwizzledTile<Element, Config::kBlockN, Config::kHeadDimQK>;
  // V as stored (keys × dims, the MN-major B of P·V) or, for e4m3 whose wgmma takes K-major
  // operands only, transposed (dims × keys, from the transposed copy launch.cuh makes).
  using VTile =
      std::conditional_t<Config::kFp8,
                         SwizzledTile<Element, Config::kHeadDimV, Config::kBlockNSlabbed>,
                         SwizzledTile<Element, Config::kBlockN, Config::kHeadDimV>>;

  // The B operand of the row sums' P·1 (tile_config.hpp, kRowSumsByMma): 8 rows of kBlockN
  // e4m3 ones (in whole slabs), K-major, written once at kernel start (fill_ones).
  struct NoTile {};
  using OnesTile =
      std::conditional_t<Config::kRowSumsByMma,
                         SwizzledTile<Element, kRowSumColumns, Config::kBlockNSlabbed>, NoTile>;
  // The tile's normalized O in out's type (kOutColumns of it at a time), each consumer
  // warpgroup's 64 rows stored by TMA stores of its own.
  using OutTile = std::conditional_t<
      kStagesOut, SwizzledTile<typename Config::Out, Config::kBlockM, kOutColumns>, NoTile>;

  // Q of the current tile (and of the next, double-buffered); a buffer is freed (q_empty) as
  // soon as its tile's last Q·Kᵀ has read it.
  QTile q[kQStages];
  KTile k[Config::kStages];
  VTile v[Config::kStages];
  [[no_unique_address]] OnesTile ones;
  [[no_unique_address]] OutTile out;

  ptx::Mbarrier q_full[kQStages];   // TMA bytes of Q landed
  ptx::Mbarrier q_empty[kQStages];  // every consumer warp is past the tile's last Q·Kᵀ
  ptx::Mbarrier k_full[Config::kStages];
  ptx::Mbarrier k_empty[Config::kStages];
  ptx::Mbarrier v_full[Config::kStages];
  ptx::Mbarrier v_empty[Config::kStages];

  // The producer picks each next tile and hands its index to the consumers (tile_slot);
  // two slots so it can run one tile ahead.
  static constexpr int kTileSlots = 2;
  int32_t tile_slot[kTileSlots];
  ptx::Mbarrier tile_full[kTileSlots];
  ptx::Mbarrier tile_empty[kTileSlots];
};

// In-kernel V transpose (VTransposingTileConfig): V as TMA loads it (keys × dims, like K) in a
// ring of kStages stages for the transposing warps (v_transposer.cuh), with the keys of each
// block that its sequence uses, as the producer noted them before the load. The layout
// without it is a base class, unchanged.
inline constexpr int32_t kNoMoreVBlocks = INT32_MIN;  // used_keys: the producer is done

template <typename Config, int kStages_>
struct VStagingRing {
  static constexpr int kStages = kStages_;
  using Tile = SwizzledTile<typename Config::Element, Config::kBlockN, Config::kHeadDimV>;
  Tile tiles[kStages];
  ptx::Mbarrier full[kStages];   // TMA bytes landed (used_keys written before)
  ptx::Mbarrier empty[kStages];  // every transposing warp has read the stage
  int32_t used_keys[kStages];    // keys of the block before its sequence's used end, or kNoMoreVBlocks
};

template <typename Config, int kQStages, int kOutColumns, int kStagingStages_>
struct SharedStorageStagingV : SharedStorageWith<Config, kQStages, kOutColumns> {
  static_assert(Config::kTransposesVInKernel);
  static constexpr int kStagingStages = kStagingStages_;
  using Staging = VStagingRing<Config, kStagingStages>;
  Staging staging;
};

// The first of the layouts that fits a CTA's shared memory.
template <typename Layout, typename... Fallbacks>
struct FirstFitting {
  using type = Layout;
};
template <typename Layout, typename Next, typename... Rest>
struct FirstFitting<Layout, Next, Rest...> {
  using type = std::conditional_t<shared_memory_fits<Layout>, Layout,
                                  typename FirstFitting<Next, Rest...>::type>;
};

// Q double-buffered wherever the second buffer fits beside the K/V stages (hdim 64, hdim 128
// windowed, FP8): the producer then loads a tile's Q while the tile before it still runs, not
// only once that tile's last Q·Kᵀ is done, so no tile starts by waiting for its Q. Measured
// (docs/decisions/011): +2-5 % on hdim 128 causal at 4k and 16k tokens and on FP8 hdim
// 128 causal, within noise elsewhere, the short batched shapes included. Where it does not fit
// (hdim 128 non-causal with 176-key blocks, 192, 256) Q stays single.
// O gets a buffer of its own, all of O where it fits (hdim 64, hdim 128 windowed, FP8 hdim 128),
// else one slab of it (hdim 128 non-causal, 192/128, 256, FP8 hdim 256), else none (hdim 192; a
// partial f32 out is merged from registers): see epilogue.cuh.
template <typename Config>
inline constexpr int kWholeOut = Config::kPartialOut ? 0 : Config::kHeadDimV;
template <typename Config>
inline constexpr int kOutSlab = Config::kPartialOut ? 0 : kSlabColumnsOf<typename Config::Out>;

template <typename Config>
using PassVSharedStorage =
    typename FirstFitting<SharedStorageWith<Config, 2, kWholeOut<Config>>,
                          SharedStorageWith<Config, 2, kOutSlab<Config>>,
                          SharedStorageWith<Config, 1, kWholeOut<Config>>,
                          SharedStorageWith<Config, 1, kOutSlab<Config>>,
                          SharedStorageWith<Config, 1, 0>>::type;
// In-kernel V transpose: a second staging stage where it fits beside two Q buffers (FP8 hdim
// 128 on 128-key tiles), else one, with two Q buffers and all of O (224-key tiles, 214 KB), else
// one Q buffer (hdim 256, O a slab at a time). Q's second buffer comes first, as for the pass's
// kernel (docs/decisions/011): with one staging stage the next V block's load waits for the
// transpose of the one before, which itself runs a V stage ahead of the consumers. This is the
// order of the build docs/decisions/037 measured; two staging stages with one Q buffer at 224
// keys were not measured.
template <typename Config>
using StagingVSharedStorage =
    typename FirstFitting<SharedStorageStagingV<Config, 2, kWholeOut<Config>, 2>,
                          SharedStorageStagingV<Config, 2, kOutSlab<Config>, 2>,
                          SharedStorageStagingV<Config, 2, kWholeOut<Config>, 1>,
                          SharedStorageStagingV<Config, 2, kOutSlab<Config>, 1>,
                          SharedStorageStagingV<Config, 1, kWholeOut<Config>, 1>,
                          SharedStorageStagingV<Config, 1, kOutSlab<Config>, 1>>::type;

template <typename Config, bool kTransposesVInKernel = Config::kTransposesVInKernel>
struct SharedStorageOf {
  using type = PassVSharedStorage<Config>;
};
template <typename Config>
struct SharedStorageOf<Config, true> {
  using type = StagingVSharedStorage<Config>;
};
template <typename Config>
using SharedStorage = typename SharedStorageOf<Config>::type;

}  // namespace hfa::sm90::fwd
