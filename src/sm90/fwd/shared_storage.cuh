// The forward kernel's shared memory: Q, a ring of K and V stages, and their barriers.
#pragma once

#include <cstdint>

#include "sm90/fwd/tile_config.hpp"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/wgmma.cuh"

namespace hfa::sm90::fwd {

// A tile of rows × kHeadDim 16-bit elements, stored as kHeadDim/64 slabs of rows × 128 B in the
// 128-byte swizzle that TMA writes and wgmma reads.
template <typename Element, int kRows, int kHeadDim>
struct SwizzledTile {
  static constexpr uint32_t kSlabBytes = kRows * ptx::kSwizzleBytes;
  static constexpr int kSlabs = kHeadDim / kSlabColumns;
  static constexpr uint32_t kBytes = kSlabBytes * kSlabs;
  static_assert(kSlabBytes % ptx::kSwizzleAtomBytes == 0, "slabs must stay swizzle-atom aligned");
  alignas(ptx::kSwizzleAtomBytes) Element data[kRows * kHeadDim];
};

template <typename Config, typename Element>
struct SharedStorage {
  using QTile = SwizzledTile<Element, Config::kBlockM, Config::kHeadDimQK>;
  using KTile = SwizzledTile<Element, Config::kBlockN, Config::kHeadDimQK>;
  using VTile = SwizzledTile<Element, Config::kBlockN, Config::kHeadDimV>;

  // Q of the current tile; freed (q_empty) as soon as the tile's last Q·Kᵀ has read it.
  QTile q;
  KTile k[Config::kStages];
  VTile v[Config::kStages];

  ptx::Mbarrier q_full;   // TMA bytes of Q landed
  ptx::Mbarrier q_empty;  // every consumer warp is past the tile's last Q·Kᵀ
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

// Dynamic shared memory is only guaranteed 16-byte aligned; the swizzle needs 1024.
template <typename Storage>
inline constexpr int kSharedBytes = sizeof(Storage) + ptx::kSwizzleAtomBytes;

template <typename Storage>
__device__ __forceinline__ Storage& shared_storage(uint8_t* dynamic_smem) {
  const uint32_t misalignment = ptx::smem_address(dynamic_smem) % ptx::kSwizzleAtomBytes;
  const uint32_t pad = (ptx::kSwizzleAtomBytes - misalignment) % ptx::kSwizzleAtomBytes;
  return *reinterpret_cast<Storage*>(dynamic_smem + pad);
}

}  // namespace hfa::sm90::fwd
