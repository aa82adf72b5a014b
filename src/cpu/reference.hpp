// The oracle: plain attention in float64, no tiling, no tricks, written to be read. Every test
// compares against it. Inputs are host memory as described by the problem (its dtype and
// element strides; cu_seqlens, if any, are host int32 arrays).
#pragma once

#include "common/kvcache_problem.hpp"
#include "common/problem.hpp"

namespace hfa::cpu {

// out: contiguous (batch, seqlen_q, heads_q, hdim_v), varlen (total_q, heads_q, hdim_v).
// lse (may be null): natural log, contiguous (batch, heads_q, seqlen_q), varlen (heads_q, total_q).
// A row that sees no key gets out = 0 and lse = −inf (the sink's logit with p.sinks). Rows
// beyond seqused_q are not written. p.out and p.lse are not touched.
void reference_forward(const detail::ForwardProblem& p, double* out, double* lse);

// Gradients of the forward, recomputed from q, k, v and dout alone (p.fwd.out and p.fwd.lse are
// not read). dq, dk, dv are contiguous and shaped like q, k, v; with GQA, dk and dv are summed
// over the query heads of each group. Rows beyond seqused_q/k get 0. dsinks (heads_q; may be
// null, ignored without p.fwd.sinks) gets the sinks' gradient; p.dsinks is not touched.
void reference_backward(const detail::BackwardProblem& p, double* dq, double* dk, double* dv,
                        double* dsinks = nullptr);

// The same plain algorithm in float32 (scores, softmax and products in fp32, like the "math"
// attention of the frameworks): the peer that sets the error bound of docs/design.md §6. Its
// backward takes D = rowsum(dO∘O) from out rounded to out's dtype, as FlashAttention-style
// backwards (which are given the stored out) do. With round_probabilities, the probabilities
// are rounded to the input dtype before P·V, as a 16-bit tensor-core kernel feeds them (the
// peer of the GPU kernels); in the backward, round_operands rounds P and dS to the input dtype
// before they multiply dO, Q and K, as the GPU backward feeds its tensor cores, and takes D
// from the out the problem gives (p.fwd.out, as the backward under test does).
// round_probabilities rounds them to the input dtype; ProbabilityRounding::e4m3 instead as the
// FP8 forward feeds its tensor cores: scaled so that the row's largest is 2^8 (the kernels' max
// offset), rounded to e4m3, scaled back (p.dtype is then the f32 of the dequantized inputs),
// and, as the FP8 forward sums the rounded probabilities, renormalized by their sum, which the
// LSE takes in.
enum class ProbabilityRounding { none, input_dtype, e4m3 };
void reference_forward_f32(const detail::ForwardProblem& p, float* out, float* lse,
                           ProbabilityRounding rounding);
inline void reference_forward_f32(const detail::ForwardProblem& p, float* out, float* lse,
                                  bool round_probabilities = false) {
  reference_forward_f32(p, out, lse,
                        round_probabilities ? ProbabilityRounding::input_dtype : ProbabilityRounding::none);
}
void reference_backward_f32(const detail::BackwardProblem& p, float* dq, float* dk, float* dv,
                            float* dsinks = nullptr, bool round_operands = false);

// The KV-cache forward in float64: each sequence's first cache_seqlens[b] cache rows, read
// through the block table and dequantized with the same codecs as the backend (the fp32 values
// they decode to are exact in float64), then plain attention with seqlen_k = cache_seqlens[b].
// Query i of sequence b sees key j iff bottom-right aligned with that sequence's own row count.
// out: contiguous (batch, seqlen_q, heads_q, hdim_v), or (total_q, heads_q, hdim_v) for varlen
// queries; lse (may be null): contiguous (batch, heads_q, seqlen_q), or (heads_q, total_q). A row
// that sees no key gets out = 0 and lse = −inf. p.out and p.lse are not touched.
void reference_forward_kvcache(const detail::KVCacheProblem& p, double* out, double* lse);

}  // namespace hfa::cpu
