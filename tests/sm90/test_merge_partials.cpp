// hfa::merge_partials on a Hopper GPU against the CPU (its oracle, checked against float64 in
// tests/merge): both within the same float64 bound and identical on the special rows (seen by no
// partial: 0 and −inf; a NaN LSE: NaN), for N = 1 to HFA_MAX_MERGE_PARTIALS, mixed partial
// dtypes, each out dtype, the vector path (16-byte aligned rows, hdim a multiple of 8: 8 to 512
// values, 1 to 32 lanes a row and more slices than lanes) and the scalar one (odd hdim,
// misaligned strides), fixed length and varlen, in place, on a stream of the caller's. Skipped
// without a Hopper GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/host_tensor.hpp"
#include "common/merge_case.hpp"
#include "hfa/hfa.hpp"
#include "sm90/gpu_test_support.hpp"

namespace hfa::test {
namespace {

const std::vector<DType> kMixed = {DType::f32, DType::bf16, DType::f16};

// Device copies of a case's tensors, views of them, and the outputs brought back.
struct OnGpu {
  std::vector<std::unique_ptr<DeviceCopy>> copies;
  std::vector<Tensor> outs, lses;
  Tensor out{}, lse{};

  explicit OnGpu(const MergeCase& c) {
    for (std::size_t k = 0; k < c.outs.size(); ++k) {
      outs.push_back(upload(c.outs[k]));
      lses.push_back(upload(c.lses[k]));
    }
    out = upload(c.out);
    lse = upload(c.lse);
  }

  Tensor upload(const HostTensor& t) {
    copies.push_back(std::make_unique<DeviceCopy>(t));
    Tensor view = t.view();
    view.data = copies.back()->get<void>();
    view.device = HFA_CUDA;
    view.device_index = 0;
    return view;
  }

  static std::vector<const Tensor*> pointers(const std::vector<Tensor>& views) {
    std::vector<const Tensor*> result;
    for (const Tensor& t : views) result.push_back(&t);
    return result;
  }

  Status run(const Tensor& into, const Tensor* into_lse, cudaStream_t stream = nullptr) {
    return merge_partials(pointers(outs), pointers(lses), into, into_lse, stream);
  }

