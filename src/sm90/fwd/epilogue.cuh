// A consumer warpgroup's epilogue: normalize O, stage it in its own 64 rows of the Q buffer,
// TMA-store it (rows past seqlen_q are clipped by the tensor map), write the LSE.
#pragma once

#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/shared_storage.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/named_barrier.cuh"
#include "sm90/ptx/tma.cuh"

namespace hfa::sm90::fwd {

template <typename Config, typename Element>
struct Epilogue {
  using Storage = SharedStorage<Config, Element>;
  static constexpr int kOAcc = Config::kHeadDim / 2;
  static constexpr int kSlabElements = Config::kBlockM * kSlabColumns;

  const Params& p;
  Storage& smem;
  int warpgroup;
  int thread;

  // Byte address of element (row, column) of the Q/O buffer in its 128-byte swizzle: the 16-byte
  // chunk index within a 128-byte row is XORed with the row index modulo 8.
  __device__ __forceinline__ uint32_t swizzled_address(int row, int column) const {
    const int slab = column / kSlabColumns;
    const int in_slab = column % kSlabColumns;
    constexpr int kChunkElements = 16 / sizeof(Element);
    const int chunk = (in_slab / kChunkElements) ^ (row % 8);
    return ptx::smem_address(smem.q.data) + slab * Storage::QTile::kSlabBytes +
           row * ptx::kSwizzleBytes + chunk * 16 + (in_slab % kChunkElements) * sizeof(Element);
  }

  __device__ void store(const WorkTile& tile, float (&o)[kOAcc], const OnlineSoftmax& softmax) {
    float inverse_sum[2], lse[2];
    softmax.finalize(p.scale_log2, inverse_sum, lse);
    scale_rows(o, inverse_sum);

    const ptx::FragmentCoords at = ptx::fragment_coords(thread);
    const int tile_row0 = warpgroup * kRowsPerWarpgroup + at.row0;
#pragma unroll
    for (int i = 0; i < kOAcc; i += 2) {
      const int row = tile_row0 + 8 * ptx::fragment_row_half(i);
      const uint32_t pair = ptx::pack_pair<Element>(o[i], o[i + 1]);
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(swizzled_address(row, ptx::fragment_column(i, at.column_pair))),
                   "r"(pair)
                   : "memory");
    }
    ptx::fence_proxy_async_smem();
    ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::epilogue, warpgroup),
                            kThreadsPerWarpgroup);
    if (thread == 0) {
      const int first_row = tile.m_block * Config::kBlockM + warpgroup * kRowsPerWarpgroup;
#pragma unroll
      for (int slab = 0; slab < Config::kSlabs; ++slab) {
        ptx::store_4d(&p.out_map,
                      smem.q.data + slab * kSlabElements + warpgroup * kRowsPerWarpgroup * kSlabColumns,
                      slab * kSlabColumns, first_row, tile.head, tile.batch);
      }
      ptx::store_commit_group();
      ptx::store_wait_read();
      smem.q_empty.arrive();
    }

    if (p.lse != nullptr && at.column_pair == 0) {
      const int row0 = tile.m_block * Config::kBlockM + tile_row0;
      float* lse_row = p.lse + tile.batch * p.lse_batch_stride + tile.head * p.lse_head_stride;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (row0 + 8 * half < p.seqlen_q) lse_row[row0 + 8 * half] = lse[half];
      }
    }
  }
};

}  // namespace hfa::sm90::fwd
