// Appending new tokens to a KV cache before the attention (k_new / v_new), with the rotary
// embedding of the new keys and of the queries, on the CPU. The GPU append
// (sm90/decode/append_kernel.cuh) writes the same bytes through the same shared pieces:
// common/rotary.hpp, common/half_float.hpp and the codecs of src/quant.
#pragma once

#include <cstdint>

#include "common/kvcache_problem.hpp"

namespace hfa::cpu {

// Rotates row[0, rotary_dim) by the angles of `position` (interleaved pairs (2j, 2j+1) or halves
// (j, j + rotary_dim / 2)); the rest of the row is left as it is.
void apply_rotary(const detail::KVCacheProblem& p, int64_t position, float* row);

// The position query row i of sequence b rotates by: cache_seqlens[b] + i when causal or
// windowed, else cache_seqlens[b] (FlashAttention's rule: without a mask every query is "now").
int64_t query_position(const detail::KVCacheProblem& p, int64_t b, int64_t i);

// Writes sequence b's new tokens i < new_tokens(b) of k_new (rotated) and v_new (none for MLA's
// one latent cache) at positions cache_seqlens[b] + i, encoded in the cache's format. p is
// validated (the positions are inside the cache).
void append_new_tokens(const detail::KVCacheProblem& p);

}  // namespace hfa::cpu
