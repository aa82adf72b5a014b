// The one dispatch table between the API layer and the backends.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/kvcache_problem.hpp"
#include "common/merge_partials.hpp"
#include "common/problem.hpp"
#include "common/quantize_problem.hpp"

namespace hfa::detail {

struct Backend {
  const char* name;
  Status (*forward)(const ForwardProblem&);
  Status (*forward_workspace_size)(const ForwardProblem&, std::size_t* bytes);
  Status (*backward)(const BackwardProblem&);
  Status (*backward_workspace_size)(const BackwardProblem&, std::size_t* bytes);
};

// The CPU backend: always built (src/cpu).
const Backend& cpu_backend();

// The KV-cache forward of the CPU backend (src/cpu/kvcache.cpp), which needs no workspace.
Status cpu_forward_kvcache(const KVCacheProblem& problem);

// The KV-cache forward on a Hopper GPU (src/sm90/decode) and the workspace it needs (the split
// partials). Kept beside the Backend table, whose sm90 entry is another kernel family's file.
Status sm90_forward_kvcache(const KVCacheProblem& problem);
Status sm90_kvcache_workspace_size(const KVCacheProblem& problem, std::size_t* bytes);

// hfa_quantize_kv / hfa_dequantize_kv on the CPU (src/cpu/quantize.cpp) and on a Hopper GPU
// (src/sm90/decode/quantize.cu).
Status cpu_quantize_kv(const QuantizeProblem& problem);
Status sm90_quantize_kv(const QuantizeProblem& problem);
// hfa_quantize_fp8 on the CPU (src/cpu/quantize_fp8.cpp) and on a Hopper GPU
// (src/sm90/quantize_fp8.cu), and hfa_hadamard_signs' GPU fill (count fp32 signs at `signs`).
Status cpu_quantize_fp8(const Fp8QuantizeProblem& problem);
Status sm90_quantize_fp8(const Fp8QuantizeProblem& problem);
Status sm90_hadamard_signs(uint64_t seed, float* signs, int64_t count, Device device,
                           void* stream);
// hfa_merge_partials on the CPU (src/cpu/merge_partials.cpp) and on a Hopper GPU
// (src/sm90/merge_partials.cu).
Status cpu_merge_partials(const MergePartialsProblem& problem);
Status sm90_merge_partials(const MergePartialsProblem& problem);

// The Hopper backend (src/sm90); null when this build has no CUDA.
const Backend* sm90_backend();

}  // namespace hfa::detail
