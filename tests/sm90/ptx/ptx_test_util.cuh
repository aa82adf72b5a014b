// Helpers shared by the primitive-layer tests: device buffers, 16-bit element
// conversion, the 128-byte swizzle, and mbarrier waits that fail a test instead of hanging it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "sm90/gpu_test_support.hpp"  // HFA_REQUIRE_HOPPER, HFA_CUDA_OK
#include "sm90/ptx/mbarrier.cuh"

namespace hfa::sm90::ptx_test {

// ---- Host: CUDA calls and the device --------------------------------------------------------

// After every launch: the launch itself, then the kernel's execution.
#define HFA_KERNEL_OK()                                                                      \
  do {                                                                                       \
    HFA_CUDA_OK(cudaGetLastError());                                                         \
    HFA_CUDA_OK(cudaDeviceSynchronize());                                                    \
  } while (0)

// The same for a kernel with mbarrier waits: if it trapped on a timed-out wait, says which.
#define HFA_WATCHED_KERNEL_OK(watchdog)                                                      \
  do {                                                                                       \
    cudaError_t hfa_status_ = cudaGetLastError();                                            \
    if (hfa_status_ == cudaSuccess) hfa_status_ = cudaDeviceSynchronize();                   \
    ASSERT_EQ(hfa_status_, cudaSuccess) << "kernel launch or run failed: "                   \
                                        << cudaGetErrorString(hfa_status_)                   \
                                        << (watchdog).describe();                            \
  } while (0)

// Owns count elements of device memory.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }

  cudaError_t allocate(size_t count) {
    count_ = count;
    return cudaMalloc(&data_, bytes());
  }
  cudaError_t upload(const std::vector<T>& host) {
    if (host.size() != count_) return cudaErrorInvalidValue;
    return cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice);
  }
  // allocate(host.size()), then upload(host).
  cudaError_t assign(const std::vector<T>& host) {
    if (cudaError_t error = allocate(host.size()); error != cudaSuccess) return error;
    return upload(host);
  }
  cudaError_t download(std::vector<T>& host) const {
    host.resize(count_);
    return cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost);
  }
  // Every byte 0xFF: NaN as bf16, fp16 and fp32, -1 as int, so an element no one wrote is seen.
  cudaError_t poison() { return cudaMemset(data_, 0xFF, bytes()); }

  T* get() const { return data_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

// A word of mapped host memory. A wait that times out stores its source line there and traps;
// the trap leaves the context unusable, but the host can still read this word.
class Watchdog {
 public:
  Watchdog() = default;
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() {
    if (host_ != nullptr) cudaFreeHost(host_);
  }

  cudaError_t create() {
    cudaError_t status = cudaHostAlloc(&host_, sizeof(uint32_t), cudaHostAllocMapped);
    if (status != cudaSuccess) return status;
    *host_ = 0;
    return cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_, 0);
  }
  uint32_t* device_word() const { return device_; }

  std::string describe() const {
    const uint32_t line = host_ == nullptr ? 0 : *static_cast<volatile uint32_t*>(host_);
    if (line == 0) return "";
    return "; an mbarrier wait timed out at line " + std::to_string(line) +
           " of the test source (wrong byte count, parity or arrival count?)";
  }

 private:
  uint32_t* host_ = nullptr;
  uint32_t* device_ = nullptr;
};

// Raises the kernel's dynamic shared memory limit above the default 48 KB when it needs more.
template <typename Kernel>
cudaError_t allow_shared_bytes(Kernel kernel, size_t bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

// ---- Host: values -----------------------------------------------------------------------------

// 16-bit encodings, rounded to nearest even (the rounding the kernels' conversions use).
template <typename Element>
uint16_t to_bits(float value) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    const __nv_bfloat16_raw raw = __float2bfloat16_rn(value);
    return raw.x;
  } else {
    const __half_raw raw = __float2half_rn(value);
    return raw.x;
  }
}

template <typename Element>
float from_bits(uint16_t bits) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
  } else {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  }
}

// Uniform values in [-1, 1], none zero.
inline std::vector<float> random_values(size_t count, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) {
    do value = uniform(generator);
    while (value == 0.0f);
  }
  return values;
}

// Random elements: their encodings for the device and their exact values for the reference.
struct RandomElements {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};

