// What the forward kernel receives: TMA maps of q, k, v, out and the problem's scalars.
#pragma once

#include <cstdint>
#include <cuda.h>

#include "common/block_sparse.hpp"
#include "common/scale_view.hpp"
#include "common/score_policy.hpp"
#include "sm90/common/tile_order.cuh"

namespace hfa::sm90::fwd {

struct Params {
  // Maps of boxes of 64 dims × kBlockM (q) or kBlockN (k, v) rows: k and v rank 4 (dim, row,
  // head, batch), q rank 5 (dim, head in group, row, head group, batch) for PackGQA's sake
  // (groups of 1 head without it).
  // FP8: v_map is a rank-4 map (key, dim, kv head, 1) of the transposed copy of v (launch.cuh's
  // transpose_v), copied in boxes of 128 keys × the configuration's head dim.
  CUtensorMap q_map;
  CUtensorMap k_map;
  CUtensorMap v_map;
  // out as q's rank-5 map, in boxes of one consumer warpgroup's 64 rows, where the configuration
  // stages O in shared memory (epilogue.cuh) and out suits TMA (out_by_tma).
  CUtensorMap out_map;
  int32_t out_by_tma;
  // 1: the map's rows end where every sequence's used rows do (fixed length, no seqused_q), so
  // its bounds clip a tile that runs past them; otherwise such a tile is stored from registers.
  int32_t out_map_ends_sequences;

  void* out;
  struct {
    int64_t batch, row, head;  // elements
  } out_stride;

  float* lse;  // null: not wanted
  int64_t lse_batch_stride;
  int64_t lse_head_stride;

  int32_t batch;
  int32_t heads_q;
  int32_t heads_per_kv;  // GQA group size
  // PackGQA: the rows of a tile are (query, head) pairs of one GQA group, head fastest, so the
  // group's heads share one pass over K/V. pack_shift = log2(heads per group), 0 = off; the tiles
  // then run over tile_heads = heads_q >> pack_shift head groups. See scheduler.cuh and common/sequence.cuh.
  int32_t pack_shift;
  int32_t tile_heads;
  int32_t seqlen_q;      // varlen: the longest sequence's
  int32_t seqlen_k;
  int32_t hdim_v;        // columns of out to store (fewer than the kernel's when padded)

  // Varlen (null: fixed length): sequence b is rows [cu_seqlens[b], cu_seqlens[b + 1]) of the
  // packed tensors, which the maps see as one batch of all rows. Used lengths (null: all):
  // sequence b uses its first seqused[b] rows. See scheduler.cuh and common/sequence.cuh.
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  const int32_t* seqused_q;
  const int32_t* seqused_k;

  // Bottom-right aligned window, −1 = unbounded on that side (causal: −1, 0). Clamped to the
  // longest sequences' lengths so that index arithmetic cannot overflow.
  int32_t window_left;
  int32_t window_right;

  // Scores s = q·k reach the softmax as exp2(s·scale_log2 − max·scale_log2), scale_log2 =
  // softmax_scale · log2(e). With a softcap c, s is first replaced by tanh(s·softcap_prescale),
  // softcap_prescale = softmax_scale / c, and scale_log2 = c · log2(e). 0: no softcap.
  float scale_log2;
  float softcap_prescale;

  const float* sinks;  // (heads_q) logits in units of the scaled scores; null: none


  int32_t num_m_blocks;
  int32_t num_tiles;           // num_m_blocks · heads_q · batch
  TileSections sections;       // causal tile order: of (batch, head) pairs whose K/V share L2

  // Dynamic schedule: a zeroed counter in the caller's workspace from which CTAs take their
  // next tile (see scheduler.cuh). Null: the static schedule.
  int32_t* tile_counter;

  // FP8 only (last, so that the 16-bit kernels' parameter offsets stay): the codes' scales
  // (common/scale_view.hpp). k and v blocks are multiples of kBlockN rows, so each key block
  // has one scale of each.
  detail::ScaleView q_descale, k_descale, v_descale;
  // 1: the q·k scale differs between the rows or key blocks of a tile (per-block q or k scales,
  // or per-head q scales under PackGQA), so S is scaled in registers (fwd/fp8_scales.cuh).
  int32_t fp8_row_scales;

  // f32 out only (last, as above): 1 merges each row into out and lse, the running result of
  // earlier calls, instead of storing it (hfa_options.accumulate; epilogue.cuh).
  int32_t accumulate;

  // ALiBi only (last, as above): the slopes, read once a tile (mainloop.cuh's row_mods_of).
  policy::AlibiSlopes alibi;

  // Block-sparse only (last, as above): the mask's lists and bits (common/block_sparse.hpp),
  // walked by sm90/common/block_sparse.cuh.
  detail::BlockSparse block_sparse;
};

}  // namespace hfa::sm90::fwd
