// hfa::merge_partials on a Hopper GPU against the CPU (its oracle, checked against float64 in
// tests/merge): both within the same float64 bound and identical on the special rows (seen by no
// partial: 0 and −inf; a NaN LSE: NaN), and byte for byte where the weights are exact (equal
// LSEs: the same fp32 additions in the same order), for N = 1 to HFA_MAX_MERGE_PARTIALS, mixed
// partial dtypes, each out dtype, the vector path (rows aligned to 4 values, hdim a multiple of
// 4: 4 to 1024 values, 1 to 32 lanes a row, slices past a lane's 4 in flight), the scalar one
// (odd hdim, misaligned strides), tiles cut at the end of the tokens and of the heads (heads not
// a multiple of 32, odd seqlen, more tiles than CTAs), fixed length and varlen, in place (also
// into the ring's windows of longer tensors: out[:, rows], lse[:, :, rows]), on a stream of the
// caller's. Skipped without a Hopper GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
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
  for (int n = 1; n <= HFA_MAX_MERGE_PARTIALS; ++n)
    for (DType out_dtype : {DType::f32, DType::bf16, DType::f16}) {
      expect_gpu_equals_cpu({false, 2, 77, 3, 128}, n, out_dtype, 0);
      expect_gpu_equals_cpu({true, 1, 301, 4, 64}, n, out_dtype, 4);  // rows of 68 values
    }
  // 1 slice (1 lane a row), 2 lanes with 2 slices each, 15 slices (a lane's last slot empty),
  // 24, 32 (8 lanes × 4), 64, 128 (a warp × 4), 256 (two rounds of a warp's slices).
  for (int64_t hdim : {4, 16, 60, 96, 128, 256, 512, 1024})
    for (DType out_dtype : {DType::f32, DType::bf16})
      expect_gpu_equals_cpu({false, 3, 33, 2, hdim}, 3, out_dtype, 0);
}

// Tiles of at most 256 rows: up to 32 heads of a run of tokens, cut at the end of the tokens (odd
// seqlen, a batch boundary inside a tile) and of the heads, with fewer tokens where full tiles
// would leave CTAs idle (a short call), and more tiles than the GPU's CTAs (each strides over
// several). The tile's tokens depend on the GPU's CTAs: the comments give an H200's (132 SMs ×
// 3 CTAs); other cuts are as valid.
TEST(Sm90MergePartials, GpuEqualsCpuOnEveryTileShape) {
  HFA_REQUIRE_HOPPER();
  const MergeShape shapes[] = {
      {false, 1, 1, 1, 64},     // one row
      {false, 3, 1, 5, 64},     // seqlen 1: tiles span batches
      {false, 2, 13, 32, 64},   // 32 heads
      {false, 1, 29, 33, 32},   // 33 heads: a head tile of 32, then one of 1
      {false, 2, 17, 40, 64},   // 40: 32 + 8
      {true, 1, 37, 64, 128},   // 64: two head tiles
      {false, 1, 11, 70, 16},   // 70: 32 + 32 + 6
      {false, 2, 255, 7, 128},  // 7 heads
      {false, 3, 1023, 3, 64},  // 3 heads, 3069 tokens: 8 a tile, across batches
  };
  for (const MergeShape& shape : shapes)
    for (int n : {1, 2, 5}) expect_gpu_equals_cpu(shape, n, DType::f32, 0);
  const MergeShape long_calls[] = {
      {true, 1, 6336, 32, 64},   // full tiles of 8 tokens, 2 a CTA
      {true, 1, 4099, 32, 64},   // 6 tokens a tile, 684 tiles: some CTAs 1, most 2
      {false, 1, 14256, 7, 32},  // full tiles of 36 tokens × 7 heads (252 rows)
      {false, 2, 1000, 33, 37},  // the scalar path: 2 head tiles, 2000 tokens
  };
  for (const MergeShape& shape : long_calls) expect_gpu_equals_cpu(shape, 2, DType::bf16, 0);
}