  // A host copy of `like` holding what `view` (one of ours) holds now.
  static HostTensor download(const HostTensor& like, const Tensor& view) {
    HostTensor host = like;
    EXPECT_EQ(cudaMemcpy(host.data(), view.data, host.storage_bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
};

std::string label(const MergeShape& s, int n, DType out_dtype, int64_t padding) {
  return std::string(s.varlen ? "varlen (" : "fixed (") + std::to_string(s.batch) + ", " +
         std::to_string(s.seqlen) + ", " + std::to_string(s.heads) + ", " + std::to_string(s.hdim) +
         ") n=" + std::to_string(n) + " out=" + dtype_name(out_dtype) +
         " padding=" + std::to_string(padding);
}

// The GPU's and the CPU's merge of one case: both against float64 (which pins the rows no partial
// sees to 0 and −inf exactly), then against each other on every NaN and infinity, where they
// must agree exactly.
void expect_gpu_equals_cpu(const MergeShape& shape, int n, DType out_dtype, int64_t padding,
                           bool nan_lse = false) {
  const std::string what = label(shape, n, out_dtype, padding);
  MergeCase c(shape, n, out_dtype, kMixed, 1000 + n * 7 + int(out_dtype), padding, nan_lse);
  OnGpu gpu(c);
  const Status s = gpu.run(gpu.out, &gpu.lse);
  ASSERT_TRUE(s.is_ok()) << what << ": " << s.message();
  HFA_CUDA_OK(cudaDeviceSynchronize());
  const HostTensor gpu_out = OnGpu::download(c.out, gpu.out);
  const HostTensor gpu_lse = OnGpu::download(c.lse, gpu.lse);
  const Tensor cpu_out = c.out.view(), cpu_lse = c.lse.view();
  ASSERT_TRUE(merge_partials(c.out_pointers(), c.lse_pointers(), cpu_out, &cpu_lse).is_ok());

  const MergeReference ref = c.reference();
  expect_merged(ref, gpu_out, &gpu_lse, n, "GPU " + what);
  expect_merged(ref, c.out, &c.lse, n, "CPU " + what);
  const auto special = [](double v) { return std::isnan(v) || std::isinf(v); };
  for (const auto& [g, h] : {std::pair{&gpu_out, &c.out}, std::pair{&gpu_lse, &c.lse}})
    for (int64_t e = 0; e < h->numel(); ++e) {
      const double a = g->get(e), b = h->get(e);
      if (special(a) || special(b)) {
        ASSERT_TRUE((std::isnan(a) && std::isnan(b)) || a == b)
            << what << ": element " << e << ": GPU " << a << ", CPU " << b;
      }
    }
}

TEST(Sm90MergePartials, GpuEqualsCpuOnTheVectorPath) {
  HFA_REQUIRE_HOPPER();
  for (int n : {1, 2, 3, 4, 5, 8, 9, HFA_MAX_MERGE_PARTIALS})
    for (DType out_dtype : {DType::f32, DType::bf16, DType::f16}) {
      expect_gpu_equals_cpu({false, 2, 77, 3, 128}, n, out_dtype, 0);
      expect_gpu_equals_cpu({true, 1, 301, 4, 64}, n, out_dtype, 8);  // 16-byte padded rows
    }
  for (int64_t hdim : {8, 16, 96, 256, 512})  // 1 lane a row ... 32 lanes with 2 slices each
    expect_gpu_equals_cpu({false, 3, 33, 2, hdim}, 3, DType::bf16, 0);
}

TEST(Sm90MergePartials, GpuEqualsCpuOnTheScalarPath) {
  HFA_REQUIRE_HOPPER();
  for (int n : {1, 2, 6, HFA_MAX_MERGE_PARTIALS})
    for (DType out_dtype : {DType::f32, DType::bf16, DType::f16}) {
      expect_gpu_equals_cpu({false, 2, 19, 3, 37}, n, out_dtype, 0);  // odd hdim
      expect_gpu_equals_cpu({true, 1, 50, 5, 64}, n, out_dtype, 1);   // misaligned row strides
    }
  expect_gpu_equals_cpu({false, 1, 9, 1, 3}, 2, DType::f32, 0);
}

TEST(Sm90MergePartials, ANanLsePoisonsItsRowOnGpuToo) {
  HFA_REQUIRE_HOPPER();
  expect_gpu_equals_cpu({false, 2, 40, 4, 128}, 4, DType::f32, 0, /*nan_lse=*/true);
  expect_gpu_equals_cpu({true, 1, 40, 4, 37}, 3, DType::bf16, 0, /*nan_lse=*/true);
}

// A ring step on the GPU: (outs[0], lses[0]) is the accumulator the others merge into, on a
// stream of the caller's.
TEST(Sm90MergePartials, InPlaceOnACallersStream) {
  HFA_REQUIRE_HOPPER();
  for (int64_t hdim : {128, 37}) {
    const MergeShape shape{false, 2, 64, 8, hdim};
    MergeCase c(shape, 3, DType::f32, {DType::f32, DType::bf16, DType::f16}, 77);
    const MergeReference want = c.reference();
    OnGpu gpu(c);
    cudaStream_t stream = nullptr;
    HFA_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const Status s = gpu.run(gpu.outs[0], &gpu.lses[0], stream);
    ASSERT_TRUE(s.is_ok()) << s.message();
    HFA_CUDA_OK(cudaStreamSynchronize(stream));
    HFA_CUDA_OK(cudaStreamDestroy(stream));
    const HostTensor out = OnGpu::download(c.outs[0], gpu.outs[0]);
    const HostTensor lse = OnGpu::download(c.lses[0], gpu.lses[0]);
    expect_merged(want, out, &lse, 3, "in place hdim " + std::to_string(hdim));
  }
}

TEST(Sm90MergePartials, NoLseAndNoRows) {
  HFA_REQUIRE_HOPPER();
  MergeCase c({false, 2, 30, 4, 64}, 2, DType::bf16, kMixed, 5);
  OnGpu gpu(c);
  ASSERT_TRUE(gpu.run(gpu.out, nullptr).is_ok());
  HFA_CUDA_OK(cudaDeviceSynchronize());
  expect_merged(c.reference(), OnGpu::download(c.out, gpu.out), nullptr, 2, "no lse");
  const HostTensor lse = OnGpu::download(c.lse, gpu.lse);
  for (int64_t r = 0; r < lse.numel(); ++r) ASSERT_TRUE(std::isnan(lse.get(r))) << "written";
  MergeCase none({false, 2, 0, 4, 64}, 2, DType::f32, kMixed, 6);
  OnGpu empty(none);
  EXPECT_TRUE(empty.run(empty.out, &empty.lse).is_ok());
}

}  // namespace
}  // namespace hfa::test