template <typename Element>
RandomElements random_elements(size_t count, uint32_t seed) {
  RandomElements out{std::vector<uint16_t>(count), random_values(count, seed)};
  for (size_t i = 0; i < count; ++i) {
    out.bits[i] = to_bits<Element>(out.values[i]);
    out.values[i] = from_bits<Element>(out.bits[i]);
  }
  return out;
}

// Collects mismatches; reports how many and the first few.
class Mismatches {
 public:
  void add(const std::string& where, double got, double want) {
    if (count_++ < kShown) {
      std::ostringstream line;
      line << "\n  " << where << ": got " << got << ", want " << want;
      text_ += line.str();
    }
  }
  // D[m][n] of a GEMM against its float64 sum; magnitude: the sum of |products| (and |C|), so
  // that the bound follows fp32 accumulation of that many terms.
  void add_unless_close(int m, int n, double got, double want, double magnitude) {
    if (!(std::fabs(got - want) <= 1e-4 * magnitude + 1e-6)) {  // also catches NaN
      add("D[" + std::to_string(m) + "][" + std::to_string(n) + "]", got, want);
    }
  }
  size_t count() const { return count_; }
  std::string report() const {
    return std::to_string(count_) + " mismatches" + (count_ > kShown ? ", first ones:" : ":") + text_;
  }

 private:
  static constexpr size_t kShown = 10;
  size_t count_ = 0;
  std::string text_;
};

// ---- Host and device: the 128-byte swizzle ----------------------------------------------------

// Byte offset of 16-bit element (row, column) of a tile stored as slabs of rows × 64 columns
// (128 B a row), slab after slab, each starting 1024-byte aligned: within a row, the 16-byte
// chunk index is XORed with row % 8. This is the layout TMA writes with SWIZZLE_128B and wgmma
// reads with swizzle mode 1.
__host__ __device__ constexpr uint32_t swizzled_offset(uint32_t row, uint32_t column, uint32_t rows) {
  const uint32_t slab = column / 64;
  const uint32_t chunk = (column % 64) / 8;
  return slab * rows * 128 + row * 128 + (chunk ^ (row % 8)) * 16 + (column % 8) * 2;
}

// ---- Device -------------------------------------------------------------------------------------

// Dynamic shared memory is only promised 16-byte alignment; a swizzled slab needs 1024.
inline constexpr uint32_t kSwizzleAlignment = 1024;

__device__ __forceinline__ uint8_t* align_for_swizzle(uint8_t* dynamic_smem) {
  const uint32_t misalignment = ptx::smem_address(dynamic_smem) % kSwizzleAlignment;
  return dynamic_smem + (kSwizzleAlignment - misalignment) % kSwizzleAlignment;
}

// Copies a row-major rows × columns tile of 16-bit elements from global memory into shared
// memory in the swizzled slab layout, 16 bytes per thread and step. The caller fences
// (fence_proxy_async_smem) and synchronizes before an async-proxy reader uses it.
__device__ __forceinline__ void fill_swizzled(uint8_t* tile, const uint16_t* source, int rows,
                                              int columns) {
  const int chunks_per_row = columns / 8;
  for (int chunk = threadIdx.x; chunk < rows * chunks_per_row; chunk += blockDim.x) {
    const int row = chunk / chunks_per_row;
    const int column = chunk % chunks_per_row * 8;
    *reinterpret_cast<uint4*>(tile + swizzled_offset(row, column, rows)) =
        reinterpret_cast<const uint4*>(source)[chunk];
  }
}

__device__ __forceinline__ uint64_t global_nanoseconds() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(now));
  return now;
}

inline constexpr uint64_t kWaitTimeoutNs = 2'000'000'000;  // the kernels here take microseconds

// Mbarrier::wait with a deadline: a phase that never completes stores `line` in the watchdog
// word and traps, so a wrong byte count or parity fails the test instead of hanging it.
__device__ __forceinline__ void wait_or_trap(const ptx::Mbarrier& barrier, uint32_t parity,
                                             uint32_t* watchdog, uint32_t line) {
  if (barrier.try_wait(parity)) return;
  const uint64_t start = global_nanoseconds();
  while (!barrier.try_wait(parity)) {
    if (global_nanoseconds() - start > kWaitTimeoutNs) {
      *reinterpret_cast<volatile uint32_t*>(watchdog) = line;
      __threadfence_system();
      __trap();
    }
  }
}

}  // namespace hfa::sm90::ptx_test
