// hfa::quantize_fp8 and hfa::hadamard_signs on a Hopper GPU against the CPU (the oracle, checked
// against a slow reference in tests/quant): the same codes and scales byte for byte, for every
// granularity with and without rotation, fixed length and varlen, each input dtype and head
// dim, strided rows, outliers, zeros, subnormals, inf and NaN. The kernels' paths
// (src/sm90/quantize_fp8.cu): one-pass units from one row's lanes to 512 threads, several
// groups to a CTA and blocks just within and just past what a unit holds (those take the two
// passes); persistent grids whose CTAs take several turns and whose warps walk spans of many
// items across sequences and heads (a grid capped to a few CTAs), and the grid a large input
// gets. Skipped without a Hopper GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/backend.hpp"
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
  std::vector<int32_t> lengths;  // varlen; fixed: lengths.size() sequences of lengths[0] rows
  int64_t heads;
  int64_t max_ctas = 0;  // the GPU's grid capped (Fp8QuantizeProblem::max_ctas); 0: not
};

const std::vector<int32_t> kLengths = {700, 0, 129, 5};
constexpr int64_t kHeads = 3;

struct Bytes {
  std::vector<uint8_t> codes;
  std::vector<float> scale;
};

int64_t batch_of(const Case& c) { return int64_t(c.lengths.size()); }

std::vector<int32_t> offsets_of(const Case& c) {
  std::vector<int32_t> cu = {0};
  for (int32_t n : c.lengths) cu.push_back(cu.back() + (c.varlen ? n : c.lengths[0]));
  return cu;
}

std::vector<int64_t> scale_shape(const Case& c) {
  if (c.granularity == Fp8Granularity::per_tensor) return {1};
  if (c.granularity == Fp8Granularity::per_head) return {batch_of(c), c.heads};
  int64_t longest = 0;
  for (int32_t n : c.lengths) longest = std::max<int64_t>(longest, c.varlen ? n : c.lengths[0]);
  return {batch_of(c), (longest + c.block_rows - 1) / c.block_rows, c.heads};
}

HostTensor make_x(const Case& c) {
  const int64_t total = offsets_of(c).back(), batch = batch_of(c);
  HostTensor x(c.dtype,
               c.varlen ? std::vector<int64_t>{total, c.heads, c.d}
                        : std::vector<int64_t>{batch, total / batch, c.heads, c.d},
               /*padding=*/16);
  x.fill_normal(17);
  std::mt19937 rng(3);
  const double specials[] = {100.0, -2e3, 0.0, -0.0, 1e-40, 448.0, 5e4};
  for (int64_t e = 0; e < x.numel(); e += 1 + rng() % 997) x.set(e, specials[rng() % 7]);
  for (int64_t e = 0; e < 2 * c.heads * c.d; ++e) x.set(e, 0.0);  // zero rows
  x.set(x.numel() / 2, std::numeric_limits<double>::infinity());
  x.set(x.numel() / 3, std::numeric_limits<double>::quiet_NaN());
  return x;
}

// Tensor t's strides as an Fp8QuantizeProblem counts them (varlen: no batch dim).
detail::Strides strides_of(const Tensor& t, bool varlen) {
  if (varlen) return {0, t.stride[0], t.stride[1]};
  return {t.stride[0], t.stride[1], t.stride[2]};
}

