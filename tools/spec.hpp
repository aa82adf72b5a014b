// One attention problem as the tool describes it: shape, dtype, mask, device. Shared by `run`
// and `bench`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "args.hpp"
#include "block_mask.hpp"
#include "hfa/hfa.hpp"

namespace hfa::tool {

struct Spec {
  int64_t batch = 2;
  int64_t heads = 8;
  int64_t kv_heads = 8;
  int64_t seqlen_q = 1024;
  int64_t seqlen_k = 1024;
  int64_t hdim = 128;
  int64_t hdim_v = 128;
  DType dtype = DType::bf16;
  // out's dtype: the inputs', or bf16 after FP8 (e4m3) inputs.
  DType out_dtype() const { return dtype == DType::e4m3 ? DType::bf16 : dtype; }
  bool causal = false;
  int32_t window_left = -1;
  int32_t window_right = -1;
  float softcap = 0.0f;
  bool sinks = false;  // random attention sinks, one logit per query head
  int32_t sm_margin = 0;  // SMs left free (hfa_options.sm_margin); the CPU ignores it
  // The options' other rows, from the flags made of them (option_flags.hpp); options() sets
  // the fields above over these.
  Options rows;
  // Varlen (--varlen): the query and key lengths of each sequence, packed one after the other
  // (batch = their count). Empty: every sequence has seqlen_q queries and seqlen_k keys.
  // Set apart: the lse of packed queries is (heads, total_q), of fixed ones (batch, heads, seqlen_q).
  std::vector<int64_t> varlen_q, varlen_k;
  // --block-mask: block-sparse attention over a mask the tool builds, in blocks of
  // rows.sparse_block_q x rows.sparse_block_kv; over each sequence, or the packed tokens with
  // varlen (mask_origin).
  BlockMaskPattern block_mask;
  Device device;

  // Sequence b's lengths and the position of its first row among all rows (packed or not).
  int64_t seqlen_q_of(int64_t b) const { return varlen_q.empty() ? seqlen_q : varlen_q[b]; }
  int64_t seqlen_k_of(int64_t b) const { return varlen_k.empty() ? seqlen_k : varlen_k[b]; }
  int64_t start_q(int64_t b) const;
  int64_t start_k(int64_t b) const;
  int64_t total_q() const { return start_q(batch); }
  int64_t total_k() const { return start_k(batch); }
  // Where sequence b's row 0 and key 0 sit in the block mask: (0, 0) at fixed length, its
  // first packed token and key with varlen (the library's layouts, hfa/options.def).
  int64_t mask_row(int64_t b) const { return varlen_q.empty() ? 0 : start_q(b); }
  int64_t mask_key(int64_t b) const { return varlen_k.empty() ? 0 : start_k(b); }
  // The keys of sequence b that its row i sees under the block mask (all without one).
  KeyRange mask_keys(int64_t b, int64_t i) const;

  float softmax_scale() const;  // rows.softmax_scale, else the default 1/sqrt(hdim)
  Options options() const;
  std::string describe() const;
};

// Reads --device (cpu, cuda, auto: cuda when a GPU is there) into a Device; errors name the
// flag when cuda is asked for and cannot be used.
Device parse_device(Args& args);

// Reads the shape and mask flags of `run` over the defaults in `spec`, --varlen included.
void parse_spec(Args& args, Spec* spec);

DType parse_dtype(const std::string& text);

// The (query, key) pairs inside the mask of one (batch, head): causal and the window
// bottom-right aligned as the library's (causal = window_right 0), and the block mask's keys of
// each row when given (row_keys, in the sequence's coordinates); rows that see no key count 0.
int64_t visible_pairs(int64_t seqlen_q, int64_t seqlen_k, bool causal, int32_t window_left,
                      int32_t window_right, const RowKeys& row_keys = nullptr);

// FLOPs of one forward (design §5, FlashAttention's formula): 2·(d + d_v) per (query, key) pair
// the mask lets through, per (batch, head): s_q·s_k without a mask, about half with causal at
// s_q = s_k, about s_q·(L + R + 1) with a window (L, R), the pairs a block mask lets through
// with one; varlen sums its sequences. The backward is 2.5 times the forward.
double forward_flops(const Spec& spec);
inline double backward_flops(const Spec& spec) { return 2.5 * forward_flops(spec); }

}  // namespace hfa::tool
