// wgmma with both operands in shared memory (the S = Q·Kᵀ GEMM): K-major 128-byte swizzled
// descriptors, k16 steps inside a slab and across slabs, the accumulator fragment layout.
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

constexpr int kM = 64;   // one warpgroup's wgmma M
constexpr int kK = 128;  // two 64-column slabs, four k16 steps each
constexpr int kSlabs = kK / 64;
constexpr int kStepsPerSlab = 64 / 16;
constexpr uint32_t kStepBytes = 16 * 2;  // 16 elements of a 128-byte swizzled row

template <int N>
constexpr size_t shared_bytes() {
  return size_t(kM + N) * kK * 2 + ptx_test::kSwizzleAlignment;
}

// D(64×N) = A(64×K)·B(N×K)ᵀ. A and B arrive row-major (K contiguous) and are written into shared
// memory as K-major swizzled slabs by the threads; D leaves row-major, from the fragments.
template <int N, typename Element>
__global__ void __launch_bounds__(128) wgmma_ss_kernel(const uint16_t* a, const uint16_t* b, float* d_out) {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  uint8_t* a_tile = ptx_test::align_for_swizzle(dynamic_smem);
  uint8_t* b_tile = a_tile + kM * kK * 2;  // 16 KB: B's slabs stay 1024-byte aligned
  ptx_test::fill_swizzled(a_tile, a, kM, kK);
  ptx_test::fill_swizzled(b_tile, b, N, kK);
  ptx::fence_proxy_async_smem();  // the threads' stores before wgmma's (async proxy) reads
  __syncthreads();

  // NaN everywhere: the first k-step (accumulate = false) must not read what D held.
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = __int_as_float(0x7fffffff);

  // One descriptor per operand, moved with advance(): +32 B per k16 step inside a slab,
  // + rows·128 B to the next slab.
  const uint64_t a_desc = ptx::kmajor_descriptor(ptx::smem_address(a_tile));
  const uint64_t b_desc = ptx::kmajor_descriptor(ptx::smem_address(b_tile));
  ptx::fence_operands(d);
  ptx::fence();
#pragma unroll
  for (int slab = 0; slab < kSlabs; ++slab) {
#pragma unroll
    for (int step = 0; step < kStepsPerSlab; ++step) {
      const uint64_t a_step = ptx::advance(a_desc, slab * kM * 128 + step * kStepBytes);
      const uint64_t b_step = ptx::advance(b_desc, slab * N * 128 + step * kStepBytes);
      ptx::mma_ss<N, Element>(d, a_step, b_step, slab > 0 || step > 0);
    }
  }
  ptx::commit_group();
  ptx::wait_group<0>();
  ptx::fence_operands(d);

  const ptx::FragmentCoords at = ptx::fragment_coords(threadIdx.x);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const int row = at.row0 + 8 * ptx::fragment_row_half(i);
    d_out[row * N + ptx::fragment_column(i, at.column_pair)] = d[i];
  }
}

template <int N, typename Element>
void check_ss(uint32_t seed) {
  const ptx_test::RandomElements a = ptx_test::random_elements<Element>(size_t(kM) * kK, seed);
  const ptx_test::RandomElements b = ptx_test::random_elements<Element>(size_t(N) * kK, seed + 1);
  DeviceArray<uint16_t> a_dev, b_dev;
  DeviceArray<float> d_dev;
  HFA_CUDA_OK(d_dev.allocate(size_t(kM) * N));
  HFA_CUDA_OK(a_dev.assign(a.bits));
  HFA_CUDA_OK(b_dev.assign(b.bits));
  HFA_CUDA_OK(d_dev.poison());

  HFA_CUDA_OK(ptx_test::allow_shared_bytes(wgmma_ss_kernel<N, Element>, shared_bytes<N>()));
  wgmma_ss_kernel<N, Element><<<1, 128, shared_bytes<N>()>>>(a_dev.get(), b_dev.get(), d_dev.get());
  HFA_KERNEL_OK();
  std::vector<float> d;
  HFA_CUDA_OK(d_dev.download(d));

  // The products of 16-bit values are exact; only the fp32 sums round. Allow 1e-4 of the sum
  // of magnitudes: 10x the worst case of 128 fp32 additions, 100x below a misplaced element.
  Mismatches mismatches;
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < N; ++n) {
      double want = 0, magnitude = 0;
      for (int k = 0; k < kK; ++k) {
        const double product = double(a.values[m * kK + k]) * b.values[n * kK + k];
        want += product;
        magnitude += std::fabs(product);
      }
      mismatches.add_unless_close(m, n, d[m * N + n], want, magnitude);
    }
  }
  EXPECT_EQ(mismatches.count(), 0u) << mismatches.report();
}

// N: the forward's kBlockN values (80, 128, 176) and both ends of the range it may use.
#define HFA_SS_TEST(N)                                                                    \
  TEST(Sm90WgmmaSS, Bf16N##N) {                                                           \
    HFA_REQUIRE_HOPPER();                                                                 \
    check_ss<N, __nv_bfloat16>(100 + N);                                                  \
  }                                                                                       \
  TEST(Sm90WgmmaSS, Fp16N##N) {                                                           \
    HFA_REQUIRE_HOPPER();                                                                 \
    check_ss<N, __half>(200 + N);                                                         \
  }
HFA_SS_TEST(64)
HFA_SS_TEST(80)
HFA_SS_TEST(128)
HFA_SS_TEST(176)
HFA_SS_TEST(256)
#undef HFA_SS_TEST

}  // namespace
}  // namespace hfa::sm90
