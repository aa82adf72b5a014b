// What every GPU test needs: a loud skip without a Hopper GPU, checked CUDA calls, and device
// buffers that free themselves (empty, or copies of host data).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "common/host_tensor.hpp"

namespace hfa::test {

// Empty when device 0 is a Hopper (sm_90) GPU; otherwise why the GPU tests are skipped.
inline std::string hopper_unavailable() {
  int count = 0;
  if (cudaError_t error = cudaGetDeviceCount(&count); error != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device (") + cudaGetErrorString(error) + ")";
  }
  if (count == 0) return "no CUDA device";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "cannot query CUDA device 0";
  if (prop.major != 9 || prop.minor != 0) return std::string(prop.name) + " is not sm_90";
  return {};
}

// Device 0's SMs (0 without a device: a Hopper test has skipped before asking).
inline int sm_count() {
  int count = 0;
  cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, 0);
  return count;
}

#define HFA_REQUIRE_HOPPER()                                                              \
  do {                                                                                    \
    if (const std::string why = ::hfa::test::hopper_unavailable(); !why.empty()) {       \
      GTEST_SKIP() << "skipped, needs a Hopper GPU: " << why;                            \
    }                                                                                     \
  } while (0)

// A failing call ends the test (ASSERT): use it in TEST bodies and void helpers only.
#define HFA_CUDA_OK(call)                                                                 \
  do {                                                                                    \
    const cudaError_t hfa_error_ = (call);                                                \
    ASSERT_EQ(hfa_error_, cudaSuccess) << #call << ": " << cudaGetErrorString(hfa_error_); \
  } while (0)

class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&data_, bytes > 0 ? bytes : 1) != cudaSuccess) data_ = nullptr;
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return data_; }
  std::size_t bytes() const { return bytes_; }

  template <typename T>
  cudaError_t upload(const std::vector<T>& host) {
    return cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  template <typename T>
  cudaError_t download(std::vector<T>& host) const {
    return cudaMemcpy(host.data(), data_, host.size() * sizeof(T), cudaMemcpyDeviceToHost);
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
};

// A device copy of host bytes (empty host data: no buffer, null pointer).
class DeviceCopy {
 public:
  DeviceCopy(const void* host, std::size_t bytes) : buffer_(bytes) {
    if (bytes > 0) copied_ = cudaMemcpy(buffer_.get(), host, bytes, cudaMemcpyHostToDevice);
    data_ = bytes > 0 ? buffer_.get() : nullptr;
  }
  explicit DeviceCopy(const HostTensor& t) : DeviceCopy(t.data(), t.storage_bytes()) {}
  template <typename T>
  explicit DeviceCopy(const std::vector<T>& v) : DeviceCopy(v.data(), v.size() * sizeof(T)) {}

  template <typename T>
  T* get() const { return static_cast<T*>(data_); }
  cudaError_t status() const { return copied_; }

 private:
  DeviceBuffer buffer_;
  void* data_ = nullptr;
  cudaError_t copied_ = cudaSuccess;
};

}  // namespace hfa::test