// Quantizes x on the CPU or on the GPU and returns what was written. A capped grid goes past
// the API (which never caps) to the backend's entry with the problem the API would build.
Bytes run(const Case& c, const HostTensor& x, Device device) {
  const bool gpu = device.kind == DeviceKind::cuda;
  std::vector<int32_t> cu = offsets_of(c);
  const std::vector<int64_t> scale_dims = scale_shape(c);
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
  Status s;
  if (gpu && c.max_ctas > 0) {
    detail::Fp8QuantizeProblem p;
    p.granularity = c.granularity;
    p.block_rows = o.block_rows;
    p.num_blocks = c.granularity == Fp8Granularity::per_block ? scale_dims[1] : 1;
    p.batch = batch_of(c);
    p.seqlen = c.varlen ? 0 : c.lengths[0];
    p.total = cu.back();
    p.heads = c.heads;
    p.hdim = int32_t(c.d);
    p.cu_seqlens = c.varlen ? dcu.get<int32_t>() : nullptr;
    p.x_dtype = c.dtype;
    p.x = xt.data;
    p.codes = static_cast<uint8_t*>(ct.data);
    p.x_stride = strides_of(xt, c.varlen);
    p.codes_stride = strides_of(ct, c.varlen);
    p.scale = static_cast<float*>(st.data);
    p.signs = c.rotate ? dsigns.get<float>() : nullptr;
    p.device = Device::cuda();
    p.max_ctas = c.max_ctas;
    s = detail::sm90_backend()->quantize_fp8(p);
  } else {
    s = quantize_fp8(xt, ct, st, o);
  }
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

// The GPU's bytes are the CPU's; a failure names the case.
void expect_gpu_writes_the_cpu_bytes(const Case& c) {
  SCOPED_TRACE(testing::Message() << "granularity " << int(c.granularity) << " block "
                                  << c.block_rows << " rotate " << c.rotate << " varlen "
                                  << c.varlen << " dtype " << int(c.dtype) << " d " << c.d
                                  << " rows " << offsets_of(c).back() << " heads " << c.heads
                                  << " max_ctas " << c.max_ctas);
  const HostTensor x = make_x(c);
  const Bytes cpu = run(c, x, Device::cpu());
  const Bytes gpu = run(c, x, Device::cuda());
  ASSERT_EQ(cpu.scale.size(), gpu.scale.size());
  for (std::size_t g = 0; g < cpu.scale.size(); ++g)
    ASSERT_EQ(std::memcmp(&cpu.scale[g], &gpu.scale[g], 4), 0)
        << "scale " << g << ": cpu " << cpu.scale[g] << ", gpu " << gpu.scale[g];
  for (std::size_t i = 0; i < cpu.codes.size(); ++i)
    ASSERT_EQ(int(cpu.codes[i]), int(gpu.codes[i])) << "code " << i;
}

// Blocks that reach every one-pass unit (d 64: 2 lanes a row, 128: 4, 256: 8; two rows a
// thread; units up to 512 threads, 256 for fp32) and the edges of what one holds: 1 (a unit of
// one row's lanes, many groups to a CTA), 3 and 16 (a few rows), 100 (a unit with idle rows),
// 128 and 256 (the largest one-pass blocks of d 256 and 128), 129 and 257 (just past them: two
// passes there, one elsewhere), 600 (two passes for every d).
const std::vector<int32_t> kBlocks = {1, 3, 16, 100, 128, 129, 256, 257, 600};

TEST(Sm90QuantizeFp8, GpuWritesTheCpuBytes) {
  HFA_REQUIRE_HOPPER();
  const auto per_block = Fp8Granularity::per_block;
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
  int cases = 0;
  for (auto g : {Fp8Granularity::per_tensor, Fp8Granularity::per_head, per_block})
    for (int32_t block : g == per_block ? kBlocks : std::vector<int32_t>{0})
      for (bool rotate : {false, true})
        for (bool varlen : {false, true})
          for (int64_t d : {64, 128, 256})
            for (DType dtype : dtypes) {
              const std::vector<int32_t> lengths =
                  varlen ? kLengths : std::vector<int32_t>(kLengths.size(), 300);
              expect_gpu_writes_the_cpu_bytes(
                  {g, block, rotate, varlen, dtype, d, lengths, kHeads});
              if (HasFatalFailure()) return;
              ++cases;
            }
  EXPECT_EQ(cases, 11 * 2 * 2 * 3 * 3);
}

// A grid of 1 or 5 CTAs: every CTA takes many turns of the one pass, every warp a span of many
// items of the two passes, crossing sequences (an empty one among them) and heads, forwards
// (amax) and backwards (encode).
TEST(Sm90QuantizeFp8, CappedGridsTakeManyTurns) {
  HFA_REQUIRE_HOPPER();
  const auto per_block = Fp8Granularity::per_block;
  int cases = 0;
  for (int64_t ctas : {1, 5})
    for (auto g : {Fp8Granularity::per_tensor, Fp8Granularity::per_head, per_block})
      for (int32_t block :
           g == per_block ? std::vector<int32_t>{1, 100, 600} : std::vector<int32_t>{0})
        for (bool rotate : {false, true})
          for (bool varlen : {false, true})
            for (int64_t d : {64, 128, 256}) {
              const DType dtype = d == 64 ? DType::f32 : d == 128 ? DType::bf16 : DType::f16;
              const std::vector<int32_t> lengths =
                  varlen ? kLengths : std::vector<int32_t>(kLengths.size(), 300);
              expect_gpu_writes_the_cpu_bytes(
                  {g, block, rotate, varlen, dtype, d, lengths, kHeads, ctas});
              if (HasFatalFailure()) return;
              ++cases;
            }
  EXPECT_EQ(cases, 2 * 5 * 2 * 2 * 3);
}

// An input for the grid the SMs hold: sequences of 8192, 0, 4099 and 77 rows of 4 heads (one-pass
// CTAs take two to four turns, two-pass warps one to three items).
TEST(Sm90QuantizeFp8, LargeInputOnTheFullGrid) {
  HFA_REQUIRE_HOPPER();
  const auto per_block = Fp8Granularity::per_block;
  int cases = 0;
  for (auto g : {Fp8Granularity::per_tensor, Fp8Granularity::per_head, per_block})
    for (int32_t block : g == per_block ? std::vector<int32_t>{1, 128} : std::vector<int32_t>{0})
      for (bool rotate : {false, true})
        for (int64_t d : {64, 128, 256}) {
          expect_gpu_writes_the_cpu_bytes(
              {g, block, rotate, /*varlen=*/true, DType::bf16, d, {8192, 0, 4099, 77}, 4});
          if (HasFatalFailure()) return;
          ++cases;
        }
  EXPECT_EQ(cases, 4 * 2 * 3);
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
