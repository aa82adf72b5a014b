// The in-kernel V transpose of the FP8 forward (VTransposingTileConfig): the producer
// warpgroup's warps beside the TMA thread's take each V block from the staging ring (keys ×
// dims, as stored) and write it into the V stage the consumers' P·V reads: dims × keys, K-major
// (e4m3 wgmma takes no other B), each 16 keys in ptx::fp8_key_order's order, and zeros for the
// keys past the sequence's used end (they may hold anything, NaN included, and 0·NaN is NaN in
// the tensor cores). transpose_v.cuh's pass writes the same bytes into a copy in global memory.
//
// One unit is 16 keys × 32 dims, a warp's: one ldmatrix.x4.trans, four prmt, one stmatrix.x4.
//   ldmatrix.trans reads 8×8 matrices of 16-bit values, 4 of them: keys 0-7 and 8-15 × dims
//   0-15 and 16-31 (A, B, C, D). Lane l gets from each the value pair of its column l / 4 in rows
//   2q, 2q + 1 (q = l % 4): bytes (key 2q, dim 2m), (2q, 2m + 1), (2q + 1, 2m), (2q + 1, 2m + 1)
//   with m = l / 4, dims 16 further on in C and D, keys 8 further on in B and D.
//   prmt of A and B picks one dim's bytes: keys 2q, 2q + 1, 2q + 8, 2q + 9, which are the key
//   positions 4q .. 4q + 3 of fp8_key_order, so the register is the 4 bytes lane l must give
//   stmatrix for row m of a matrix of dims × keys (the same with C and D for dims 16 + ...).
//   stmatrix stores 4 such matrices, the dims each row stands for chosen so that its 8 rows fall
//   in 8 different 16-byte columns of the swizzle: rows 0-3 of matrix 0 are dims 0, 2, 4, 6 and
//   rows 4-7 dims 9, 11, 13, 15 (dim % 8 = 0..7); matrix 1 the other dims of those pairs, 2 and 3
//   the same 16 dims on. The ldmatrix side reads 8 keys' rows (key % 8 = 0..7) of one swizzled
//   16-byte column: no bank conflicts either way.
#pragma once

#include <cstdint>

#include "sm90/fwd/shared_storage.cuh"
#include "sm90/ptx/byte_permute.cuh"
#include "sm90/ptx/matrix_move.cuh"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/tma.cuh"

namespace hfa::sm90::fwd {

template <typename Config>
struct VTransposer {
  using Storage = SharedStorage<Config>;
  using Staged = typename Storage::Staging::Tile;  // keys × dims
  using VTile = typename Storage::VTile;           // dims × keys (in slabs of 128)
  static constexpr int kUnitKeys = 16, kUnitDims = 32;
  static constexpr int kUnitChunks = Config::kHeadDimV / kUnitDims;  // of a 16-key group
  static constexpr int kGroups = Config::kBlockN / kUnitKeys;
  static_assert(Config::kBlockN % kUnitKeys == 0 && Config::kHeadDimV % kUnitDims == 0);
  static_assert(kUnitKeys == kKeyGroup, "a unit's keys are one group of fp8_key_order");
  static constexpr uint32_t kRowBytes = ptx::kSwizzleBytes;  // a row of a 128-byte slab
  static constexpr uint32_t kChunkBytes = 16;                // the swizzle's unit

  Storage& smem;
  int warp;  // among the transposing warps
  int lane;

  // The lane's part of its unit's addresses, from the unit's first key row and 128-byte slab
  // column (see the file comment): ldmatrix's matrix lane / 8 (keys 8 further on if odd, dims
  // 16 if ≥ 2), row lane % 8; stmatrix's likewise, each row a dim of the unit.
  __device__ __forceinline__ uint32_t staged_lane_offset() const {
    const int matrix = lane / 8, row = lane % 8;
    const uint32_t key = 8 * (matrix % 2) + row;
    const uint32_t chunk = uint32_t(matrix / 2) ^ uint32_t(row);  // the swizzle of key % 8
    return key * kRowBytes + chunk * kChunkBytes;
  }
  __device__ __forceinline__ uint32_t transposed_lane_offset() const {
    const int matrix = lane / 8, row = lane % 8;
    const uint32_t dim = 16 * (matrix / 2) + 2 * row + ((matrix % 2) ^ (row / 4));
    return dim * kRowBytes + (dim % 8) * kChunkBytes;
  }

  // The bytes (0xff) of the lane's four key positions in a group that are among its first
  // `keys` (fp8_key_order: keys 2q, 2q + 1, 2q + 8, 2q + 9 with q = lane % 4).
  __device__ __forceinline__ uint32_t used_key_bytes(int keys) const {
    const uint32_t order = 0x09080100u + uint32_t(2 * (lane % 4)) * 0x01010101u;
    return __vcmpltu4(order, uint32_t(keys) * 0x01010101u);
  }

