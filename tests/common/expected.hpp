// What a case should produce: the float64 oracle (src/cpu/reference) and the float32 peer that
// sets the tolerance (docs/design.md §6), both on the case's rounded inputs, in the logical
// order of the output tensors (HostTensor::values()).
//
// The peer is the same plain algorithm in float32 with its results rounded to the output dtype:
// what a framework's "math" attention gives for 16-bit inputs (fp32 compute, 16-bit results).
// So a 16-bit result may err by about its own rounding, and an f32 one by fp32 arithmetic.
#pragma once

#include <cmath>
#include <vector>

#include "attention_case.hpp"
#include "cpu/reference.hpp"

namespace hfa::test {

struct ForwardExpectation {
  std::vector<double> out_ref, lse_ref;    // float64 oracle
  std::vector<double> out_peer, lse_peer;  // float32 peer, out rounded to the output dtype
  double lse_floor = 1e-5;  // the bound's absolute term (FP8 widens it: test_forward_fp8.cpp)
};

struct BackwardExpectation {
  std::vector<double> dq_ref, dk_ref, dv_ref, dsinks_ref;  // dsinks: empty without sinks
  std::vector<double> dq_peer, dk_peer, dv_peer;  // rounded to the input dtype
  std::vector<double> dsinks_peer;                // fp32, like the result
};

inline std::vector<double> rounded(DType dtype, const std::vector<float>& values) {
  std::vector<double> result(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) result[i] = round_to(dtype, values[i]);
  return result;
}

// Of problem p over the case's buffers (the case's own, or it with more set: a block-sparse
// mask). rounding: how the peer rounds P before P·V (the GPU kernels' peer: to the input dtype,
// or as the FP8 forward does).
inline ForwardExpectation expected_forward(AttentionData& data, const detail::ForwardProblem& p,
                                           cpu::ProbabilityRounding rounding) {
  ForwardExpectation e;
  e.out_ref.resize(static_cast<std::size_t>(data.out.numel()));
  e.lse_ref.resize(static_cast<std::size_t>(data.lse.numel()));
  cpu::reference_forward(p, e.out_ref.data(), e.lse_ref.data());
  std::vector<float> out(e.out_ref.size()), lse(e.lse_ref.size());
  cpu::reference_forward_f32(p, out.data(), lse.data(), rounding);
  e.out_peer = rounded(p.out_dtype, out);
  e.lse_peer = rounded(DType::f32, lse);
  return e;
}
// Of the case's problem.
inline ForwardExpectation expected_forward(AttentionData& data, cpu::ProbabilityRounding rounding) {
  return expected_forward(data, data.forward_problem(), rounding);
}
// round_probabilities: the peer rounds P to the input dtype (the 16-bit GPU kernels' peer).
inline ForwardExpectation expected_forward(AttentionData& data, bool round_probabilities = false) {
  return expected_forward(data, round_probabilities ? cpu::ProbabilityRounding::input_dtype
                                                    : cpu::ProbabilityRounding::none);
}

// Of problem p over the case's buffers (the case's own, or it with more set: a block-sparse
// mask). round_operands: the peer rounds P and dS to the input dtype before the gradient GEMMs
// (the GPU kernels' peer).
inline BackwardExpectation expected_backward(AttentionData& data, const detail::BackwardProblem& p,
                                             bool round_operands) {
  BackwardExpectation e;
  e.dq_ref.resize(static_cast<std::size_t>(data.dq.numel()));
  e.dk_ref.resize(static_cast<std::size_t>(data.dk.numel()));
  e.dv_ref.resize(static_cast<std::size_t>(data.dv.numel()));
  const bool sinks = p.fwd.sinks != nullptr;
  e.dsinks_ref.resize(sinks ? static_cast<std::size_t>(p.fwd.heads_q) : 0);
  cpu::reference_backward(p, e.dq_ref.data(), e.dk_ref.data(), e.dv_ref.data(),
                          sinks ? e.dsinks_ref.data() : nullptr);
  std::vector<float> dq(e.dq_ref.size()), dk(e.dk_ref.size()), dv(e.dv_ref.size());
  std::vector<float> dsinks(e.dsinks_ref.size());
  cpu::reference_backward_f32(p, dq.data(), dk.data(), dv.data(), sinks ? dsinks.data() : nullptr,
                              round_operands);
  e.dq_peer = rounded(p.fwd.dtype, dq);
  e.dk_peer = rounded(p.fwd.dtype, dk);
  e.dv_peer = rounded(p.fwd.dtype, dv);
  e.dsinks_peer = rounded(DType::f32, dsinks);
  return e;
}
// Of the case's problem.
inline BackwardExpectation expected_backward(AttentionData& data, bool round_operands = false) {
  return expected_backward(data, data.backward_problem(), round_operands);
}

// Indices (into the logical order of out, or of lse with `lse`) of the rows beyond seqused_q:
// the forward must leave them as they were.
inline std::vector<std::size_t> unused_row_elements(const AttentionData& data, int hdim, bool lse) {
  const AttentionCase& c = data.spec();
  const std::vector<bool> used = data.used_tokens(true);
  std::vector<std::size_t> indices;
  if (!lse) {
    for (std::size_t index = 0; index < used.size() * c.heads_q * hdim; ++index) {
      if (!used[index / (static_cast<std::size_t>(c.heads_q) * hdim)]) indices.push_back(index);
    }
    return indices;
  }
  const int64_t total = data.total_q();
  for (int64_t index = 0; index < total * c.heads_q; ++index) {
    // lse is (heads, total_q) for varlen, else (batch, heads, seqlen_q).
    const int64_t token = c.is_varlen() ? index % total
                                        : index / (int64_t{c.heads_q} * c.seqlen_q) * c.seqlen_q +
                                              index % c.seqlen_q;
    if (!used[token]) indices.push_back(static_cast<std::size_t>(index));
  }
  return indices;
}

// Indices of the gradient rows (dq with queries, else dk/dv) beyond seqused: they must be 0.
inline std::vector<std::size_t> unused_gradient_elements(const AttentionData& data, bool queries,
                                                         int heads, int hdim) {
  const std::vector<bool> used = data.used_tokens(queries);
  std::vector<std::size_t> indices;
  const std::size_t per_token = static_cast<std::size_t>(heads) * hdim;
  for (std::size_t index = 0; index < used.size() * per_token; ++index) {
    if (!used[index / per_token]) indices.push_back(index);
  }
  return indices;
}

// `values` with the given elements set to 0 (to compare the rest against the reference).
inline std::vector<double> zeroed(std::vector<double> values,
                                  const std::vector<std::size_t>& indices) {
  for (std::size_t i : indices) values.at(i) = 0.0;
  return values;
}

// Indices (into out's logical order) of the outputs of rows that see no key, found from the
// reference LSE (−inf): those must be exactly 0, and so must their dq.
inline std::vector<std::size_t> empty_row_elements(const AttentionData& data,
                                                   const std::vector<double>& lse_ref, int hdim) {
  const AttentionCase& c = data.spec();
  std::vector<std::size_t> indices;
  for (std::size_t index = 0; index < lse_ref.size(); ++index) {
    if (!(std::isinf(lse_ref[index]) && lse_ref[index] < 0)) continue;
    // lse is (batch, heads, seqlen_q), or (heads, total_q) for varlen; out is
    // (batch, seqlen_q, heads, hdim), or (total_q, heads, hdim).
    int64_t token, head;
    if (c.is_varlen()) {
      head = static_cast<int64_t>(index) / data.total_q();
      token = static_cast<int64_t>(index) % data.total_q();
    } else {
      const int64_t i = static_cast<int64_t>(index) % c.seqlen_q;
      head = static_cast<int64_t>(index) / c.seqlen_q % c.heads_q;
      token = static_cast<int64_t>(index) / (int64_t{c.seqlen_q} * c.heads_q) * c.seqlen_q + i;
    }
    for (int d = 0; d < hdim; ++d) {
      indices.push_back(static_cast<std::size_t>((token * c.heads_q + head) * hdim + d));
    }
  }
  return indices;
}

}  // namespace hfa::test
