// wgmma with MN-major shared-memory operands, as the backward uses them: dQ = dS·K with both
// operands stored K-rows-first (dS as the dSᵀ tile, K as loaded), and dV = Pᵀ·dO from a shared
// Pᵀ tile (A K-major, B MN-major). Then the 1-D bulk copy and bulk reduce-add the backward
// streams its statistics and adds its dQ tiles with.
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
constexpr uint32_t kStepRowsBytes = 16 * 128;  // one k16 step of an MN-major tile: 16 rows

template <int N, int K>
constexpr size_t shared_bytes() {
  return size_t(K) * (kM + N) * 2 + ptx_test::kSwizzleAlignment;
}

// D(64×N) = A(64×K)·B(K×N). B arrives row-major (N contiguous: K rows × N, MN-major). A arrives
// as Aᵀ row-major (K rows × 64, MN-major) when kMajorA is mn, else row-major (64 × K, K-major).
template <int N, int K, ptx::Major kMajorA, typename Element>
__global__ void __launch_bounds__(128) wgmma_mn_kernel(const uint16_t* a, const uint16_t* b, float* d_out) {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  uint8_t* a_tile = ptx_test::align_for_swizzle(dynamic_smem);
  uint8_t* b_tile = a_tile + kM * K * 2;
  if constexpr (kMajorA == ptx::Major::mn) ptx_test::fill_swizzled(a_tile, a, K, kM);
  else ptx_test::fill_swizzled(a_tile, a, kM, K);
  ptx_test::fill_swizzled(b_tile, b, K, N);
  ptx::fence_proxy_async_smem();
  __syncthreads();

  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = __int_as_float(0x7fffffff);
  const uint32_t a_base = ptx::smem_address(a_tile), b_base = ptx::smem_address(b_tile);
  ptx::fence_operands(d);
  ptx::fence();
#pragma unroll
  for (int step = 0; step < K / 16; ++step) {
    uint64_t a_desc;
    if constexpr (kMajorA == ptx::Major::mn) {
      a_desc = ptx::mnmajor_descriptor(a_base + step * kStepRowsBytes, K * 128);
    } else {  // k16 steps of 32 bytes inside a 64-column slab, then the next slab
      a_desc = ptx::kmajor_descriptor(a_base + step / 4 * kM * 128 + step % 4 * 32);
    }
    const uint64_t b_desc = ptx::mnmajor_descriptor(b_base + step * kStepRowsBytes, K * 128);
    ptx::mma_ss<N, Element, kMajorA, ptx::Major::mn>(d, a_desc, b_desc, step > 0);
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

template <int N, int K, ptx::Major kMajorA, typename Element>
void check_mn(uint32_t seed) {
  const ptx_test::RandomElements a = ptx_test::random_elements<Element>(size_t(kM) * K, seed);
  const ptx_test::RandomElements b = ptx_test::random_elements<Element>(size_t(K) * N, seed + 1);
  DeviceArray<uint16_t> a_dev, b_dev;
  DeviceArray<float> d_dev;
  HFA_CUDA_OK(d_dev.allocate(size_t(kM) * N));
  HFA_CUDA_OK(a_dev.assign(a.bits));
  HFA_CUDA_OK(b_dev.assign(b.bits));
  HFA_CUDA_OK(d_dev.poison());
  auto kernel = wgmma_mn_kernel<N, K, kMajorA, Element>;
  HFA_CUDA_OK(ptx_test::allow_shared_bytes(kernel, shared_bytes<N, K>()));
  kernel<<<1, 128, shared_bytes<N, K>()>>>(a_dev.get(), b_dev.get(), d_dev.get());
  HFA_KERNEL_OK();
  std::vector<float> d;
  HFA_CUDA_OK(d_dev.download(d));

  // A(m, k) is a[k·64 + m] when stored transposed, a[m·K + k] otherwise.
  Mismatches mismatches;
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < N; ++n) {
      double want = 0, magnitude = 0;
      for (int k = 0; k < K; ++k) {
        const float a_mk = kMajorA == ptx::Major::mn ? a.values[k * kM + m] : a.values[m * K + k];
        const double product = double(a_mk) * b.values[k * N + n];
        want += product;
        magnitude += std::fabs(product);
      }
      mismatches.add_unless_close(m, n, d[m * N + n], want, magnitude);
    }
  }
  EXPECT_EQ(mismatches.count(), 0u) << mismatches.report();
}

// dQ: K = 64 or 128 keys, N one slab. dK/dV of the head-dims split: K = 64 queries, N one or
// two slabs (the leading byte offset across slabs of B).
TEST(Sm90WgmmaMN, DqBothMnMajorBf16) {
  HFA_REQUIRE_HOPPER();
  check_mn<64, 128, ptx::Major::mn, __nv_bfloat16>(11);
  check_mn<64, 64, ptx::Major::mn, __nv_bfloat16>(12);
}
TEST(Sm90WgmmaMN, DqBothMnMajorFp16) {
  HFA_REQUIRE_HOPPER();
  check_mn<64, 128, ptx::Major::mn, __half>(13);
}
TEST(Sm90WgmmaMN, KeyGradientKMajorA) {
  HFA_REQUIRE_HOPPER();
  check_mn<64, 64, ptx::Major::k, __nv_bfloat16>(21);
  check_mn<128, 64, ptx::Major::k, __nv_bfloat16>(22);
  check_mn<128, 64, ptx::Major::k, __half>(23);
}

// Each of `blocks` CTAs copies `count` floats into shared memory with one bulk copy (on an
// mbarrier) and adds them into `sum` with one bulk reduce-add.
__global__ void bulk_kernel(const float* values, float* sum, int count, uint32_t* watchdog) {
  __shared__ alignas(128) float tile[1024];
  __shared__ ptx::Mbarrier full;
  if (threadIdx.x == 0) {
    full.init(1);
    ptx::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    full.arrive_expect_tx(count * 4);
    ptx::load_1d(tile, values, count * 4, &full, ptx::CacheHint::evict_normal);
    ptx_test::wait_or_trap(full, 0, watchdog, __LINE__);
    ptx::reduce_add_1d(sum, tile, count * 4);
    ptx::store_commit_group();
    ptx::store_wait_all();
  }
}

TEST(Sm90Bulk, CopyThenReduceAdd) {
  HFA_REQUIRE_HOPPER();
  constexpr int kCount = 1024, kBlocks = 3;
  const std::vector<float> values = ptx_test::random_values(kCount, 7);
  const std::vector<float> start = ptx_test::random_values(kCount, 8);
  DeviceArray<float> values_dev, sum_dev;
  HFA_CUDA_OK(values_dev.assign(values));
  HFA_CUDA_OK(sum_dev.assign(start));
  ptx_test::Watchdog watchdog;
  HFA_CUDA_OK(watchdog.create());
  bulk_kernel<<<kBlocks, 32>>>(values_dev.get(), sum_dev.get(), kCount, watchdog.device_word());
  HFA_WATCHED_KERNEL_OK(watchdog);
  std::vector<float> sum;
  HFA_CUDA_OK(sum_dev.download(sum));
  Mismatches mismatches;
  for (int i = 0; i < kCount; ++i) {
    const double want = start[i] + double(kBlocks) * values[i];
    if (!(std::fabs(sum[i] - want) <= 1e-5)) mismatches.add("sum[" + std::to_string(i) + "]", sum[i], want);
  }
  EXPECT_EQ(mismatches.count(), 0u) << mismatches.report();
}

}  // namespace
}  // namespace hfa::sm90
