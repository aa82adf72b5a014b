// Buffers for the tool: host arrays in a given dtype (filled with random normals, read back as
// floats) and raw memory on the run's device (host memory, or cudaMalloc on a GPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "hfa/hfa.hpp"

namespace hfa::tool {

// Elements in a dtype, stored as raw bytes on the host.
class HostArray {
 public:
  HostArray() = default;
  HostArray(DType dtype, int64_t count);

  DType dtype() const { return dtype_; }
  int64_t size() const { return count_; }
  std::size_t bytes() const { return bytes_.size(); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }

  float get(int64_t i) const;
  void set(int64_t i, float value);
  void fill_normal(std::mt19937_64& rng);

 private:
  DType dtype_ = DType::f32;
  int64_t count_ = 0;
  std::vector<std::byte> bytes_;
};

// Bytes on a device; CPU memory when the device is the CPU.
class DeviceMemory {
 public:
  DeviceMemory(Device device, std::size_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* data() { return data_; }
  void upload(const HostArray& host);
  void download(HostArray* host) const;
  void fill_byte(unsigned char value);  // poison outputs before a run

 private:
  Device device_;
  std::size_t bytes_ = 0;
  void* data_ = nullptr;
};

// Block until the device has finished the work queued so far (a no-op on the CPU).
void synchronize(Device device);

}  // namespace hfa::tool
