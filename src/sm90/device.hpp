// What the Hopper kernels need to know of a device, read once per device (a hot-path call
// makes no attribute queries), and a guard that runs a call on the device of its tensors.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "hfa/hfa.hpp"

namespace hfa::sm90 {

struct DeviceFacts {
  Status status;  // not ok: no usable Hopper GPU at this index, and why
  int sm_count = 0;
  std::size_t l2_bytes = 0;
};

const DeviceFacts& device_facts(int device);

// The SMs a launch may use once `sm_margin` are left free for other kernels (hfa_options'
// sm_margin, >= 0 by the API's check): at least one, else an invalid argument naming sm_margin
// and the device's SM count. `family` names the caller in the message.
Status usable_sms(const DeviceFacts& facts, int32_t sm_margin, int device, const char* family,
                  int* sms);

// A driver API function by name and ABI version (libhfa does not link libcuda), or null when the
// driver lacks it. driver_function caches it in the caller's static after the first lookup that
// finds it (a failed lookup is retried on the next call).
void* lookup_driver_function(const char* name, int version);

template <typename Function>
Function driver_function(std::atomic<Function>& cached, const char* name, int version) {
  if (Function function = cached.load(std::memory_order_acquire)) return function;
  auto function = reinterpret_cast<Function>(lookup_driver_function(name, version));
  if (function != nullptr) cached.store(function, std::memory_order_release);
  return function;
}

// Makes `device` current for its lifetime and restores the caller's current device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;  // restored only if changed: each cudaSetDevice is host time
};

}  // namespace hfa::sm90
