// A consumer warpgroup's epilogue: its dK (scaled by softmax_scale) and dV, straight from
// registers to global memory in the input dtype. Every allocated key row of the block is
// written: rows past the used keys (seqused_k) and keys no query sees get zeros, their true
// gradient.
#pragma once

#include "sm90/bwd/params.hpp"
#include "sm90/bwd/scheduler.cuh"
#include "sm90/bwd/tile_config.hpp"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::bwd {

template <typename Config, typename Element, int kWarpgroup>
struct Epilogue {
  static constexpr WarpgroupRole kRole = Config::role(kWarpgroup);

  const Params& p;
  int thread;

  // acc: 64 keys (the role's rows) × slabs [first_slab, ...) of a (key, head, dim) tensor.
  template <int kAcc>
  __device__ __forceinline__ void store(const float (&acc)[kAcc], float scale, void* tensor,
                                        const RowStrides& stride, int columns, int first_slab,
                                        const KeyTile& tile) const {
    const ptx::FragmentCoords at = ptx::fragment_coords(thread);
    Element* base = static_cast<Element*>(tensor) + tile.batch * stride.batch +
                    tile.kv_head * stride.head;
    // Each quad writes 16 contiguous bytes of a row per 8-column group; L2 merges the sectors.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int key = tile.n_block * Config::kBlockN + kRole.key_row0 + at.row0 + 8 * half;
      if (key >= tile.allocated_k) continue;
      const bool used = key < tile.seq.seqlen_k;
      Element* row = base + int64_t(tile.seq.k_offset + key) * stride.row;
#pragma unroll
      for (int i = 2 * half; i < kAcc; i += 4) {
        const int column = first_slab * kSlabColumns + ptx::fragment_column(i, at.column_pair);
        if (column >= columns) continue;
        const uint32_t pair =
            used ? ptx::pack_pair<Element>(acc[i] * scale, acc[i + 1] * scale) : 0u;
        *reinterpret_cast<uint32_t*>(row + column) = pair;
      }
    }
  }

  template <int kDkAcc, int kDvAcc>
  __device__ void run(const float (&dk)[kDkAcc], const float (&dv)[kDvAcc], const KeyTile& tile) const {
    store(dk, p.softmax_scale, p.dk, p.dk_stride, p.hdim_qk, kRole.dk_first, tile);
    store(dv, 1.0f, p.dv, p.dv_stride, p.hdim_v, kRole.dv_first, tile);
  }
};

}  // namespace hfa::sm90::bwd