  // How a group of 16 keys is written: all of them used, some (the others zeroed), or none
  // (zeros, nothing read). Decided for the whole warp: ldmatrix and stmatrix are warp-wide.
  enum class GroupKeys { all, some, none };

  // One group of 16 keys, every 32 dims of it: the lane's addresses of the group's first unit
  // in the staged tile (`source`) and in the V stage (`target`); with some keys used, `bytes`
  // keeps the lane's used ones.
  template <GroupKeys kKeys>
  __device__ __forceinline__ void transpose_group(uint32_t source, uint32_t target,
                                                  uint32_t first, uint32_t bytes) const {
#pragma unroll
    for (int chunk = 0; chunk < kUnitChunks; ++chunk) {
      // The chunk's 16-byte swizzle column is XORed in (the lane's row offsets are multiples of
      // 128 bytes, tiles 1024-byte aligned), its 128-byte slab added.
      const uint32_t from = (source ^ (chunk * kUnitDims % ptx::kSwizzleBytes)) +
                            chunk * kUnitDims / ptx::kSwizzleBytes * Staged::kSlabBytes;
      uint32_t r[4] = {0u, 0u, 0u, 0u};
      if constexpr (kKeys != GroupKeys::none) {
        uint32_t m[4];
        ptx::ldmatrix_x4_trans(from, m);
        r[0] = ptx::byte_permute(m[0], m[1], first);
        r[1] = ptx::byte_permute(m[0], m[1], first ^ 0x1111u);
        r[2] = ptx::byte_permute(m[2], m[3], first);
        r[3] = ptx::byte_permute(m[2], m[3], first ^ 0x1111u);
        if constexpr (kKeys == GroupKeys::some) {
#pragma unroll
          for (int i = 0; i < 4; ++i) r[i] &= bytes;
        }
      }
      ptx::stmatrix_x4(target + chunk * kUnitDims * kRowBytes, r);
    }
  }

  // Transposes staged block `from` into V stage `to`; `used` keys of it are before its
  // sequence's used end. A warp takes every kTransposingWarps-th group of 16 keys.
  __device__ __forceinline__ void transpose(const Staged& from, VTile& to, int used) const {
    const uint32_t staged = ptx::smem_address(from.data) + staged_lane_offset();
    const uint32_t transposed = ptx::smem_address(to.data) + transposed_lane_offset();
    // The dims of the pair that a lane's prmt picks (file comment): rows 0-3 of a stmatrix
    // matrix (lanes 0-15 hold them) take the even dim first, rows 4-7 the odd one.
    const uint32_t first = lane < 16 ? 0x6420u : 0x7531u;
#pragma unroll 1
    for (int group = warp; group < kGroups; group += Config::kTransposingWarps) {
      const uint32_t source = staged + group * kUnitKeys * kRowBytes;
      const uint32_t target =
          (transposed + group * kUnitKeys / ptx::kSwizzleBytes * VTile::kSlabBytes) ^
          (group * kUnitKeys % ptx::kSwizzleBytes);
      const int keys = used - group * kUnitKeys;  // the same in every lane
      if (keys >= kUnitKeys) {
        transpose_group<GroupKeys::all>(source, target, first, 0u);
      } else if (keys > 0) {
        transpose_group<GroupKeys::some>(source, target, first, used_key_bytes(keys));
      } else {
        transpose_group<GroupKeys::none>(source, target, first, 0u);
      }
    }
  }

  // Every staged block until the producer's kNoMoreVBlocks, in the order the producer staged
  // them, which is the order the consumers take the V stages in.
  __device__ void run() {
    auto& staging = smem.staging;
    ptx::RingPosition<Storage::Staging::kStages> staged;
    ptx::RingPosition<Config::kStages> v_ring;
    for (;;) {
      staging.full[staged.stage].wait(staged.phase);
      const int used = staging.used_keys[staged.stage];
      if (used == kNoMoreVBlocks) return;
      smem.v_empty[v_ring.stage].wait(v_ring.phase ^ 1);
      transpose(staging.tiles[staged.stage], smem.v[v_ring.stage], used);
      // Written by the generic proxy, read by wgmma's async one; every lane fences its own
      // stores, then one lane a warp arrives for the warp.
      ptx::fence_proxy_async_smem();
      __syncwarp();
      if (lane == 0) {
        smem.v_full[v_ring.stage].arrive();
        staging.empty[staged.stage].arrive();
      }
      staged.advance();
      v_ring.advance();
    }
  }
};

}  // namespace hfa::sm90::fwd
