// How the tool names the machine it runs on.
#include <string>

#include "commands.hpp"
#include "cpu/kernels.hpp"
#include "cpu/thread_pool.hpp"

#ifdef HFA_WITH_SM90
#include <cuda_runtime.h>
#endif

namespace hfa::tool {

std::string describe_device(const Device& device) {
  if (device.kind == DeviceKind::cpu) {
    return std::string("cpu (") + cpu::active_kernels().isa + ", " +
           std::to_string(cpu::ThreadPool::shared().thread_count()) + " threads)";
  }
  std::string name = "cuda:" + std::to_string(device.index);
#ifdef HFA_WITH_SM90
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, device.index) == cudaSuccess) {
    name += std::string(" (") + properties.name + ", " +
            std::to_string(properties.multiProcessorCount) + " SMs, sm_" +
            std::to_string(properties.major) + std::to_string(properties.minor) + ", " +
            std::to_string(properties.totalGlobalMem >> 30) + " GiB)";
  }
#endif
  return name;
}

}  // namespace hfa::tool
