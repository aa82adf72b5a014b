// TMA loads and stores through maps from make_tile_map: box coordinates, the 128-byte swizzle
// they produce in shared memory, zero fill past the tensor's end, clipped stores; and the bulk
// L2 prefetch.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/tma_descriptor.hpp"
#include "ptx_test_util.cuh"

namespace hfa::sm90 {
namespace {

using ptx_test::DeviceArray;
using ptx_test::Mismatches;
using ptx_test::Watchdog;

// A (batch, row, head, dim) tensor: heads interleaved inside a row, so the row stride is
// kHeads·kDim elements, not the tile width. kRows is not a multiple of the box.
constexpr int kDim = 128;
constexpr int kRows = 200;
constexpr int kHeads = 3;
constexpr int kBatch = 2;
constexpr size_t kElements = size_t(kBatch) * kRows * kHeads * kDim;

constexpr int kBoxRows = 64;
constexpr int kSlabs = kDim / 64;                          // a box is one 64-column slab
constexpr uint32_t kSlabBytes = kBoxRows * 128;            // 8 KB
constexpr uint32_t kTileBytes = kSlabs * kSlabBytes;       // all slabs of one box position
constexpr int kTiles = 4;                                  // box positions per test
constexpr size_t kSharedBytes = kTileBytes + ptx_test::kSwizzleAlignment;

size_t element_index(int column, int row, int head, int batch) {
  return ((size_t(batch) * kRows + row) * kHeads + head) * kDim + column;
}

TileMapShape tensor_view(const void* base) {
  constexpr uint64_t kElementBytes = 2;
  return {base,
          {kDim, kRows, kHeads, kBatch},
          {kHeads * kDim * kElementBytes, kDim * kElementBytes, kRows * kHeads * kDim * kElementBytes},
          kBoxRows};
}

struct TilePosition {
  int row, head, batch;
};

struct TmaParams {
  CUtensorMap map;
  TilePosition tiles[kTiles];
};

// ---- Load ---------------------------------------------------------------------------------------

// One CTA loads each tile (both slabs) into the same buffer on one barrier, so the waits use
// parities 0, 1, 0, 1; after each, the raw shared bytes go to out[tile].
__global__ void __launch_bounds__(128) tma_load_kernel(const __grid_constant__ TmaParams p,
                                                       uint8_t* out, uint32_t* watchdog) {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  uint8_t* tile = ptx_test::align_for_swizzle(dynamic_smem);
  __shared__ ptx::Mbarrier full;
  if (threadIdx.x == 0) {
    ptx::prefetch_tensor_map(&p.map);
    full.init(1);
    ptx::fence_barrier_init();
  }
  __syncthreads();

  uint32_t phase = 0;
  for (int t = 0; t < kTiles; ++t) {
    const TilePosition at = p.tiles[t];
    if (threadIdx.x == 0) {
      // Every cache hint encoding is used once at least.
      const ptx::CacheHint hint = t % 3 == 0   ? ptx::CacheHint::evict_normal
                                  : t % 3 == 1 ? ptx::CacheHint::evict_first
                                               : ptx::CacheHint::evict_last;
      // The full box counts, rows past the tensor's end included (TMA writes them as zeros).
      full.arrive_expect_tx(kTileBytes);
      for (int slab = 0; slab < kSlabs; ++slab) {
        ptx::load_4d(tile + slab * kSlabBytes, &p.map, &full, slab * 64, at.row, at.head, at.batch,
                     hint);
      }
    }
    ptx_test::wait_or_trap(full, phase, watchdog, __LINE__);
    phase ^= 1;
    const uint4* src = reinterpret_cast<const uint4*>(tile);
    uint4* dst = reinterpret_cast<uint4*>(out + size_t(t) * kTileBytes);
    for (int i = threadIdx.x; i < int(kTileBytes / 16); i += blockDim.x) dst[i] = src[i];
    __syncthreads();  // all reads done before the next tile's TMA overwrites the buffer
  }
}

TEST(Sm90Tma, LoadSwizzlesAndZeroFillsPastTheEnd) {
  HFA_REQUIRE_HOPPER();
  const ptx_test::RandomElements source = ptx_test::random_elements<__nv_bfloat16>(kElements, 11);
  DeviceArray<uint16_t> tensor;
  HFA_CUDA_OK(tensor.assign(source.bits));
  DeviceArray<uint8_t> out;
  HFA_CUDA_OK(out.allocate(size_t(kTiles) * kTileBytes));
  HFA_CUDA_OK(out.poison());
  Watchdog watchdog;
  HFA_CUDA_OK(watchdog.create());

  TmaParams params{};
  const Status status =
      make_tile_map(&params.map, tensor_view(tensor.get()), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  ASSERT_TRUE(status.is_ok()) << status.message();
  // Aligned, in other heads and batches, unaligned and running past kRows, aligned and
  // running past kRows (rows 200..255 must read as zeros).
  const TilePosition tiles[kTiles] = {{0, 0, 0}, {64, 2, 1}, {150, 1, 0}, {192, 2, 1}};
  std::memcpy(params.tiles, tiles, sizeof(tiles));

  HFA_CUDA_OK(ptx_test::allow_shared_bytes(tma_load_kernel, kSharedBytes));
  tma_load_kernel<<<1, 128, kSharedBytes>>>(params, out.get(), watchdog.device_word());
  HFA_WATCHED_KERNEL_OK(watchdog);
  std::vector<uint8_t> raw;
  HFA_CUDA_OK(out.download(raw));

  // Unswizzle on the host and compare bit for bit.
  Mismatches mismatches;
  for (int t = 0; t < kTiles; ++t) {
    for (int r = 0; r < kBoxRows; ++r) {
      const int row = tiles[t].row + r;
      for (int column = 0; column < kDim; ++column) {
        uint16_t got;
        std::memcpy(&got, raw.data() + size_t(t) * kTileBytes +
                              ptx_test::swizzled_offset(r, column, kBoxRows), 2);
        const uint16_t want =
            row < kRows ? source.bits[element_index(column, row, tiles[t].head, tiles[t].batch)] : 0;
        if (got != want) {
          mismatches.add("tile " + std::to_string(t) + " row " + std::to_string(r) + " column " +
                             std::to_string(column) + " (bits)",
                         got, want);
        }
      }
    }
  }
  EXPECT_EQ(mismatches.count(), 0u) << mismatches.report();
}

// ---- Store --------------------------------------------------------------------------------------

// Room after the tensor, poisoned, where a store clipped at the last batch's end would land if
// the clipping failed.
constexpr size_t kSlackElements = size_t(kBoxRows) * kHeads * kDim;

// For each tile: threads write values[t] (row-major kBoxRows × kDim) into the buffer in the
// swizzled layout, then one thread stores both slabs and waits until the buffer was read.
__global__ void __launch_bounds__(128) tma_store_kernel(const __grid_constant__ TmaParams p,
                                                        const uint16_t* values) {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  uint8_t* tile = ptx_test::align_for_swizzle(dynamic_smem);
  for (int t = 0; t < kTiles; ++t) {
    ptx_test::fill_swizzled(tile, values + size_t(t) * kBoxRows * kDim, kBoxRows, kDim);
    ptx::fence_proxy_async_smem();  // each writer: its stores before the TMA's (async) reads
    __syncthreads();
    if (threadIdx.x == 0) {
      const TilePosition at = p.tiles[t];
      for (int slab = 0; slab < kSlabs; ++slab) {
        ptx::store_4d(&p.map, tile + slab * kSlabBytes, slab * 64, at.row, at.head, at.batch);
      }
      ptx::store_commit_group();
      ptx::store_wait_read();  // the next tile may overwrite the buffer
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) ptx::store_wait_all();
}

TEST(Sm90Tma, StoreUnswizzlesAndClipsAtTheEnd) {
  HFA_REQUIRE_HOPPER();
  const ptx_test::RandomElements values =
      ptx_test::random_elements<__nv_bfloat16>(size_t(kTiles) * kBoxRows * kDim, 12);
  DeviceArray<uint16_t> source;
  HFA_CUDA_OK(source.assign(values.bits));
  DeviceArray<uint16_t> tensor;
  HFA_CUDA_OK(tensor.allocate(kElements + kSlackElements));
  HFA_CUDA_OK(tensor.poison());

  TmaParams params{};
  const Status status =
      make_tile_map(&params.map, tensor_view(tensor.get()), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  ASSERT_TRUE(status.is_ok()) << status.message();
  // Disjoint boxes. {176, 2, 0} is clipped at row 200: unclipped, rows 200..239 would land on
  // rows 0..39 of head 2 of batch 1, which no box stores. {150, 0, 1} is clipped too: rows
  // 200..213 would land in the slack after the tensor.
  const TilePosition tiles[kTiles] = {{0, 0, 0}, {64, 1, 1}, {176, 2, 0}, {150, 0, 1}};
  std::memcpy(params.tiles, tiles, sizeof(tiles));

  HFA_CUDA_OK(ptx_test::allow_shared_bytes(tma_store_kernel, kSharedBytes));
  tma_store_kernel<<<1, 128, kSharedBytes>>>(params, source.get());
  HFA_KERNEL_OK();
  std::vector<uint16_t> got;
  HFA_CUDA_OK(tensor.download(got));

  // Everything stays poisoned (0xFFFF) but the stored rows inside the tensor.
  std::vector<uint16_t> want(kElements + kSlackElements, 0xFFFF);
  for (int t = 0; t < kTiles; ++t) {
    for (int r = 0; r < kBoxRows && tiles[t].row + r < kRows; ++r) {
      for (int column = 0; column < kDim; ++column) {
        want[element_index(column, tiles[t].row + r, tiles[t].head, tiles[t].batch)] =
            values.bits[(size_t(t) * kBoxRows + r) * kDim + column];
      }
    }
  }
  Mismatches mismatches;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) mismatches.add("element " + std::to_string(i) + " (bits)", got[i], want[i]);
  }
  EXPECT_EQ(mismatches.count(), 0u) << mismatches.report();
}

// prefetch_l2_1d is a hint: the bytes it names read back unchanged after it, and it raises no
// error (a whole MLA FP8 page, 64 records of 656 bytes, as the MLA decode prefetches it).
constexpr uint32_t kPrefetchWords = 64 * 656 / 4;

__global__ void __launch_bounds__(128) prefetch_then_copy_kernel(const uint32_t* source,
                                                                 uint32_t* copy) {
  if (threadIdx.x == 0) ptx::prefetch_l2_1d(source, kPrefetchWords * 4);
  for (uint32_t i = threadIdx.x; i < kPrefetchWords; i += blockDim.x) copy[i] = source[i];
}

TEST(Sm90Tma, PrefetchL2LeavesTheBytes) {
  HFA_REQUIRE_HOPPER();
  std::vector<uint32_t> words(kPrefetchWords);
  for (uint32_t i = 0; i < kPrefetchWords; ++i) words[i] = i * 2654435761u;
  DeviceArray<uint32_t> source, copy;
  HFA_CUDA_OK(source.assign(words));
  HFA_CUDA_OK(copy.allocate(kPrefetchWords));
  HFA_CUDA_OK(copy.poison());
  prefetch_then_copy_kernel<<<1, 128>>>(source.get(), copy.get());
  HFA_KERNEL_OK();
  std::vector<uint32_t> got;
  HFA_CUDA_OK(copy.download(got));
  EXPECT_EQ(got, words);
}

}  // namespace
}  // namespace hfa::sm90
