// The attention problem as every backend sees it: validated, defaults resolved, strides in
// elements. The API layer builds it (src/api); backends consume it and know nothing else of
// the API.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/block_sparse.hpp"
#include "common/option_values.hpp"
#include "common/option_vectors.hpp"
#include "common/scale_view.hpp"
#include "hfa/hfa.hpp"

namespace hfa::detail {

// Element strides of a (batch, row, head, dim) tensor; dim has unit stride. Varlen tensors are
// (total_tokens, head, dim): batch is 0 and rows are absolute token indices (cu_seqlens[b] + i).
struct Strides {
  int64_t batch = 0;
  int64_t row = 0;
  int64_t head = 0;
};

struct ForwardProblem {
  DType dtype = DType::bf16;      // of q, k and v
  DType out_dtype = DType::bf16;  // of out
  int32_t batch = 0;
  int32_t seqlen_q = 0;  // varlen: max_seqlen_q
  int32_t seqlen_k = 0;  // varlen: max_seqlen_k
  int32_t heads_q = 0;
  int32_t heads_kv = 0;  // heads_q % heads_kv == 0
  int32_t hdim_qk = 0;
  int32_t hdim_v = 0;

  // Varlen: int32 offsets (batch + 1) on the tensors' device; null for fixed length.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int64_t total_q = 0;  // varlen: rows of q (= cu_seqlens_q[batch], from q's shape)
  int64_t total_k = 0;

  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  Strides q_stride, k_stride, v_stride, out_stride;

  // fp32, natural log. Element (b, h, i) at b·lse_batch_stride + h·lse_head_stride + i;
  // varlen: h·lse_head_stride + cu_seqlens_q[b] + i (lse_batch_stride = 0). Null: not wanted.
  float* lse = nullptr;
  int64_t lse_batch_stride = 0;
  int64_t lse_head_stride = 0;

  // Attention sinks: fp32 (heads_q), contiguous, on the tensors' device; null = none. Logits in
  // the units of the scaled (and softcapped) scores that join every row's softmax denominator.
  const float* sinks = nullptr;
  // Used lengths: int32 (batch), contiguous, on the tensors' device; null = the whole sequence.
  // Sequence b uses its first seqused_q[b] rows and seqused_k[b] keys (<= its allocated
  // lengths); the window alignment uses these. Rows of out and lse beyond them are not touched.
  const int32_t* seqused_q = nullptr;
  const int32_t* seqused_k = nullptr;

  // FP8 descales (dtype e4m3 only; out is bf16 or f16). On a GPU, k and v block_rows are
  // multiples of kFp8KeyBlock, the keys per tile of the FP8 kernels that take them, so a tile
  // of keys has one scale.
  ScaleView q_descale, k_descale, v_descale;

  Device device;

  // Every option that is a value (hfa/options.def's HFA_ATTENTION_OPTION rows but the tensors),
  // one member each, of its row's name: what the caller gave (common/option_values.hpp), which
  // the API then resolves for these:
  //   softmax_scale  never the "default" marker: 1/sqrt(hdim_qk) when none was given;
  //   window_left, window_right  bottom-right aligned: query i of a sequence sees key j iff
  //       (window_left  < 0 || j >= i + seqlen_k - seqlen_q - window_left) and
  //       (window_right < 0 || j <= i + seqlen_k - seqlen_q + window_right);
  //     causal is window_right = 0 (the API folds the flag in), and a left window reaching past
  //     every row's first key is -1 (no window: the same result, no mask work);
  //   causal  set iff the window is (-1, 0), whichever way the caller spelled it: backends
  //     dispatch on the flag.
  // Of the others (hfa/options.def says what each means): softcap 0 = off; sm_margin SMs to
  // leave free for other kernels (>= 0; a GPU backend checks it against its SM count);
  // accumulate merges into out (f32) and lse rather than overwrite them (both hold a result over
  // other keys; a row of lse -inf has none, and its out is not read); deterministic is the
  // backward's; workspace and workspace_bytes are the run's (hfa_run puts them in).
#define HFA_ATTENTION_OPTION(kind, name, value, ...) HFA_PROBLEM_VALUE_##kind(name, value)
#include "hfa/options.def"

  // The VECTOR options (hfa/options.def), checked; a backend that reads none of them rejects
  // them (first_unread).
  AttentionVectors vectors;
  // Block-sparse attention (kv_num_blocks ...); off unless kv_num_blocks was given. Only the
  // CPU backend reads it (dispatch refuses it for the others).
  BlockSparse block_sparse;

  bool is_varlen() const { return cu_seqlens_q != nullptr; }
  bool has_window() const { return window_left >= 0 || window_right >= 0; }
};

struct BackwardProblem {
  ForwardProblem fwd;  // q, k, v, out, lse (required here), options (deterministic too)
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  Strides dout_stride, dq_stride, dk_stride, dv_stride;
  // fp32 (heads_q), contiguous: the gradient of fwd.sinks (overwritten); null = not wanted.
  // Only set when fwd.sinks is.
  float* dsinks = nullptr;
  // D = rowsum(dO∘O), given (hfa_options.softmax_d); null: the backend computes it. Element
  // (b, h, i) at b·batch_stride + h·head_stride + i, as fwd.lse's (varlen: batch stride 0 and
  // i from cu_seqlens_q[b]). Given, fwd.out is not read.
  const float* softmax_d = nullptr;
  int64_t softmax_d_batch_stride = 0;
  int64_t softmax_d_head_stride = 0;
};

}  // namespace hfa::detail
