// The FP8 forward's scales of one tile (q, k, v are e4m3 codes; value = code · scale, see
// common/scale_view.hpp). Scores are q·k·(q scale)·(k scale), and P·V sums v's codes times
// their scale:
//   - per (batch, head) scales of q and k are one number a tile: folded into the softmax's
//     scale_log2 (or the softcap's prescale), at no cost per score;
//   - per-block (or, under PackGQA, per-head) q scales and per-block k scales differ between the
//     rows or the key blocks of a tile: S is multiplied by row factor × key-block factor before
//     the softcap and the softmax (one FMUL a score);
//   - v's scale of each key block rides on O's per-block rescale (O is kept in units of the
//     current block's v scale), and the last block's scale goes into the epilogue's
//     normalization. A per (batch, head) v scale is just that last factor.
#pragma once

#include "common/scale_view.hpp"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"

namespace hfa::sm90::fwd {

struct ScoreScales {
  float scale_log2;        // of the softmax and the LSE: params' × the tile's q·k scale
  float softcap_prescale;  // params' × the tile's q·k scale
};

// The softmax's scales for a tile: with one q·k scale for the whole tile (Params::fp8_row_scales
// 0: per (batch, kv head), or one q head a tile), folded in; otherwise S carries it.
__device__ __forceinline__ ScoreScales score_scales(const Params& p, const WorkTile& tile,
                                                    int kv_head) {
  float qk = 1.0f;
  if (!p.fp8_row_scales) {
    const int head = tile.head << p.pack_shift;
    qk = detail::scale_at(p.q_descale, tile.batch, 0, head) *
         detail::scale_at(p.k_descale, tile.batch, 0, kv_head);
  }
  // With a softcap, scores meet the scale inside tanh (prescale); scale_log2 is then c·log2(e).
  return p.softcap_prescale > 0.0f ? ScoreScales{p.scale_log2, p.softcap_prescale * qk}
                                   : ScoreScales{p.scale_log2 * qk, 0.0f};
}

// The q scale of one tile row (a (query, head) pair under PackGQA).
__device__ __forceinline__ float q_row_scale(const Params& p, const WorkTile& tile, int row) {
  const int head = (tile.head << p.pack_shift) + (row & ((1 << p.pack_shift) - 1));
  return detail::scale_at(p.q_descale, tile.batch, query_of_row(p, row), head);
}

// k's or v's scale of key block n: per block, block_rows is a multiple of kBlockN (the tiles of
// TileConfig::kKeyBlockScales), so one for the block.
template <typename Config>
__device__ __forceinline__ float key_block_scale(const detail::ScaleView& view,
                                                 const WorkTile& tile, int n_block, int kv_head) {
  return detail::scale_at(view, tile.batch, n_block * Config::kBlockN, kv_head);
}

}  // namespace hfa::sm90::fwd
