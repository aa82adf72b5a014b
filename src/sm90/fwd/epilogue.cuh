// A consumer warpgroup's epilogue: normalize O and store it, and the LSE, straight from
// registers to global memory.
//
// Why not through shared memory and a TMA store: the only buffer free for staging O is Q's, and
// while O sits there the next tile's Q cannot load, so every tile boundary waited for the store
// to drain and then for Q to arrive. Stored from registers, O needs no shared memory, the Q
// buffer is released right after the tile's last Q·Kᵀ, and the next Q loads during the last
// P·V and this epilogue. (Measured, bench/results/README.md: +8 % to +39 % at seqlen 512 where
// tiles are short, within noise at long sequences.)
#pragma once

#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/fwd/tile_config.hpp"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::fwd {

template <typename Config, typename Element>
struct Epilogue {
  static constexpr int kOAcc = Config::kHeadDimV / 2;

  const Params& p;
  int warpgroup;
  int thread;

  __device__ void store(const WorkTile& tile, float (&o)[kOAcc], const OnlineSoftmax& softmax) {
    constexpr float kLog2e = 1.4426950408889634f;
    const float sink_log2 = p.sinks != nullptr ? p.sinks[tile.head] * kLog2e : -INFINITY;
    float normalizer[2], lse[2];
    softmax.finalize(p.scale_log2, sink_log2, normalizer, lse);
    scale_rows(o, normalizer);

    const ptx::FragmentCoords at = ptx::fragment_coords(thread);
    // Sequence-relative row of the thread's first row.
    const int row0 = tile.m_block * Config::kBlockM + warpgroup * kRowsPerWarpgroup + at.row0;
    Element* out = static_cast<Element*>(p.out) + tile.batch * p.out_stride.batch +
                   int64_t(tile.seq.q_offset) * p.out_stride.row + tile.head * p.out_stride.head;
    // Each quad writes 16 contiguous bytes of a row per 8-column group: whole 32-byte sectors
    // once the neighbouring group lands, merged in L2. Columns past hdim_v exist only in a
    // padded configuration and are not stored.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + 8 * half;
      if (row >= tile.seq.seqlen_q) continue;
      Element* out_row = out + row * p.out_stride.row;
#pragma unroll
      for (int i = 2 * half; i < kOAcc; i += 4) {
        const int column = ptx::fragment_column(i, at.column_pair);
        if (column >= p.hdim_v) continue;
        const uint32_t pair = ptx::pack_pair<Element>(o[i], o[i + 1]);
        *reinterpret_cast<uint32_t*>(out_row + column) = pair;
      }
    }

    if (p.lse != nullptr && at.column_pair == 0) {
      // Varlen LSE is (heads, total_q): batch stride 0, rows from the sequence's offset.
      float* lse_row = p.lse + tile.batch * p.lse_batch_stride + tile.head * p.lse_head_stride +
                       tile.seq.q_offset;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (row0 + 8 * half < tile.seq.seqlen_q) lse_row[row0 + 8 * half] = lse[half];
      }
    }
  }
};

}  // namespace hfa::sm90::fwd
