// hfa::quantize_fp8 and hfa::hadamard_signs on a Hopper GPU against the CPU (the oracle, checked
// against a slow reference in tests/quant): the same codes and scales byte for byte, for every
// granularity with and without rotation, fixed length and varlen, each input dtype and head
// dim, one-pass blocks and blocks too large for one pass, strided rows, outliers, zeros,
// subnormals, inf and NaN. Skipped without a Hopper GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/host_tensor.hpp"
#include "hfa/hfa.hpp"
#include "sm90/gpu_test_support.hpp"

namespace hfa::test {
namespace {

struct Case {
  Fp8Granularity granularity;
  int32_t block_rows;  // per block
  bool rotate, varlen;
  DType dtype;
  int64_t d;
};

constexpr int64_t kHeads = 3;
const std::vector<int32_t> kLengths = {700, 0, 129, 5};  // varlen; fixed: 4 × 300

struct Bytes {
  std::vector<uint8_t> codes;
  std::vector<float> scale;
};

std::vector<int64_t> scale_shape(const Case& c, int64_t batch, int64_t longest) {
  if (c.granularity == Fp8Granularity::per_tensor) return {1};
  if (c.granularity == Fp8Granularity::per_head) return {batch, kHeads};
  return {batch, (longest + c.block_rows - 1) / c.block_rows, kHeads};
}

HostTensor make_x(const Case& c, int64_t total, int64_t batch) {
  HostTensor x(c.dtype,
               c.varlen ? std::vector<int64_t>{total, kHeads, c.d}
                        : std::vector<int64_t>{batch, total / batch, kHeads, c.d},
               /*padding=*/16);
  x.fill_normal(17);
  std::mt19937 rng(3);
  const double specials[] = {100.0, -2e3, 0.0, -0.0, 1e-40, 448.0, 5e4};
  for (int64_t e = 0; e < x.numel(); e += 1 + rng() % 997) x.set(e, specials[rng() % 7]);
  for (int64_t e = 0; e < 2 * kHeads * c.d; ++e) x.set(e, 0.0);  // zero rows
  x.set(x.numel() / 2, std::numeric_limits<double>::infinity());
  x.set(x.numel() / 3, std::numeric_limits<double>::quiet_NaN());
  return x;
}

// Quantizes x on the CPU or on the GPU and returns what was written.
Bytes run(const Case& c, const HostTensor& x, std::vector<int32_t> cu,
          const std::vector<int64_t>& scale_dims, Device device) {
  const bool gpu = device.kind == DeviceKind::cuda;
  int64_t scales = 1;
  for (int64_t n : scale_dims) scales *= n;
  Bytes out{std::vector<uint8_t>(std::size_t(x.numel()), 0xee),
            std::vector<float>(std::size_t(scales), -7.0f)};
  std::vector<float> signs(std::size_t(c.d));
  DeviceCopy dx(x), dcodes(out.codes), dscale(out.scale), dcu(cu), dsigns(signs);
  auto at = [&](DeviceCopy& d, auto& host) -> void* { return gpu ? d.get<void>() : host.data(); };
  Tensor xt = x.view();
  xt.data = gpu ? dx.get<void>() : const_cast<void*>(x.data());
  xt.device = gpu ? HFA_CUDA : HFA_CPU;
  Tensor ct = xt;  // contiguous codes of x's shape
  ct.data = at(dcodes, out.codes), ct.dtype = HFA_E4M3;
  for (int dim = ct.rank - 1, stride = 1; dim >= 0; stride *= int(ct.shape[dim]), --dim)
    ct.stride[dim] = stride;
  Tensor st = ct;
  st.data = at(dscale, out.scale), st.dtype = HFA_F32, st.rank = int32_t(scale_dims.size());
  for (int dim = st.rank - 1, stride = 1; dim >= 0; stride *= int(scale_dims[dim]), --dim)
    st.shape[dim] = scale_dims[dim], st.stride[dim] = stride;
  const Tensor cut = make_tensor(at(dcu, cu), DType::i32, {int64_t(cu.size())}, {}, device);
  const Tensor sg = make_tensor(at(dsigns, signs), DType::f32, {c.d}, {}, device);
  EXPECT_TRUE(hadamard_signs(99, sg).is_ok());
  QuantizeFp8Options o;
  o.granularity = c.granularity;
  o.block_rows = c.granularity == Fp8Granularity::per_block ? c.block_rows : 0;
  o.cu_seqlens = c.varlen ? &cut : nullptr;
  o.signs = c.rotate ? &sg : nullptr;
  const Status s = quantize_fp8(xt, ct, st, o);
  EXPECT_TRUE(s.is_ok()) << s.message();
  if (gpu) {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(
        cudaMemcpy(out.codes.data(), dcodes.get<void>(), out.codes.size(), cudaMemcpyDeviceToHost),
        cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.scale.data(), dscale.get<void>(), out.scale.size() * 4,
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return out;
}

TEST(Sm90QuantizeFp8, GpuWritesTheCpuBytes) {
  HFA_REQUIRE_HOPPER();
  const auto per_block = Fp8Granularity::per_block;
  int cases = 0;
  for (auto g : {Fp8Granularity::per_tensor, Fp8Granularity::per_head, per_block})
    for (int32_t block :
         g == per_block ? std::vector<int32_t>{1, 128, 100, 600} : std::vector<int32_t>{0})
      for (bool rotate : {false, true})
        for (bool varlen : {false, true})
          for (int64_t d : {64, 128, 256}) {
            const DType dtype = d == 64 ? DType::f32 : d == 128 ? DType::bf16 : DType::f16;
            const Case c{g, block, rotate, varlen, dtype, d};
            std::vector<int32_t> cu = {0};
            for (int32_t n : kLengths) cu.push_back(cu.back() + (varlen ? n : 300));
            const int64_t batch = int64_t(kLengths.size()), total = cu.back();
            const HostTensor x = make_x(c, total, batch);
            const auto dims = scale_shape(c, batch, varlen ? 700 : 300);
            const Bytes cpu = run(c, x, cu, dims, Device::cpu());
            const Bytes gpu = run(c, x, cu, dims, Device::cuda());
            SCOPED_TRACE(testing::Message()
                         << "granularity " << int(g) << " block " << block << " rotate " << rotate
                         << " varlen " << varlen << " d " << d);
            ASSERT_EQ(std::memcmp(cpu.scale.data(), gpu.scale.data(), cpu.scale.size() * 4), 0);
            for (std::size_t i = 0; i < cpu.codes.size(); ++i)
              ASSERT_EQ(int(cpu.codes[i]), int(gpu.codes[i])) << "code " << i;
            ++cases;
          }
  EXPECT_EQ(cases, 72);
}

TEST(Sm90QuantizeFp8, GpuSignsAreTheCpuSigns) {
  HFA_REQUIRE_HOPPER();
  std::vector<float> cpu(1000), gpu(1000);
  DeviceBuffer d(gpu.size() * 4);
  ASSERT_TRUE(hadamard_signs(7, make_tensor(cpu.data(), DType::f32, {1000})).is_ok());
  ASSERT_TRUE(
      hadamard_signs(7, make_tensor(d.get(), DType::f32, {1000}, {}, Device::cuda())).is_ok());
  HFA_CUDA_OK(d.download(gpu));
  EXPECT_EQ(cpu, gpu);
}

TEST(Sm90QuantizeFp8, GpuRejectsWhatItCannotTake) {
  HFA_REQUIRE_HOPPER();
  DeviceBuffer x(4 * 96 * 4 + 16), codes(4 * 96 + 16), scale(4);
  QuantizeFp8Options o;
  const Tensor st = make_tensor(scale.get(), DType::f32, {1}, {}, Device::cuda());
  const Tensor xt = make_tensor(x.get(), DType::f32, {1, 4, 1, 96}, {}, Device::cuda());
  const Tensor ct = make_tensor(codes.get(), DType::e4m3, {1, 4, 1, 96}, {}, Device::cuda());
  Status s = quantize_fp8(xt, ct, st, o);
  EXPECT_EQ(s.code(), Code::not_supported);
  EXPECT_EQ(s.message(), "x: headdim 96 on a GPU (64, 128 or 256)");
  const Tensor shifted = make_tensor(static_cast<uint8_t*>(codes.get()) + 8, DType::e4m3,
                                     {1, 4, 1, 64}, {}, Device::cuda());
  s = quantize_fp8(make_tensor(x.get(), DType::f32, {1, 4, 1, 64}, {}, Device::cuda()), shifted, st,
                   o);
  EXPECT_EQ(s.code(), Code::not_supported);
  EXPECT_EQ(s.message().rfind("codes: on a GPU its rows must start at 16-byte", 0), 0u);
}

}  // namespace
}  // namespace hfa::test
