// A consumer warpgroup's epilogue: its dK (scaled by softmax_scale) and dV, either
//   stored to global memory in the input dtype through shared memory, where the CTA walked its
//     kv head's whole GQA group: once both warpgroups are done with K and V (the other's dQ GEMM
//     reads every key row), each writes its dK and dV into the K and V tiles, the same shapes,
//     with stmatrix, and the two warpgroups copy the tiles out 16 bytes a thread, whole rows a
//     warp. Every allocated key row of the block is written; rows past the used keys
//     (seqused_k) and keys no query sees get zeros, their true gradient. (Stored from
//     registers, 4 bytes a quad per row, the epilogue took 11-17 % of the main kernel's samples
//     at 1k tokens (ncu, hdim 64 and 128), each store waiting for the last to free its
//     register; FlashAttention-3 stages its tiles too: docs/decisions/040.) Or
//   added in fp32 into the workspace's key accumulators, where the group's query heads are split
//     over CTAs (Params::heads_per_tile): the key postprocess rounds the sums.
// Where the gradients are transposed (TileConfig::kTransposedGradients) the accumulators hold
// dKᵀ and dVᵀ, a slab's 64 dims as rows and the block's keys as columns: stmatrix .trans puts
// them back as key rows.
#pragma once

#include "sm90/bwd/fragment_add.cuh"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/scheduler.cuh"
#include "sm90/bwd/shared_storage.cuh"
#include "sm90/bwd/tile_config.hpp"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/matrix_move.cuh"
#include "sm90/ptx/named_barrier.cuh"

namespace hfa::sm90::bwd {

template <typename Config, typename Element, int kWarpgroup>
struct Epilogue {
  using Storage = SharedStorage<Config, Element>;
  static constexpr WarpgroupRole kRole = Config::role(kWarpgroup);
  static constexpr uint32_t kBothWarpgroups = Config::kConsumerWarpgroups * kThreadsPerWarpgroup;

  const Params& p;
  Storage& smem;
  int thread;

  // acc (slabs [first_slab, ...) of dK or dV, scaled by `scale`) into its place in `staged`,
  // a tile of the block's keys × the head dims: per 16 columns of the fragment, the 8×8
  // matrices of its two row halves and two 8-column groups (as the forward's O epilogue stores
  // them). Keys as rows: lane l gives the address of row l % 8 of matrix l / 8. Transposed
  // (dims as rows, the block's keys as columns, a slab at a time): each matrix lands transposed,
  // so its columns (keys) are the stored rows and lane l gives the address of key row l % 8 of
  // matrix l / 8's.
  template <int kAcc, typename Tile>
  __device__ __forceinline__ void stage(const float (&acc)[kAcc], float scale, Tile& staged,
                                        int first_slab) const {
    constexpr int kSlabAcc = Config::kKeySlabRegisters;
    const int lane = thread % 32, matrix = lane / 8;
    const uint32_t base = ptx::smem_address(staged.data);
#pragma unroll
    for (int q = 0; q < kAcc / 8; ++q) {
      const float* a = acc + 8 * q;
      const uint32_t pairs[4] = {ptx::pack_pair<Element>(a[0] * scale, a[1] * scale),
                                 ptx::pack_pair<Element>(a[2] * scale, a[3] * scale),
                                 ptx::pack_pair<Element>(a[4] * scale, a[5] * scale),
                                 ptx::pack_pair<Element>(a[6] * scale, a[7] * scale)};
      if constexpr (Config::kTransposedGradients) {
        constexpr int kQsPerSlab = kSlabAcc / 8;
        const int key = q % kQsPerSlab * 16 + matrix / 2 * 8 + lane % 8;
        const int dim =
            (first_slab + q / kQsPerSlab) * kSlabColumns + thread / 32 * 16 + matrix % 2 * 8;
        ptx::stmatrix_x4_trans(base + Tile::offset(key, dim), pairs);
      } else {
        const int key = kRole.key_row0 + thread / 32 * 16 + matrix % 2 * 8 + lane % 8;
        const int dim = first_slab * kSlabColumns + 16 * q + matrix / 2 * 8;
        ptx::stmatrix_x4(base + Tile::offset(key, dim), pairs);
      }
    }
  }

  // The staged tile's rows into the (key, head, dim) tensor, its first `columns` columns, 16
  // bytes a thread over both warpgroups (t of them): consecutive threads take consecutive
  // pieces of a row. Rows past the used keys get zeros; rows past the allocated ones nothing.
  template <typename Tile>
  __device__ __forceinline__ void copy_out(const Tile& staged, void* tensor,
                                           const RowStrides& stride, int columns,
                                           const KeyTile& tile, int t) const {
    constexpr int kPieces = Tile::kSlabs * ptx::kSwizzleBytes / 16;  // of a row
    constexpr int kPieceColumns = 16 / sizeof(Element);
    constexpr int kTurns = (Config::kBlockN * kPieces + kBothWarpgroups - 1) / kBothWarpgroups;
    Element* base = static_cast<Element*>(tensor) + tile.batch * stride.batch +
                    tile.kv_head * stride.head;
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(staged.data);
#pragma unroll
    for (int turn = 0; turn < kTurns; ++turn) {
      const int i = t + turn * int(kBothWarpgroups);
      const int row = i / kPieces, column = i % kPieces * kPieceColumns;
      const int key = tile.n_block * Config::kBlockN + row;
      if (row >= Config::kBlockN || key >= tile.allocated_k || column >= columns) continue;
      const uint4 piece = key < tile.seq.seqlen_k
                              ? *reinterpret_cast<const uint4*>(bytes + Tile::offset(row, column))
                              : make_uint4(0, 0, 0, 0);
      Element* row_start = base + int64_t(tile.seq.k_offset + key) * stride.row;
      *reinterpret_cast<uint4*>(row_start + column) = piece;
    }
  }

  // acc (as stage takes it), unscaled, into the key block's chunk of an accumulator of kColumns
  // columns.
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
      return;
    }
    const uint32_t barrier = ptx::barrier_id(ptx::NamedBarrier::gradients_staged);
    ptx::named_barrier_sync(barrier, kBothWarpgroups);  // K and V read for the last time
    stage(dk, p.softmax_scale, smem.k, kRole.dk_first);
    stage(dv, 1.0f, smem.v, kRole.dv_first);
    ptx::named_barrier_sync(barrier, kBothWarpgroups);
    const int t = kWarpgroup * kThreadsPerWarpgroup + thread;
    copy_out(smem.k, p.dk, p.dk_stride, p.hdim_qk, tile, t);
    copy_out(smem.v, p.dv, p.dv_stride, p.hdim_v, tile, t);
  }
};

}  // namespace hfa::sm90::bwd
