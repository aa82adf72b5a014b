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
  static constexpr uint32_t kBytes = kSlabBytes * (kHeadDim / kSlabColumns);
  static_assert(kSlabBytes % ptx::kSwizzleAtomBytes == 0, "slabs must stay swizzle-atom aligned");
  alignas(ptx::kSwizzleAtomBytes) Element data[kRows * kHeadDim];
};

template <typename Config, typename Element>
struct SharedStorage {
  using QTile = SwizzledTile<Element, Config::kBlockM, Config::kHeadDim>;
  using KVTile = SwizzledTile<Element, Config::kBlockN, Config::kHeadDim>;

  // Q of the current tile. The epilogue reuses it to stage O (each consumer warpgroup its own
  // 64 rows), which is why the next Q waits for q_empty.
  QTile q;
  KVTile k[Config::kStages];
  KVTile v[Config::kStages];

  ptx::Mbarrier q_full;   // TMA bytes of Q landed
  ptx::Mbarrier q_empty;  // every consumer warpgroup has stored its O out of the Q buffer
  ptx::Mbarrier k_full[Config::kStages];
  ptx::Mbarrier k_empty[Config::kStages];
  ptx::Mbarrier v_full[Config::kStages];
  ptx::Mbarrier v_empty[Config::kStages];
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
