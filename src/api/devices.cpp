#include "api/devices.hpp"

#include "common/errors.hpp"
#include "common/backend.hpp"

#ifdef HFA_WITH_SM90
#include <cuda_runtime.h>
#endif

namespace hfa {

namespace {

int32_t query_cuda_device_count() {
#ifdef HFA_WITH_SM90
  int count = 0;
  // Without a GPU the runtime reports "driver insufficient" or "no device" depending on the
  // machine; any failure means there is nothing we can run on. Clear the sticky error so the
  // caller's next CUDA call does not see ours.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

}  // namespace

int32_t cuda_device_count() {
  // Asked once: the set of visible devices is fixed when the CUDA runtime initialises, and
  // validation calls this on every CUDA call.
  static const int32_t count = query_cuda_device_count();
  return count;
}

namespace detail {

std::string device_name(const Tensor& t) {
  if (t.device == HFA_CPU) return "cpu";
  if (t.device == HFA_CUDA) return cat("cuda:", t.device_index);
  return cat("device kind ", static_cast<int>(t.device));
}

bool same_device(const Tensor& a, const Tensor& b) {
  if (a.device != b.device) return false;
  return a.device == HFA_CPU || a.device_index == b.device_index;
}

Status check_device_usable(const char* name, const Tensor& t) {
  if (t.device == HFA_CPU) return Status::ok();
  if (sm90_backend() == nullptr)
    return not_supported(name, ": on ", device_name(t), ", but this build has no CUDA backend");
  const int32_t count = cuda_device_count();
  if (count == 0)
    return not_supported(name, ": on ", device_name(t), ", but no CUDA device is available");
  if (t.device_index < 0 || t.device_index >= count)
    return invalid(name, "on ", device_name(t), ", but this process sees ", count,
                   count == 1 ? " CUDA device" : " CUDA devices");
  return Status::ok();
}

}  // namespace detail
}  // namespace hfa
