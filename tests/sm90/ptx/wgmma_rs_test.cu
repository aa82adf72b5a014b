// wgmma with A from registers and B in shared memory (the O += P·V GEMM): A built as an fp32
// accumulator and repacked by accumulator_to_operand, B MN-major 128-byte swizzled.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/wgmma.cuh"
#include "ptx_test_util.cuh"

namespace hfa::sm90 {
namespace {

using ptx_test::DeviceArray;
using ptx_test::Mismatches;

constexpr int kM = 64;
constexpr uint32_t kStepRowsBytes = 16 * 128;  // one k16 step: 16 rows of B's 128-byte slab rows

template <int N, int K>
constexpr size_t shared_bytes() {
  return size_t(K) * N * 2 + ptx_test::kSwizzleAlignment;
}

// D(64×N) = C + A(64×K)·B(K×N). A arrives as fp32 (row-major) and is read in the accumulator
// layout of a 64×K tile, exactly where the attention kernel holds S before turning it into P.
// B arrives row-major (N contiguous) and becomes N/64 slabs of K rows × 128 B, as V does.
template <int N, int K, typename Element>
__global__ void __launch_bounds__(128) wgmma_rs_kernel(const float* a, const uint16_t* b,
                                                       const float* c, float* d_out) {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  uint8_t* b_tile = ptx_test::align_for_swizzle(dynamic_smem);
  ptx_test::fill_swizzled(b_tile, b, K, N);
  ptx::fence_proxy_async_smem();
  __syncthreads();

  const ptx::FragmentCoords at = ptx::fragment_coords(threadIdx.x);
  float a_acc[K / 2];
#pragma unroll
  for (int i = 0; i < K / 2; ++i) {
    const int row = at.row0 + 8 * ptx::fragment_row_half(i);
    a_acc[i] = a[row * K + ptx::fragment_column(i, at.column_pair)];
  }
  uint32_t a_regs[K / 4];
  ptx::accumulator_to_operand<Element>(a_acc, a_regs);

  // D starts as C, and every step accumulates (as O does in the kernel).
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const int row = at.row0 + 8 * ptx::fragment_row_half(i);
    d[i] = c[row * N + ptx::fragment_column(i, at.column_pair)];
  }

  const uint32_t b_base = ptx::smem_address(b_tile);
  ptx::fence_operands(d);
  ptx::fence_operands(a_regs);
  ptx::fence();
#pragma unroll
  for (int step = 0; step < K / 16; ++step) {
    const uint64_t b_desc = ptx::mnmajor_descriptor(b_base + step * kStepRowsBytes, K * 128);
    ptx::mma_rs<N, Element>(d, *reinterpret_cast<const uint32_t(*)[4]>(&a_regs[4 * step]), b_desc,
                            true);
  }
  ptx::commit_group();
  ptx::wait_group<0>();
  ptx::fence_operands(d);

#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const int row = at.row0 + 8 * ptx::fragment_row_half(i);
    d_out[row * N + ptx::fragment_column(i, at.column_pair)] = d[i];
  }
}

template <int N, int K, typename Element>
void check_rs(uint32_t seed) {
  // A unrounded: the kernel rounds it (pack_pair, to nearest even); the reference uses the
  // same rounding on the host.
  const std::vector<float> a = ptx_test::random_values(size_t(kM) * K, seed);
  const ptx_test::RandomElements b = ptx_test::random_elements<Element>(size_t(K) * N, seed + 1);
  const std::vector<float> c = ptx_test::random_values(size_t(kM) * N, seed + 2);
  DeviceArray<float> a_dev, c_dev, d_dev;
  DeviceArray<uint16_t> b_dev;
  HFA_CUDA_OK(d_dev.allocate(size_t(kM) * N));
  HFA_CUDA_OK(a_dev.assign(a));
  HFA_CUDA_OK(b_dev.assign(b.bits));
  HFA_CUDA_OK(c_dev.assign(c));
  HFA_CUDA_OK(d_dev.poison());

  auto kernel = wgmma_rs_kernel<N, K, Element>;
  HFA_CUDA_OK(ptx_test::allow_shared_bytes(kernel, shared_bytes<N, K>()));
  kernel<<<1, 128, shared_bytes<N, K>()>>>(a_dev.get(), b_dev.get(), c_dev.get(), d_dev.get());
  HFA_KERNEL_OK();
  std::vector<float> d;
  HFA_CUDA_OK(d_dev.download(d));

  // Tolerance as in the SS test, over C and the products.
  Mismatches mismatches;
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < N; ++n) {
      double want = c[m * N + n], magnitude = std::fabs(want);
      for (int k = 0; k < K; ++k) {
        const float a_rounded = ptx_test::from_bits<Element>(ptx_test::to_bits<Element>(a[m * K + k]));
        const double product = double(a_rounded) * b.values[k * N + n];
        want += product;
        magnitude += std::fabs(product);
      }
      mismatches.add_unless_close(m, n, d[m * N + n], want, magnitude);
    }
  }
  EXPECT_EQ(mismatches.count(), 0u) << mismatches.report();
}

// N: head dims 64, 128, 256 (one, two and four slabs: the leading byte offset at work).
// K: the forward's kBlockN values 80, 128, 176 (5, 8 and 11 k16 steps).
#define HFA_RS_TEST(N, K)                                                                 \
  TEST(Sm90WgmmaRS, Bf16N##N##x##K) {                                                     \
    HFA_REQUIRE_HOPPER();                                                                 \
    check_rs<N, K, __nv_bfloat16>(1000 + 4 * N + K);                                      \
  }                                                                                       \
  TEST(Sm90WgmmaRS, Fp16N##N##x##K) {                                                     \
    HFA_REQUIRE_HOPPER();                                                                 \
    check_rs<N, K, __half>(2000 + 4 * N + K);                                             \
  }
HFA_RS_TEST(64, 80)
HFA_RS_TEST(64, 128)
HFA_RS_TEST(64, 176)
HFA_RS_TEST(128, 80)
HFA_RS_TEST(128, 128)
HFA_RS_TEST(128, 176)
HFA_RS_TEST(256, 80)
HFA_RS_TEST(256, 128)
HFA_RS_TEST(256, 176)
#undef HFA_RS_TEST

}  // namespace
}  // namespace hfa::sm90
