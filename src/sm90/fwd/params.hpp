// What the forward kernel receives: TMA maps of q, k, v, out and the problem's scalars.
#pragma once

#include <cstdint>
#include <cuda.h>

namespace hfa::sm90::fwd {

struct Params {
  // Rank-4 (dim, row, head, batch) maps; boxes of 64 dims × kBlockM (q) or kBlockN (k, v) rows.
  CUtensorMap q_map;
  CUtensorMap k_map;
  CUtensorMap v_map;

  void* out;  // written from registers (epilogue.cuh)
  struct {
    int64_t batch, row, head;  // elements
  } out_stride;

  float* lse;  // null: not wanted
  int64_t lse_batch_stride;
  int64_t lse_head_stride;

  int32_t batch;
  int32_t heads_q;
  int32_t heads_per_kv;  // GQA group size
  int32_t seqlen_q;
  int32_t seqlen_k;

  float scale_log2;  // softmax_scale · log2(e): exponentials are exp2(s·scale_log2 − max·scale_log2)

  int32_t num_m_blocks;
  int32_t num_tiles;           // num_m_blocks · heads_q · batch
  int32_t heads_per_section;   // causal tile order: (batch, head) pairs whose K/V share L2

  // Dynamic schedule: a zeroed counter in the caller's workspace from which CTAs take their
  // next tile (see scheduler.cuh). Null: the static schedule.
  int32_t* tile_counter;
};

}  // namespace hfa::sm90::fwd
