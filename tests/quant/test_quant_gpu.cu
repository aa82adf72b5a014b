// The codecs run on the GPU and must give the host's bytes and bits exactly, under the library's
// CUDA flags (--use_fast_math, so -ftz and approximate division are in force around them).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "quant/e2m1.hpp"
#include "quant/e4m3.hpp"
#include "quant/e5m2.hpp"
#include "quant/fp8_kv.hpp"
#include "quant/mxfp4.hpp"
#include "quant/nvfp4.hpp"
#include "quant/ue8m0.hpp"

namespace hfa::quant {
namespace {

constexpr int kD = 128;
constexpr int kScalarOutputs = 14;  // per input: 4 codes, 10 floats (as bits)
constexpr int kRowBytes = kD / 2 + kD / kNvfp4BlockSize + kD / 2 + kD / kMxfp4BlockSize + kD;
constexpr int kRowFloats = 3 * kD + 1;

struct Outputs {
  std::vector<uint32_t> scalars;
  std::vector<uint8_t> bytes;
  std::vector<float> floats;
};

// Each output on its own: fp32 arithmetic outside the codecs would differ in NaN bits.
HFA_HD void scalar_case(float x, uint32_t* out) {
  const uint8_t code = static_cast<uint8_t>(bits_of(x) >> 24);
  out[0] = e4m3_encode(x);
  out[1] = e5m2_encode(x);
  out[2] = e2m1_encode(x);
  out[3] = ue8m0_encode_floor(x);
  out[4] = bits_of(e4m3_decode(code));
  out[5] = bits_of(e5m2_decode(code));
  out[6] = bits_of(e2m1_decode(code));
  out[7] = bits_of(ue8m0_decode(code));
  out[8] = bits_of(nvfp4_decode(code, x));
  out[9] = bits_of(mxfp4_decode(code, code));
  out[10] = bits_of(fp8_kv_decode(code, x));
  out[11] = bits_of(div_rn(x, 3.0f));
  out[12] = bits_of(mul_rn(x, 0.1f));
  out[13] = bits_of(scale_pow2(x, code - 127));
}

HFA_HD void row_case(const float* x, float global, uint8_t* bytes, float* floats) {
  uint8_t* nv_packed = bytes;
  uint8_t* nv_scales = nv_packed + kD / 2;
  uint8_t* mx_packed = nv_scales + kD / kNvfp4BlockSize;
  uint8_t* mx_scales = mx_packed + kD / 2;
  uint8_t* fp8 = mx_scales + kD / kMxfp4BlockSize;
  nvfp4_quantize_row(x, kD, global, nv_packed, nv_scales);
  nvfp4_dequantize_row(nv_packed, nv_scales, kD, global, floats);
  mxfp4_quantize_row(x, kD, mx_packed, mx_scales);
  mxfp4_dequantize_row(mx_packed, mx_scales, kD, floats + kD);
  floats[3 * kD] = fp8_kv_quantize_row_per_token(x, kD, fp8);
  fp8_kv_dequantize_row(fp8, kD, floats[3 * kD], floats + 2 * kD);
}

__global__ void scalar_kernel(const float* x, int n, uint32_t* out) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    scalar_case(x[i], out + i * kScalarOutputs);
}

__global__ void row_kernel(const float* x, int rows, float global, uint8_t* bytes, float* floats) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x)
    row_case(x + r * kD, global, bytes + r * kRowBytes, floats + r * kRowFloats);
}

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;  // any failure means "no GPU"
}

// Every fp32 pattern with a stride, plus rows mixing noise, specials and extreme magnitudes.
std::vector<float> scalar_inputs() {
  constexpr uint64_t kStride = 4099;
  std::vector<float> x;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += kStride)
    x.push_back(from_bits(static_cast<uint32_t>(b)));
  return x;
}

std::vector<float> row_inputs(int rows) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const float kSpecials[] = {0.0f,
                             -0.0f,
                             1e-40f,
                             -1e-42f,
                             1e-38f,
                             3e38f,
                             1e-30f,
                             std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN()};
  const float kMagnitudes[] = {1e-38f, 1e-20f, 1.0f, 1e20f, 1e37f};
  std::vector<float> x(static_cast<size_t>(rows) * kD);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < kD; ++i) x[r * kD + i] = kMagnitudes[r % 5] * normal(rng);
    if (r % 3 == 0) x[r * kD + (r * 7) % kD] = kSpecials[(r / 3) % 9];
  }
  return x;
}

template <class T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, v.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

template <class T>
std::vector<T> from_device(const T* p, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

TEST(QuantGpu, ScalarCodecsMatchTheHostBitForBit) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: host/device bit-exactness of the codecs NOT checked";
  const auto x = scalar_inputs();
  const int n = static_cast<int>(x.size());
  float* dx = to_device(x);
  uint32_t* dout = nullptr;
  ASSERT_EQ(cudaMalloc(&dout, x.size() * kScalarOutputs * sizeof(uint32_t)), cudaSuccess);
  scalar_kernel<<<1024, 256>>>(dx, n, dout);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = from_device(dout, x.size() * kScalarOutputs);
  int mismatches = 0;
  for (int i = 0; i < n && mismatches < 20; ++i) {
    uint32_t want[kScalarOutputs];
    scalar_case(x[i], want);
    for (int k = 0; k < kScalarOutputs; ++k) {
      if (got[i * kScalarOutputs + k] == want[k]) continue;
      ++mismatches;
      ADD_FAILURE() << "input bits " << std::hex << bits_of(x[i]) << " output " << k
                    << ": device " << got[i * kScalarOutputs + k] << " host " << want[k];
    }
  }
  cudaFree(dx);
  cudaFree(dout);
}

TEST(QuantGpu, RowCodecsMatchTheHostBitForBit) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: host/device bit-exactness of the codecs NOT checked";
  constexpr int kRows = 500;
  const auto x = row_inputs(kRows);
  float* dx = to_device(x);
  uint8_t* dbytes = nullptr;
  float* dfloats = nullptr;
  ASSERT_EQ(cudaMalloc(&dbytes, size_t{kRows} * kRowBytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dfloats, size_t{kRows} * kRowFloats * sizeof(float)), cudaSuccess);
  for (float global : {nvfp4_global_scale(1.0f), nvfp4_global_scale(1e37f), 1e-38f}) {
    row_kernel<<<8, 64>>>(dx, kRows, global, dbytes, dfloats);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto bytes = from_device(dbytes, size_t{kRows} * kRowBytes);
    const auto floats = from_device(dfloats, size_t{kRows} * kRowFloats);
    std::vector<uint8_t> want_bytes(kRowBytes);
    std::vector<float> want_floats(kRowFloats);
    for (int r = 0; r < kRows; ++r) {
      row_case(&x[r * kD], global, want_bytes.data(), want_floats.data());
      ASSERT_EQ(std::memcmp(want_bytes.data(), &bytes[r * kRowBytes], kRowBytes), 0)
          << "row " << r << " global " << global;
      ASSERT_EQ(std::memcmp(want_floats.data(), &floats[r * kRowFloats], kRowFloats * 4), 0)
          << "row " << r << " global " << global;
    }
  }
  cudaFree(dx);
  cudaFree(dbytes);
  cudaFree(dfloats);
}

}  // namespace
}  // namespace hfa::quant
