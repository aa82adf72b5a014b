#include "memory.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "common/half_float.hpp"
#include "quant/e4m3.hpp"

#ifdef HFA_WITH_SM90
#include <cuda_runtime.h>
#endif

namespace hfa::tool {

namespace {

// The error of an allocation that failed: its size and what to do about it (std::bad_alloc alone
// says neither).
[[noreturn]] void out_of_memory(const char* where, std::size_t bytes) {
  throw std::runtime_error(std::string("cannot allocate ") + std::to_string(bytes) + " bytes (" +
                           std::to_string(bytes >> 20) + " MiB) of " + where +
                           " memory for the run's tensors; hint: lower --batch, --heads or "
                           "--seqlen (q, k, v and out are held on the host, and on the GPU too "
                           "for a GPU run)");
}

}  // namespace

HostArray::HostArray(DType dtype, int64_t count) : dtype_(dtype), count_(count) {
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  try {
    bytes_.resize(bytes);
  } catch (const std::bad_alloc&) {
    out_of_memory("host", bytes);
  } catch (const std::length_error&) {
    out_of_memory("host", bytes);
  }
}

float HostArray::get(int64_t i) const {
  switch (dtype_) {
    case DType::f32: return reinterpret_cast<const float*>(bytes_.data())[i];
    case DType::f16: return detail::fp16_to_float(reinterpret_cast<const uint16_t*>(bytes_.data())[i]);
    case DType::bf16: return detail::bf16_to_float(reinterpret_cast<const uint16_t*>(bytes_.data())[i]);
    case DType::e4m3: return quant::e4m3_decode(reinterpret_cast<const uint8_t*>(bytes_.data())[i]);
    default: throw std::logic_error("HostArray: unsupported dtype");
  }
}

void HostArray::set(int64_t i, float value) {
  switch (dtype_) {
    case DType::f32: reinterpret_cast<float*>(bytes_.data())[i] = value; return;
    case DType::f16: reinterpret_cast<uint16_t*>(bytes_.data())[i] = detail::float_to_fp16(value); return;
    case DType::bf16: reinterpret_cast<uint16_t*>(bytes_.data())[i] = detail::float_to_bf16(value); return;
    case DType::e4m3: reinterpret_cast<uint8_t*>(bytes_.data())[i] = quant::e4m3_encode(value); return;
    default: throw std::logic_error("HostArray: unsupported dtype");
  }
}

void HostArray::fill_normal(std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < count_; ++i) set(i, normal(rng));
}

namespace {

#ifdef HFA_WITH_SM90
void cuda_check(cudaError_t error, const char* what) {
  if (error != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(error));
}
#else
[[noreturn]] void no_cuda() { throw std::runtime_error("this build has no CUDA support"); }
#endif

}  // namespace

DeviceMemory::DeviceMemory(Device device, std::size_t bytes) : device_(device), bytes_(bytes) {
  const std::size_t size = bytes == 0 ? 1 : bytes;  // a valid pointer even for empty tensors
  if (device.kind == DeviceKind::cpu) {
    data_ = std::malloc(size);
    if (data_ == nullptr) out_of_memory("host", size);
    return;
  }
#ifdef HFA_WITH_SM90
  cuda_check(cudaSetDevice(device.index), "cudaSetDevice");
  if (cudaError_t e = cudaMalloc(&data_, size); e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    out_of_memory("GPU", size);
  } else {
    cuda_check(e, "cudaMalloc");
  }
#else
  no_cuda();
#endif
}

DeviceMemory::~DeviceMemory() {
  if (device_.kind == DeviceKind::cpu) {
    std::free(data_);
    return;
  }
#ifdef HFA_WITH_SM90
  cudaFree(data_);
#endif
}

void DeviceMemory::upload(const HostArray& host) {
  if (host.bytes() != bytes_) throw std::logic_error("DeviceMemory::upload: size mismatch");
  if (bytes_ == 0) return;  // an empty tensor may have no storage at all: nothing to copy
  if (device_.kind == DeviceKind::cpu) {
    std::memcpy(data_, host.data(), bytes_);
    return;
  }
#ifdef HFA_WITH_SM90
  cuda_check(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy");
#else
  no_cuda();
#endif
}

void DeviceMemory::download(HostArray* host) const {
  if (host->bytes() != bytes_) throw std::logic_error("DeviceMemory::download: size mismatch");
  if (bytes_ == 0) return;
  if (device_.kind == DeviceKind::cpu) {
    std::memcpy(host->data(), data_, bytes_);
    return;
  }
#ifdef HFA_WITH_SM90
  cuda_check(cudaMemcpy(host->data(), data_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy");
#else
  no_cuda();
#endif
}

void DeviceMemory::fill_byte(unsigned char value) {
  if (bytes_ == 0) return;
  if (device_.kind == DeviceKind::cpu) {
    std::memset(data_, value, bytes_);
    return;
  }
#ifdef HFA_WITH_SM90
  cuda_check(cudaMemset(data_, value, bytes_), "cudaMemset");
#else
  no_cuda();
#endif
}

void synchronize(Device device) {
  if (device.kind == DeviceKind::cpu) return;
#ifdef HFA_WITH_SM90
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
}

}  // namespace hfa::tool
