// The one dispatch table between the API layer and the backends.
#pragma once

#include <cstddef>

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

// The Hopper backend (src/sm90); null when this build has no CUDA.
const Backend* sm90_backend();

}  // namespace hfa::detail
