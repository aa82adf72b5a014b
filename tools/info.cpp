// `hfa info`: what this build is and what it can run on.
#include <cstdio>

#include "commands.hpp"
#include "common/backend.hpp"

namespace hfa::tool {

namespace {
constexpr const char* kUsage = R"(Usage: hfa info

Prints the version, the devices found, and the backends this build has.
)";
}  // namespace

int info_command(Args& args) {
  if (args.wants_help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  args.finish();

  std::printf("hfa version %s\n", hfa_version());
  std::printf("backends:\n");
  std::printf("  %-6s %s\n", detail::cpu_backend().name, describe_device(Device::cpu()).c_str());
  const detail::Backend* sm90 = detail::sm90_backend();
  if (sm90 != nullptr)
    std::printf("  %-6s Hopper kernels (sm_90a)\n", sm90->name);
  else
    std::printf("  sm90   not in this build (configured without CUDA)\n");

  const int32_t count = cuda_device_count();
  std::printf("CUDA devices: %d%s\n", count,
              sm90 != nullptr && count == 0 ? " (no usable GPU or driver found)" : "");
  for (int32_t i = 0; i < count; ++i)
    std::printf("  %s\n", describe_device(Device::cuda(i)).c_str());
  return 0;
}

}  // namespace hfa::tool
