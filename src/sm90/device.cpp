#include "sm90/device.hpp"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hfa::sm90 {

const DeviceFacts& device_facts(int device) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<DeviceFacts>> cache;
  std::lock_guard lock(mutex);
  if (device >= int(cache.size())) cache.resize(device + 1);
  if (!cache[device]) {
    auto facts = std::make_unique<DeviceFacts>();
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
      facts->status = {Code::cuda, "sm90: cannot query device " + std::to_string(device) + ": " +
                                       cudaGetErrorString(cudaGetLastError())};
    } else if (prop.major != 9 || prop.minor != 0) {
      facts->status = {Code::not_supported,
                       std::string("sm90: device ") + prop.name + " is sm_" +
                           std::to_string(prop.major * 10 + prop.minor) +
                           "; these kernels need a Hopper GPU (sm_90)"};
    } else {
      facts->sm_count = prop.multiProcessorCount;
      facts->l2_bytes = std::size_t(prop.l2CacheSize);
    }
    cache[device] = std::move(facts);
  }
  return *cache[device];
}

Status usable_sms(const DeviceFacts& facts, int32_t sm_margin, int device, const char* family,
                  int* sms) {
  *sms = facts.sm_count - sm_margin;
  if (*sms >= 1) return Status::ok();
  return {Code::invalid_argument,
          "sm_margin: " + std::to_string(sm_margin) + " leaves no SM of the " +
              std::to_string(facts.sm_count) + " of cuda:" + std::to_string(device) + " to the " +
              family + " (expected 0 <= sm_margin < " + std::to_string(facts.sm_count) + ")"};
}

void* lookup_driver_function(const char* name, int version) {
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &entry, version, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return entry;
}

namespace {

// Whether the calling thread has a CUDA context current; not knowing counts as no.
bool has_current_context() {
  static std::atomic<PFN_cuCtxGetCurrent_v4000> cached{nullptr};
  const auto get_current = driver_function(cached, "cuCtxGetCurrent", 4000);
  CUcontext context = nullptr;
  return get_current != nullptr && get_current(&context) == CUDA_SUCCESS && context != nullptr;
}

}  // namespace

DeviceGuard::DeviceGuard(int device) {
  cudaGetDevice(&previous_);
  switched_ = previous_ != device;
  // A thread that has made no CUDA call yet answers device 0 with no context current, and the
  // driver calls that follow (TMA maps) would fail with CUDA_ERROR_INVALID_CONTEXT: there
  // cudaSetDevice makes the primary context current. A context the caller made current (theirs,
  // perhaps not the primary one) is left in place.
  if (switched_ || !has_current_context()) cudaSetDevice(device);
}

DeviceGuard::~DeviceGuard() {
  if (switched_) cudaSetDevice(previous_);
}

}  // namespace hfa::sm90
