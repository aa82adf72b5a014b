// The one dispatch table between the API layer and the backends.
#pragma once

#include <cstddef>

#include "common/kvcache_problem.hpp"
#include "common/problem.hpp"

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

// The KV-cache forward of the CPU backend (src/cpu/kvcache.cpp). Not in the table yet: only
// the CPU has one, so the API calls it directly and answers not_supported for CUDA tensors; it
// joins the Backend struct when a GPU kernel does.
Status cpu_forward_kvcache(const KVCacheProblem& problem);

// The Hopper backend (src/sm90); null when this build has no CUDA.
const Backend* sm90_backend();

}  // namespace hfa::detail
