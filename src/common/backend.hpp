// The one dispatch table between the API layer and the backends: every operation a call can
// reach, each taking the problem the API built and validated. A backend fills what it has; an
// entry left null is an operation it lacks, which dispatch answers with not_supported (a
// workspace query: no workspace). No backend calls back into the API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/kvcache_problem.hpp"
#include "common/merge_partials.hpp"
#include "common/problem.hpp"
#include "common/quantize_problem.hpp"

namespace hfa::detail {

// Device memory read back into host memory: `rows` rows of `row_bytes` each, `device_pitch`
// bytes apart on the device (rows > 1), packed on the host. `name` is the argument it holds, for
// a message.
struct HostRead {
  const char* name = "";
  void* host = nullptr;
  const void* device = nullptr;
  std::size_t row_bytes = 0;
  std::size_t rows = 1;
  std::size_t device_pitch = 0;
};

struct Backend {
  const char* name;

  // Attention: hfa_forward, hfa_backward and hfa_forward_kvcache, each with the query of the
  // workspace it takes.
  Status (*forward)(const ForwardProblem&);
  Status (*forward_workspace_size)(const ForwardProblem&, std::size_t* bytes);
  Status (*backward)(const BackwardProblem&);
  Status (*backward_workspace_size)(const BackwardProblem&, std::size_t* bytes);
  Status (*forward_kvcache)(const KVCacheProblem&);
  Status (*forward_kvcache_workspace_size)(const KVCacheProblem&, std::size_t* bytes);

  // Quantizers: hfa_quantize_kv and hfa_dequantize_kv (one entry, problem.dequantize says which
  // way), hfa_quantize_fp8 and the signs of its rotation (hfa_hadamard_signs).
  Status (*quantize_kv)(const QuantizeProblem&);
  Status (*quantize_fp8)(const Fp8QuantizeProblem&);
  Status (*hadamard_signs)(const HadamardSignsProblem&);

  // hfa_merge_partials.
  Status (*merge_partials)(const MergePartialsProblem&);

  // Queues the reads on `stream` and waits for them (one synchronization): how the API checks
  // values that live in the device's memory (the KV-cache validation mode).
  Status (*read_to_host)(std::span<const HostRead> reads, Device device, void* stream);
};

// The CPU backend: always built (src/cpu).
const Backend& cpu_backend();

// The Hopper backend (src/sm90); null when this build has no CUDA.
const Backend* sm90_backend();

}  // namespace hfa::detail
