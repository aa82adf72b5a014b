// Times repeated hfa calls on the run's device: wall clock on the CPU, CUDA events on a GPU.
#pragma once

#include <functional>

#include "hfa/hfa.hpp"

namespace hfa::tool {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  int iterations = 0;
};

// Runs `call` `warmup` times untimed, then `iterations` times timed, one at a time; stops at
// the first failed Status and returns it in *status.
Timing time_calls(Device device, int warmup, int iterations, const std::function<Status()>& call,
                  Status* status);

}  // namespace hfa::tool