// Exact weights (MergeCase::make_weights_exact: equal LSEs, a power of two of partials a row):
// the GPU's merge must be the CPU's byte for byte (the same products, added in the same order
// from 0), and the LSE too where one partial or none sees the row (log 1 = 0 is exact).
TEST(Sm90MergePartials, ExactWeightsGiveTheCpusBytes) {
  HFA_REQUIRE_HOPPER();
  const MergeShape shapes[] = {{false, 2, 45, 5, 128}, {true, 1, 60, 3, 37}};
  for (int n : {2, 3, 4, 7, 8, HFA_MAX_MERGE_PARTIALS})
    for (DType out_dtype : {DType::f32, DType::bf16, DType::f16})
      for (const MergeShape& shape : shapes) {
        const std::string what = label(shape, n, out_dtype, 0) + " exact weights";
        MergeCase c(shape, n, out_dtype, kMixed, 500 + n + int(out_dtype));
        c.make_weights_exact();
        OnGpu gpu(c);
        ASSERT_TRUE(gpu.run(gpu.out, &gpu.lse).is_ok()) << what;
        HFA_CUDA_OK(cudaDeviceSynchronize());
        const HostTensor gpu_out = OnGpu::download(c.out, gpu.out);
        const HostTensor gpu_lse = OnGpu::download(c.lse, gpu.lse);
        const Tensor cpu_out = c.out.view(), cpu_lse = c.lse.view();
        ASSERT_TRUE(merge_partials(c.out_pointers(), c.lse_pointers(), cpu_out, &cpu_lse).is_ok());
        const auto bytes = static_cast<int64_t>(dtype_size(out_dtype));
        for (int64_t r = 0; r < shape.rows(); ++r) {
          const int live = c.live_count(r);
          for (int64_t col = 0; col < shape.hdim; ++col) {
            const int64_t at = c.out.offset(shape.out_index(r, col)) * bytes;
            ASSERT_EQ(0, std::memcmp(static_cast<const std::byte*>(gpu_out.data()) + at,
                                     static_cast<const std::byte*>(c.out.data()) + at,
                                     std::size_t(bytes)))
                << what << ": row " << r << " (" << live << " live) column " << col << ": GPU "
                << gpu_out.get(shape.out_index(r, col)) << ", CPU "
                << c.out.get(shape.out_index(r, col));
          }
          if (live <= 1) {
            ASSERT_EQ(gpu_lse.get(shape.lse_index(r)), c.lse.get(shape.lse_index(r)))
                << what << ": lse of row " << r;
          }
        }
      }
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

// The ring's steps as ring.py passes them: the accumulator is a window of rows of longer fp32
// tensors (out[:, rows], lse[:, :, rows]: not contiguous, the LSE's window not 16-byte aligned
// where it starts at an odd token), merged in place with contiguous partials.
TEST(Sm90MergePartials, InPlaceIntoTheRingsWindows) {
  HFA_REQUIRE_HOPPER();
  struct Window {
    MergeShape shape;  // of the window
    int64_t seqlen, first;
  };
  const Window windows[] = {
      {{false, 1, 512, 32, 128}, 1024, 512},  // the zigzag's second half
      {{false, 1, 512, 32, 128}, 1024, 0},    // its first half
      {{false, 2, 50, 8, 64}, 64, 3},         // an odd start
      {{false, 1, 40, 33, 37}, 100, 7},       // the scalar path
      {{true, 1, 300, 4, 128}, 320, 11},      // varlen: out[rows], lse[:, rows]
  };
  for (const Window& w : windows)
    for (int n : {2, 3, 8}) {
      const std::string what = label(w.shape, n, DType::f32, 0) + " window [" +
                               std::to_string(w.first) + ", +" + std::to_string(w.shape.seqlen) +
                               ") of " + std::to_string(w.seqlen);
      MergeCase c(w.shape, n, DType::f32, {DType::f32, DType::bf16, DType::f16}, 90 + n);
      const RingWindow ring(c, w.seqlen, w.first, 7 * n);
      const MergeReference want = c.reference();

      // The CPU: its own copy of the longer tensors.
      RingWindow cpu = ring;
      std::vector<Tensor> outs = c.out_views, lses = c.lse_views;
      outs[0] = cpu.out_window(cpu.out.view());
      lses[0] = cpu.lse_window(cpu.lse.view());
      ASSERT_TRUE(
          merge_partials(OnGpu::pointers(outs), OnGpu::pointers(lses), outs[0], &lses[0]).is_ok())
          << what;
      cpu.expect_merged_in_place(want, cpu.out, cpu.lse, n, "CPU " + what);

      OnGpu gpu(c);
      const Tensor long_out = gpu.upload(ring.out), long_lse = gpu.upload(ring.lse);
      gpu.outs[0] = ring.out_window(long_out);
      gpu.lses[0] = ring.lse_window(long_lse);
      const Status s = gpu.run(gpu.outs[0], &gpu.lses[0]);
      ASSERT_TRUE(s.is_ok()) << what << ": " << s.message();
      HFA_CUDA_OK(cudaDeviceSynchronize());
      ring.expect_merged_in_place(want, OnGpu::download(ring.out, long_out),
                                  OnGpu::download(ring.lse, long_lse), n, "GPU " + what);
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
