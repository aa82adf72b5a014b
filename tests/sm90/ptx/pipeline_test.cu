// The synchronization the forward kernel is built on: a TMA producer feeding consumer
// warpgroups through a ring of full/empty mbarriers, and the named-barrier ping-pong that
// makes consumer warpgroups take turns.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/named_barrier.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/tma_descriptor.hpp"
#include "ptx_test_util.cuh"

namespace hfa::sm90 {
namespace {

using ptx_test::DeviceArray;
using ptx_test::Mismatches;
using ptx_test::Watchdog;

// ---- mbarrier ring ------------------------------------------------------------------------------

// A packed (batch, head, row, dim) tensor streamed as 64 tiles of 64 rows × 128 columns.
constexpr int kDim = 128;
constexpr int kRows = 1024;
constexpr int kHeads = 2;
constexpr int kBatch = 2;
constexpr int kTileRows = 64;
constexpr int kTilesPerHead = kRows / kTileRows;
constexpr int kTiles = kTilesPerHead * kHeads * kBatch;  // 64
constexpr size_t kElements = size_t(kBatch) * kHeads * kRows * kDim;

constexpr int kSlabs = kDim / 64;
constexpr uint32_t kSlabBytes = kTileRows * 128;
constexpr uint32_t kTileBytes = kSlabs * kSlabBytes;

constexpr int kStages = 2;
constexpr int kConsumerWarpgroups = 2;
constexpr int kRingThreads = 128 * (1 + kConsumerWarpgroups);
constexpr uint32_t kEmptyArrivals = kConsumerWarpgroups * 4;  // one lane of each consumer warp

struct RingStorage {
  uint8_t tiles[kStages][kTileBytes];  // each 1024-byte aligned (kTileBytes is 16 KB)
  ptx::Mbarrier full[kStages];
  ptx::Mbarrier empty[kStages];
};
constexpr size_t kRingSharedBytes = sizeof(RingStorage) + ptx_test::kSwizzleAlignment;

struct RingParams {
  CUtensorMap map;
};

// Tile t: rows 64·(t % 16) of head (t / 16) % 2 of batch t / 32, stored at the same place of
// the output, so the output is the input when every tile arrived intact.
__device__ __forceinline__ int tile_row(int t) { return t % kTilesPerHead * kTileRows; }
__device__ __forceinline__ int tile_head(int t) { return t / kTilesPerHead % kHeads; }
__device__ __forceinline__ int tile_batch(int t) { return t / (kTilesPerHead * kHeads); }

// Warpgroup 0: one thread loads every tile into the next stage once it is empty. Warpgroups 1
// and 2: wait until the stage is full, copy the tile out (unswizzling), release it.
__global__ void __launch_bounds__(kRingThreads, 1) ring_kernel(const __grid_constant__ RingParams p,
                                                               uint16_t* out, uint32_t* watchdog) {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  RingStorage& smem = *reinterpret_cast<RingStorage*>(ptx_test::align_for_swizzle(dynamic_smem));
  if (threadIdx.x == 0) {
    ptx::prefetch_tensor_map(&p.map);
    for (int stage = 0; stage < kStages; ++stage) {
      smem.full[stage].init(1);  // the producer's arrive_expect_tx
      smem.empty[stage].init(kEmptyArrivals);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();

  ptx::RingPosition<kStages> ring;
  if (threadIdx.x < 128) {
    if (threadIdx.x != 0) return;
    for (int t = 0; t < kTiles; ++t) {
      // Fresh barriers: phase ^ 1 lets the first pass over the ring through at once.
      ptx_test::wait_or_trap(smem.empty[ring.stage], ring.phase ^ 1, watchdog, __LINE__);
      smem.full[ring.stage].arrive_expect_tx(kTileBytes);
      for (int slab = 0; slab < kSlabs; ++slab) {
        ptx::load_4d(smem.tiles[ring.stage] + slab * kSlabBytes, &p.map, &smem.full[ring.stage],
                     slab * 64, tile_row(t), tile_head(t), tile_batch(t), ptx::CacheHint::evict_first);
      }
      ring.advance();
    }
    return;
  }

  const int thread = threadIdx.x - 128;  // among the 256 consumer threads
  for (int t = 0; t < kTiles; ++t) {
    ptx_test::wait_or_trap(smem.full[ring.stage], ring.phase, watchdog, __LINE__);
    // Hold the stage a while: a producer that did not wait for "empty" would overwrite it now.
    __nanosleep(1000);
    const uint8_t* tile = smem.tiles[ring.stage];
    uint16_t* dst =
        out + ((size_t(tile_batch(t)) * kHeads + tile_head(t)) * kRows + tile_row(t)) * kDim;
    for (int chunk = thread; chunk < kTileRows * kDim / 8; chunk += 128 * kConsumerWarpgroups) {
      const int row = chunk / (kDim / 8);
      const int column = chunk % (kDim / 8) * 8;
      *reinterpret_cast<uint4*>(dst + row * kDim + column) =
          *reinterpret_cast<const uint4*>(tile + ptx_test::swizzled_offset(row, column, kTileRows));
    }
    __syncwarp();  // the whole warp has read the stage before its lane 0 releases it
    if (threadIdx.x % 32 == 0) smem.empty[ring.stage].arrive();
    ring.advance();
  }
}

TEST(Sm90Pipeline, MbarrierRingStreamsEveryTileIntact) {
  HFA_REQUIRE_HOPPER();
  const ptx_test::RandomElements input = ptx_test::random_elements<__nv_bfloat16>(kElements, 31);
  DeviceArray<uint16_t> tensor, out;
  HFA_CUDA_OK(tensor.assign(input.bits));
  HFA_CUDA_OK(out.allocate(kElements));
  HFA_CUDA_OK(out.poison());
  Watchdog watchdog;
  HFA_CUDA_OK(watchdog.create());

  RingParams params{};
  constexpr uint64_t kRowBytes = kDim * 2;
  const TileMapShape view{tensor.get(),
                          {kDim, kRows, kHeads, kBatch},
                          {kRowBytes, kRows * kRowBytes, kHeads * kRows * kRowBytes},
                          kTileRows};
  const Status status = make_tile_map(&params.map, view, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  ASSERT_TRUE(status.is_ok()) << status.message();

  HFA_CUDA_OK(ptx_test::allow_shared_bytes(ring_kernel, kRingSharedBytes));
  ring_kernel<<<1, kRingThreads, kRingSharedBytes>>>(params, out.get(), watchdog.device_word());
  HFA_WATCHED_KERNEL_OK(watchdog);
  std::vector<uint16_t> got;
  HFA_CUDA_OK(out.download(got));

  Mismatches mismatches;
  for (size_t i = 0; i < kElements; ++i) {
    if (got[i] != input.bits[i]) {
      mismatches.add("element " + std::to_string(i) + " (bits)", got[i], input.bits[i]);
    }
  }
  EXPECT_EQ(mismatches.count(), 0u) << mismatches.report();
}

// ---- Named-barrier ping-pong --------------------------------------------------------------------

constexpr int kRounds = 32;

// The consumer mainloop's turn-taking for kWarpgroups warpgroups: warpgroup w waits on barrier
// warp_scheduler + w (its 128 threads sync, the previous warpgroup's 128 arrive) and, its turn
// done, arrives on the next one's; the last warpgroup opens warpgroup 0's barrier at the start.
// In each turn, thread 0 of the warpgroup appends an entry to the log through a shared slot
// counter, slowly: two overlapping turns would take the same slot and leave another one unset.
template <int kWarpgroups>
__global__ void __launch_bounds__(128 * kWarpgroups) ping_pong_kernel(int* log) {
  __shared__ int next_slot;
  if (threadIdx.x == 0) next_slot = 0;
  __syncthreads();

  constexpr uint32_t kThreads = 2 * ptx::kWarpgroupThreads;
  const int warpgroup = threadIdx.x / 128;
  const uint32_t mine = ptx::barrier_id(ptx::NamedBarrier::warp_scheduler, warpgroup);
  const uint32_t next =
      ptx::barrier_id(ptx::NamedBarrier::warp_scheduler, (warpgroup + 1) % kWarpgroups);
  if (warpgroup == kWarpgroups - 1) ptx::named_barrier_arrive(next, kThreads);
  for (int round = 0; round < kRounds; ++round) {
    ptx::named_barrier_sync(mine, kThreads);
    if (threadIdx.x % 128 == 0) {
      volatile int* slot = &next_slot;
      const int at = *slot;
      __nanosleep(2000);
      log[at] = round * kWarpgroups + warpgroup;
      *slot = at + 1;
    }
    ptx::named_barrier_arrive(next, kThreads);
  }
}

template <int kWarpgroups>
void check_ping_pong() {
  constexpr int kEntries = kRounds * kWarpgroups;
  DeviceArray<int> log;
  HFA_CUDA_OK(log.allocate(kEntries));
  HFA_CUDA_OK(log.poison());
  ping_pong_kernel<kWarpgroups><<<1, 128 * kWarpgroups>>>(log.get());
  HFA_KERNEL_OK();
  std::vector<int> got;
  HFA_CUDA_OK(log.download(got));
  // Turns in order: round 0 of warpgroups 0, 1, .., then round 1, ...: entry i is i.
  Mismatches mismatches;
  for (int i = 0; i < kEntries; ++i) {
    if (got[i] != i) mismatches.add("log[" + std::to_string(i) + "]", got[i], i);
  }
  EXPECT_EQ(mismatches.count(), 0u) << mismatches.report();
}

TEST(Sm90Pipeline, NamedBarrierPingPongTwoWarpgroups) {
  HFA_REQUIRE_HOPPER();
  check_ping_pong<2>();
}

TEST(Sm90Pipeline, NamedBarrierPingPongThreeWarpgroups) {
  HFA_REQUIRE_HOPPER();
  check_ping_pong<3>();
}

}  // namespace
}  // namespace hfa::sm90
