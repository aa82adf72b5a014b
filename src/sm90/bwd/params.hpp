// What the backward's kernels receive: TMA maps of q, k, v and dout, the tensors they read and
// write directly, the workspace, and the problem's scalars. One struct for the three launches
// (preprocess, main, postprocess); each reads its part.
#pragma once

#include <cstdint>
#include <cuda.h>

#include "common/block_sparse.hpp"
#include "common/score_policy.hpp"
#include "sm90/common/sparse_block.hpp"
#include "sm90/common/tile_order.cuh"

namespace hfa::sm90::bwd {

struct RowStrides {
  int64_t batch, row, head;  // elements; varlen tensors have batch 0 and absolute rows
};

// The workspace (workspace.hpp): per (batch, query head) a run of padded rows — a multiple of
// kBlockM, so that every query block of a sequence is one aligned chunk — holding the LSE in
// log2 units, D = rowsum(dO∘O), and dQ's fp32 accumulator (kBlockM × headdim_qk floats a chunk,
// in the order of workspace.hpp's DqChunk); one turn counter a chunk (deterministic); and,
// where a GQA group's query heads are split over CTAs, per (batch, kv head) a run of padded key
// rows holding dK's and dV's fp32 accumulators (kBlockN × headdim floats a chunk, in KeyChunk's
// order).
struct Workspace {
  float* lse_log2;
  float* dpsum;
  float* dq_accum;
  int32_t* dq_turns;  // null unless deterministic
  float* dk_accum;    // null: each CTA walks its whole group and stores dK, dV itself
  float* dv_accum;
  int64_t padded_rows;  // fixed length: rows of one (batch, head) run; varlen: of one head's run
  int64_t padded_keys;  // the same for the key runs
};

struct Params {
  // Boxes of 64 dims × kBlockM (q, dout) or kBlockN (k, v) rows of one (head, batch): rank 4
  // (dim, row, head, batch).
  CUtensorMap q_map;
  CUtensorMap k_map;
  CUtensorMap v_map;
  CUtensorMap do_map;

  const void* out;
  const void* dout;
  const float* lse;  // the forward's, natural log
  RowStrides out_stride, dout_stride;
  int64_t lse_batch_stride, lse_head_stride;  // varlen: batch stride 0, rows from cu_seqlens_q
  void* dq;
  void* dk;
  void* dv;
  RowStrides dq_stride, dk_stride, dv_stride;

  Workspace ws;

  int32_t batch;
  int32_t heads_q;
  int32_t heads_kv;
  int32_t heads_per_kv;  // GQA group size
  int32_t heads_per_tile;  // query heads one CTA walks: the group, or a divisor of it (dk_accum)
  int32_t seqlen_q;      // varlen: the longest sequence's
  int32_t seqlen_k;
  int32_t hdim_qk;       // columns of dq, dk to store (fewer than the kernel's when padded)
  int32_t hdim_v;
  const int32_t* cu_seqlens_q;  // see common/sequence.cuh
  const int32_t* cu_seqlens_k;
  const int32_t* seqused_q;
  const int32_t* seqused_k;
  int32_t window_left;   // bottom-right aligned, −1 = unbounded (common/window.cuh)
  int32_t window_right;

  // P = exp2(s·scale_log2 − lse_log2); with a softcap c, s is first tanh(s·softcap_prescale)
  // (as in the forward, fwd/params.hpp). dQ and dK are scaled by softmax_scale at the end.
  float scale_log2;
  float softcap_prescale;
  float softmax_scale;

  const float* sinks;  // (heads_q) or null
  float* dsinks;       // (heads_q) or null

  int32_t num_m_blocks;  // of the longest sequence (preprocess, postprocess grids)
  int32_t num_n_blocks;
  int32_t num_tiles;     // num_n_blocks · (heads_q / heads_per_tile) · batch
  TileSections sections;  // sectioned tile order: of (batch, head group) pairs whose Q, dO share L2

  // D = rowsum(dO∘O) given by the caller (laid out as lse), read by the preprocess instead of
  // out and dout; null: computed there. Last, so the main kernel's parameter offsets stay.
  const float* softmax_d;
  int64_t softmax_d_batch_stride, softmax_d_head_stride;

  // ALiBi only (last, as above): the slopes, read once a query head (mainloop.cuh's step).
  policy::AlibiSlopes alibi;

  // Block-sparse only (last, as above): the forward's lists and bits, which the preprocess
  // transposes (sparse_preprocess.cuh), and their transpose in the workspace, which the main
  // kernel walks (sm90/common/block_sparse.cuh).
  detail::BlockSparse block_sparse;
  QueryBlockLists query_lists;
};

}  // namespace hfa::sm90::bwd
