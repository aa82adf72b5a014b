#include "timer.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "memory.hpp"

#ifdef HFA_WITH_SM90
#include <cuda_runtime.h>
#endif

namespace hfa::tool {
namespace {

// Milliseconds of one call, measured where the work runs.
double time_one(Device device, const std::function<Status()>& call, Status* status) {
#ifdef HFA_WITH_SM90
  if (device.kind == DeviceKind::cuda) {
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start);  // the legacy default stream, where the tool's calls run
    *status = call();
    cudaEventRecord(stop);
    const cudaError_t error = cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    if (error != cudaSuccess && status->is_ok())
      *status = Status(Code::cuda, std::string("kernel failed: ") + cudaGetErrorString(error));
    return ms;
  }
#endif
  const auto start = std::chrono::steady_clock::now();
  *status = call();
  synchronize(device);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Timing time_calls(Device device, int warmup, int iterations, const std::function<Status()>& call,
                  Status* status) {
  for (int i = 0; i < warmup; ++i) {
    time_one(device, call, status);
    if (!status->is_ok()) return {};
  }
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) {
    ms.push_back(time_one(device, call, status));
    if (!status->is_ok()) return {};
  }
  if (ms.empty()) return {};
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), iterations};
}

}  // namespace hfa::tool
