// hfa::quantize_kv / dequantize_kv on a Hopper GPU against the CPU: the same codes and scales
// byte for byte (the CPU's are the CPU append's, python/tests/test_quantize.py; the GPU's use the
// GPU append's encode_lane), and the same values read back, for every format, head dim and
// input dtype, with rows that stress the scales (zeros, a huge outlier, inf and NaN). Skipped
// without a Hopper GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/half_float.hpp"
#include "hfa/hfa.hpp"
#include "sm90/gpu_test_support.hpp"

namespace hfa::test {
namespace {

struct Layout {
  int64_t code_bytes, scale_count;  // per row of d values
  DType code_dtype, scale_dtype;
};

Layout layout_of(KVFormat f, int64_t d) {
  switch (f) {
    case KVFormat::fp8_per_head: return {d, 0, DType::e4m3, DType::f32};
    case KVFormat::fp8_per_token: return {d, 1, DType::e4m3, DType::f32};
    case KVFormat::nvfp4: return {d / 2, d / 16, DType::fp4_e2m1x2, DType::e4m3};
    case KVFormat::mxfp4: return {d / 2, d / 32, DType::fp4_e2m1x2, DType::ue8m0};
    case KVFormat::fp8_mla: break;  // whole 656-byte records, not codes beside scales: not here
  }
  return {};
}

// Values of rows × d in `dtype` (raw bytes): normals of varied magnitudes and a few special rows.
std::vector<uint8_t> make_values(DType dtype, int64_t rows, int64_t d) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> x(std::size_t(rows * d));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) x[std::size_t(r * d + c)] = normal(rng) * std::ldexp(1.0f, int(r % 9) - 4);
  for (int64_t c = 0; c < d; ++c) x[std::size_t(1 * d + c)] = 0.0f;  // an all-zero row
  x[std::size_t(2 * d + 3)] = 3e4f;                                   // an outlier
  x[std::size_t(3 * d + 7)] = std::numeric_limits<float>::infinity();
  x[std::size_t(4 * d + 40)] = std::numeric_limits<float>::quiet_NaN();
  const std::size_t size = dtype == DType::f32 ? 4 : 2;
  std::vector<uint8_t> bytes(x.size() * size);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(&bytes[i * 4], &x[i], 4);
      continue;
    }
    const uint16_t h = dtype == DType::bf16 ? detail::float_to_bf16(x[i]) : detail::float_to_fp16(x[i]);
    std::memcpy(&bytes[i * 2], &h, 2);
  }
  return bytes;
}

// Quantizes (pages, slots, heads, d) values on `device` and reads back the codes, scales and
// the dequantized values (in the input's dtype).
struct Result {
  std::vector<uint8_t> codes, scales, values;
};

