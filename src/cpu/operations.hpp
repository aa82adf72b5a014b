// The CPU backend's operations beside the attention, each in a file of its own; backend.cpp puts
// them in the dispatch table. Host memory; every problem is validated.
#pragma once

#include "common/merge_partials.hpp"
#include "common/quantize_problem.hpp"

namespace hfa::cpu {

// hfa_quantize_kv / hfa_dequantize_kv, row by row (quantize.cpp).
Status quantize_kv(const detail::QuantizeProblem& problem);

// hfa_quantize_fp8, and the signs of its rotation (quantize_fp8.cpp).
Status quantize_fp8(const detail::Fp8QuantizeProblem& problem);
Status hadamard_signs(const detail::HadamardSignsProblem& problem);

// hfa_merge_partials (merge_partials.cpp).
Status merge_partials(const detail::MergePartialsProblem& problem);

}  // namespace hfa::cpu
