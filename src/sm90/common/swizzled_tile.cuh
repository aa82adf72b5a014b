// A tile of rows × columns elements, stored as slabs of rows × 128 B (64 16-bit or 128 8-bit
// columns) in the 128-byte swizzle that TMA writes and wgmma reads, and the kernels' shared
// storage placement.
#pragma once

#include <concepts>
#include <cstdint>

#include "sm90/common/wgmma_shape.hpp"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/wgmma.cuh"

namespace hfa::sm90 {

template <typename Element, int kRows, int kColumns>
struct SwizzledTile {
  static constexpr int kRowCount = kRows;
  static constexpr uint32_t kSlabBytes = kRows * ptx::kSwizzleBytes;
  static constexpr int kSlabColumns = kSlabColumnsOf<Element>;
  static constexpr int kSlabs = kColumns / kSlabColumns;
  static constexpr uint32_t kBytes = kSlabBytes * kSlabs;
  static_assert(kColumns % kSlabColumns == 0, "a tile is whole 128-byte slabs");
  static_assert(kSlabBytes % ptx::kSwizzleAtomBytes == 0, "slabs must stay swizzle-atom aligned");
  alignas(ptx::kSwizzleAtomBytes) Element data[kRows * kColumns];

  // The byte offset of element (row, column) from the tile's start: slab, row, then the
  // 16-byte chunk of the row XORed with the row's place in its 8-row swizzle atom.
  __device__ __forceinline__ static constexpr uint32_t offset(int row, int column) {
    const uint32_t slab = uint32_t(column) / kSlabColumns;
    const uint32_t in_row = (uint32_t(column) % kSlabColumns) * sizeof(Element);
    const uint32_t chunk = (in_row / 16) ^ (uint32_t(row) % 8);
    return slab * kSlabBytes + uint32_t(row) * ptx::kSwizzleBytes + chunk * 16 + in_row % 16;
  }

  // The byte offset of wgmma k-step `step` (kMmaKBytes of each row) from the tile's start, its
  // columns read as K: the steps of one slab, then those of the next.
  __device__ __forceinline__ static constexpr uint32_t kmajor_step_offset(int step) {
    constexpr int kStepsPerSlab = ptx::kSwizzleBytes / kMmaKBytes;
    return step / kStepsPerSlab * kSlabBytes + step % kStepsPerSlab * kMmaKBytes;
  }

};

// Rows [first_row, kRows) of a tile to zeros (whole rows: the swizzle permutes only within a
// row), the 16-byte pieces spread over `threads` threads of which the caller is `thread`. Rows
// past a sequence's used length may hold anything, NaN included, and a GEMM multiplies them by
// zero probabilities (0·NaN = NaN). The callers fence for the async proxy and sync after.
// `threads` keeps the caller's integer type, which decides how ptxas unrolls the loop: each
// kernel family keeps the machine code it was measured with (the forward's stride is signed,
// the backward's unsigned).
template <typename Tile, std::integral Threads>
__device__ __forceinline__ void zero_rows_from(Tile& tile, int first_row, int thread, Threads threads) {
  constexpr int kChunks = ptx::kSwizzleBytes / 16;
  const int rows = Tile::kRowCount - max(first_row, 0);
  uint8_t* base = reinterpret_cast<uint8_t*>(tile.data);
  for (int i = thread; i < rows * Tile::kSlabs * kChunks; i += threads) {
    const int row = Tile::kRowCount - rows + i / (Tile::kSlabs * kChunks);
    const int slab = i / kChunks % Tile::kSlabs, chunk = i % kChunks;
    *reinterpret_cast<uint4*>(base + slab * Tile::kSlabBytes + row * ptx::kSwizzleBytes + chunk * 16) =
        make_uint4(0, 0, 0, 0);
  }
}

// Dynamic shared memory is only guaranteed 16-byte aligned; the swizzle needs 1024.
template <typename Storage>
inline constexpr int kSharedBytes = sizeof(Storage) + ptx::kSwizzleAtomBytes;

// Hopper's shared memory: at most 227 KB a CTA (of 228 KB an SM, 1 KB of each CTA's kept by
// the system).
inline constexpr int kSharedBytesPerCta = 227 * 1024;
template <typename Storage>
inline constexpr bool shared_memory_fits = kSharedBytes<Storage> <= kSharedBytesPerCta;

template <typename Storage>
__device__ __forceinline__ Storage& shared_storage(uint8_t* dynamic_smem) {
  const uint32_t misalignment = ptx::smem_address(dynamic_smem) % ptx::kSwizzleAtomBytes;
  const uint32_t pad = (ptx::kSwizzleAtomBytes - misalignment) % ptx::kSwizzleAtomBytes;
  return *reinterpret_cast<Storage*>(dynamic_smem + pad);
}

}  // namespace hfa::sm90