Result run(KVFormat format, DType dtype, int64_t d, Device device) {
  constexpr int64_t kPages = 3, kSlots = 5, kHeads = 4, kRows = kPages * kSlots * kHeads;
  const Layout l = layout_of(format, d);
  const std::vector<uint8_t> host_x = make_values(dtype, kRows, d);
  std::vector<float> per_head(kHeads);
  for (int64_t h = 0; h < kHeads; ++h) per_head[std::size_t(h)] = 0.05f * float(h + 1);
  const std::vector<float> global = {0.01f};
  Result r;
  r.codes.resize(std::size_t(kRows * l.code_bytes));
  r.scales.resize(format == KVFormat::fp8_per_head ? 0
                  : std::size_t(kRows * l.scale_count * (l.scale_dtype == DType::f32 ? 4 : 1)));
  r.values.resize(host_x.size());

  const bool gpu = device.kind == DeviceKind::cuda;
  auto alloc = [&](std::vector<uint8_t>& host, const void* init, std::size_t bytes) -> void* {
    if (!gpu) {
      if (init != nullptr) std::memcpy(host.data(), init, bytes);
      return host.data();
    }
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes > 0 ? bytes : 1), cudaSuccess);
    if (init != nullptr) {
      EXPECT_EQ(cudaMemcpy(p, init, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
    return p;
  };
  std::vector<uint8_t> x_store(host_x.size()), head_store(per_head.size() * 4), global_store(4);
  void* x = alloc(x_store, host_x.data(), host_x.size());
  void* codes = alloc(r.codes, nullptr, r.codes.size());
  void* head_scale = alloc(head_store, per_head.data(), head_store.size());
  void* scales = format == KVFormat::fp8_per_head ? head_scale : alloc(r.scales, nullptr, r.scales.size());
  void* out = alloc(r.values, nullptr, r.values.size());
  void* g = alloc(global_store, global.data(), 4);

  const Tensor xt = make_tensor(x, dtype, {kPages, kSlots, kHeads, d}, {}, device);
  const Tensor ct = make_tensor(codes, l.code_dtype, {kPages, kSlots, kHeads, l.code_bytes}, {}, device);
  const Tensor st = format == KVFormat::fp8_per_head
                        ? make_tensor(scales, DType::f32, {kHeads}, {}, device)
                    : format == KVFormat::fp8_per_token
                        ? make_tensor(scales, DType::f32, {kPages, kSlots, kHeads}, {}, device)
                        : make_tensor(scales, l.scale_dtype, {kPages, kSlots, kHeads, l.scale_count}, {}, device);
  const Tensor ot = make_tensor(out, dtype, {kPages, kSlots, kHeads, d}, {}, device);
  const Tensor gt = make_tensor(g, DType::f32, {1}, {}, device);
  QuantizeOptions o;
  o.format = format;
  o.global_scale = format == KVFormat::nvfp4 ? &gt : nullptr;
  Status s = quantize_kv(xt, ct, st, o);
  EXPECT_TRUE(s.is_ok()) << s.message();
  s = dequantize_kv(ct, st, ot, o);
  EXPECT_TRUE(s.is_ok()) << s.message();
  if (gpu) {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(r.codes.data(), codes, r.codes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    if (!r.scales.empty()) {
      EXPECT_EQ(cudaMemcpy(r.scales.data(), scales, r.scales.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    EXPECT_EQ(cudaMemcpy(r.values.data(), out, r.values.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (void* p : {x, codes, head_scale, out, g}) cudaFree(p);
    if (scales != head_scale) cudaFree(scales);
  }
  return r;
}

const char* name_of(KVFormat f) {
  switch (f) {
    case KVFormat::fp8_per_head: return "fp8_per_head";
    case KVFormat::fp8_per_token: return "fp8_per_token";
    case KVFormat::nvfp4: return "nvfp4";
    case KVFormat::mxfp4: return "mxfp4";
    case KVFormat::fp8_mla: return "fp8_mla";
  }
  return "?";
}

TEST(QuantizeGpu, MatchesTheCpuBitForBit) {
  HFA_REQUIRE_HOPPER();
  for (KVFormat format : {KVFormat::fp8_per_head, KVFormat::fp8_per_token, KVFormat::nvfp4, KVFormat::mxfp4})
    for (int64_t d : {64, 128, 256})
      for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
        SCOPED_TRACE(std::string(name_of(format)) + " hdim " + std::to_string(d) + " " + dtype_name(dtype));
        const Result cpu = run(format, dtype, d, Device::cpu());
        const Result gpu = run(format, dtype, d, Device::cuda(0));
        EXPECT_EQ(gpu.codes, cpu.codes);
        EXPECT_EQ(gpu.scales, cpu.scales);
        EXPECT_EQ(gpu.values, cpu.values);
      }
}

TEST(QuantizeGpu, RefusesWhatTheKernelCannotTake) {
  HFA_REQUIRE_HOPPER();
  DeviceBuffer x(4 * 2 * 96 * 4), codes(4 * 2 * 96), scales(4 * 2 * 4);
  const Device gpu = Device::cuda(0);
  QuantizeOptions o;
  o.format = KVFormat::fp8_per_token;
  const Status s = quantize_kv(make_tensor(x.get(), DType::f32, {4, 2, 96}, {}, gpu),
                               make_tensor(codes.get(), DType::e4m3, {4, 2, 96}, {}, gpu),
                               make_tensor(scales.get(), DType::f32, {4, 2}, {}, gpu), o);
  EXPECT_EQ(s.code(), Code::not_supported) << s.message();
  EXPECT_NE(s.message().find("headdim 96 on a GPU"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace hfa::test
