// A consumer warpgroup's epilogue: its dK (scaled by softmax_scale) and dV, either
//   stored straight from registers to global memory in the input dtype, where the CTA walked its
//     kv head's whole GQA group: every allocated key row of the block is written, and rows past
//     the used keys (seqused_k) and keys no query sees get zeros, their true gradient; or
//   added in fp32 into the workspace's key accumulators, where the group's query heads are split
//     over CTAs (Params::heads_per_tile): the key postprocess rounds the sums.
// Where the gradients are transposed (TileConfig::kTransposedGradients) the accumulators hold
// dKᵀ and dVᵀ, a slab's 64 dims as rows and the block's keys as columns.
#pragma once

#include "sm90/bwd/fragment_add.cuh"
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

  // acc: slabs [first_slab, ...) of dKᵀ or dVᵀ, 64 dims × the block's keys each, stored the
  // same way. A thread's register pairs are neighbouring keys of one dim, a column of the
  // tensor: each element is its own 2-byte store (lanes l and l + 4 hold dims d, d + 1, so a
  // quad pair's stores fill 16-byte runs of 4 key rows). Key by key, so that each of the
  // thread's 20 key rows has its address computed once for all its slabs.
  template <int kAcc>
  __device__ __forceinline__ void store_transposed(const float (&acc)[kAcc], float scale,
                                                   void* tensor, const RowStrides& stride,
                                                   int columns, int first_slab,
                                                   const KeyTile& tile) const {
    constexpr int kSlabAcc = Config::kKeySlabRegisters;
    const ptx::FragmentCoords at = ptx::fragment_coords(thread);
    Element* base = static_cast<Element*>(tensor) + tile.batch * stride.batch +
                    tile.kv_head * stride.head;
#pragma unroll
    for (int group = 0; group < kSlabAcc / 4; ++group) {  // 8-key groups
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i0 = 4 * group + e;  // register of (row half 0, this key) in every slab
        const int key = tile.n_block * Config::kBlockN + ptx::fragment_column(i0, at.column_pair);
        if (key >= tile.allocated_k) continue;
        const bool used = key < tile.seq.seqlen_k;
        Element* row = base + int64_t(tile.seq.k_offset + key) * stride.row;
#pragma unroll
        for (int slab = 0; slab < kAcc / kSlabAcc; ++slab) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int dim = (first_slab + slab) * kSlabColumns + at.row0 + 8 * half;
            if (dim >= columns) continue;
            const float value = used ? acc[slab * kSlabAcc + i0 + 2 * half] * scale : 0.0f;
            row[dim] = ptx::to_element<Element>(value);
          }
        }
      }
    }
  }

  // acc as above, unscaled, into the key block's chunk of an accumulator of kColumns columns.
  template <int kColumns, int kAcc>
  __device__ __forceinline__ void add(const float (&acc)[kAcc], float* accumulator, int first_slab,
                                      const KeyTile& tile) const {
    using Chunk = KeyChunk<Config, kColumns>;
    constexpr int kSlabAcc = Config::kKeySlabRegisters;
    // A transposed slab spans every key of the block: one row tile.
    const int row_tile = Config::kTransposedGradients ? 0 : kRole.key_row0 / kRowsPerWarpgroup;
    float* chunk = accumulator +
                   key_chunk_index<Config::kBlockN>(p, tile.batch, tile.kv_head, tile.n_block) *
                       Chunk::kFloats;
#pragma unroll
    for (int slab = 0; slab < kAcc / kSlabAcc; ++slab) {
      add_fragment_part<kSlabAcc>(chunk + Chunk::part(row_tile, first_slab + slab),
                                  acc + slab * kSlabAcc, thread);
    }
  }

  template <int kDkAcc, int kDvAcc>
  __device__ void run(const float (&dk)[kDkAcc], const float (&dv)[kDvAcc], const KeyTile& tile) const {
    if (p.ws.dk_accum != nullptr) {
      add<Config::kHeadDimQK>(dk, p.ws.dk_accum, kRole.dk_first, tile);
      add<Config::kHeadDimV>(dv, p.ws.dv_accum, kRole.dv_first, tile);
    } else if constexpr (Config::kTransposedGradients) {
      store_transposed(dk, p.softmax_scale, p.dk, p.dk_stride, p.hdim_qk, kRole.dk_first, tile);
      store_transposed(dv, 1.0f, p.dv, p.dv_stride, p.hdim_v, kRole.dv_first, tile);
    } else {
      store(dk, p.softmax_scale, p.dk, p.dk_stride, p.hdim_qk, kRole.dk_first, tile);
      store(dv, 1.0f, p.dv, p.dv_stride, p.hdim_v, kRole.dv_first, tile);
    }
  }
};

}  // namespace hfa::sm90::bwd
