// The sm90 backend's operations beside the attention's forward and backward, each defined beside
// its kernels; backend.cpp puts them in the dispatch table.
#pragma once

#include <cstddef>

#include "common/kvcache_problem.hpp"
#include "common/merge_partials.hpp"
#include "common/quantize_problem.hpp"

namespace hfa::sm90 {

// hfa_forward_kvcache and its workspace (decode/entry.cpp).
Status forward_kvcache(const detail::KVCacheProblem& problem);
Status forward_kvcache_workspace_size(const detail::KVCacheProblem& problem, std::size_t* bytes);

// hfa_quantize_kv / hfa_dequantize_kv (decode/quantize.cu).
Status quantize_kv(const detail::QuantizeProblem& problem);

// hfa_quantize_fp8, and the signs of its rotation (quantize_fp8.cu).
Status quantize_fp8(const detail::Fp8QuantizeProblem& problem);
Status hadamard_signs(const detail::HadamardSignsProblem& problem);

// hfa_merge_partials (merge_partials.cu).
Status merge_partials(const detail::MergePartialsProblem& problem);

}  // namespace hfa::sm90
