// e4m3 wgmma as the FP8 forward uses it: S = Q·Kᵀ with both operands K-major in shared memory
// (ss), then O = P·V with P = S converted in registers by accumulator_to_operand (rs) and V
// transposed, its keys in fp8_key_order within each 16. A wrong fragment layout or key order
// gives a wrong O here, not a crash.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "quant/e4m3.hpp"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/wgmma.cuh"
#include "ptx_test_util.cuh"

namespace hfa::sm90 {
namespace {

using ptx_test::DeviceArray;
using ptx_test::Mismatches;

constexpr int kM = 64;
constexpr int kKeys = 128;   // the FP8 forward's kBlockN: one slab of transposed V
constexpr int kDimQK = 128;  // one slab of Q and K
constexpr int kSlab = 128;   // e4m3 columns a 128-byte slab row holds

// Byte offset of 8-bit element (row, column) in slabs of rows × 128 columns, 128-byte swizzle.
__host__ __device__ constexpr uint32_t swizzled_byte(uint32_t row, uint32_t column, uint32_t rows) {
  return column / kSlab * rows * 128 + row * 128 + ((column % kSlab / 16) ^ (row % 8)) * 16 +
         column % 16;
}

__device__ void fill_swizzled_bytes(uint8_t* tile, const uint8_t* source, int rows, int columns) {
  for (int i = threadIdx.x; i < rows * columns / 16; i += blockDim.x) {
    const int row = i / (columns / 16), column = i % (columns / 16) * 16;
    *reinterpret_cast<uint4*>(tile + swizzled_byte(row, column, rows)) =
        reinterpret_cast<const uint4*>(source)[i];
  }
}

// q: 64 × kDimQK, k: kKeys × kDimQK, vt: kDimV × kKeys (keys permuted), all row-major codes.
template <int kDimV>
__global__ void __launch_bounds__(128) wgmma_fp8_kernel(const uint8_t* q, const uint8_t* k,
                                                        const uint8_t* vt, float* s_out,
                                                        float* o_out) {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  uint8_t* q_tile = ptx_test::align_for_swizzle(dynamic_smem);
  uint8_t* k_tile = q_tile + kM * kDimQK;
  uint8_t* vt_tile = k_tile + kKeys * kDimQK;
  fill_swizzled_bytes(q_tile, q, kM, kDimQK);
  fill_swizzled_bytes(k_tile, k, kKeys, kDimQK);
  fill_swizzled_bytes(vt_tile, vt, kDimV, kKeys);
  ptx::fence_proxy_async_smem();
  __syncthreads();

  float s[kKeys / 2];
  ptx::fence_operands(s);
  ptx::fence();
#pragma unroll
  for (int step = 0; step < kDimQK / 32; ++step) {
    const uint64_t a = ptx::kmajor_descriptor(ptx::smem_address(q_tile) + step * 32);
    const uint64_t b = ptx::kmajor_descriptor(ptx::smem_address(k_tile) + step * 32);
    ptx::mma_ss<kKeys, __nv_fp8_e4m3>(s, a, b, step > 0);
  }
  ptx::commit_group();
  ptx::wait_group<0>();
  ptx::fence_operands(s);

  uint32_t p[kKeys / 8];
  ptx::accumulator_to_operand<__nv_fp8_e4m3>(s, p);
  float o[kDimV / 2];
#pragma unroll
  for (int i = 0; i < kDimV / 2; ++i) o[i] = 0.0f;
  ptx::fence_operands(o);
  ptx::fence_operands(p);
  ptx::fence();
#pragma unroll
  for (int step = 0; step < kKeys / 32; ++step) {
    const uint64_t b = ptx::kmajor_descriptor(ptx::smem_address(vt_tile) + step * 32);
    ptx::mma_rs<kDimV, __nv_fp8_e4m3>(o, *reinterpret_cast<const uint32_t(*)[4]>(&p[4 * step]), b,
                                      true);
  }
  ptx::commit_group();
  ptx::wait_group<0>();
  ptx::fence_operands(o);

  const ptx::FragmentCoords at = ptx::fragment_coords(threadIdx.x);
#pragma unroll
  for (int i = 0; i < kKeys / 2; ++i) {
    const int row = at.row0 + 8 * ptx::fragment_row_half(i);
    s_out[row * kKeys + ptx::fragment_column(i, at.column_pair)] = s[i];
  }
#pragma unroll
  for (int i = 0; i < kDimV / 2; ++i) {
    const int row = at.row0 + 8 * ptx::fragment_row_half(i);
    o_out[row * kDimV + ptx::fragment_column(i, at.column_pair)] = o[i];
  }
}

std::vector<uint8_t> random_codes(size_t count, uint32_t seed, float spread) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<uint8_t> codes(count);
  for (uint8_t& code : codes) code = quant::e4m3_encode(normal(generator));
  return codes;
}

template <int kDimV>
void check_fp8(uint32_t seed) {
  // Scores of a few units, so that P spans e4m3's range and its rounding matters.
  const std::vector<uint8_t> q = random_codes(size_t(kM) * kDimQK, seed, 0.5f);
  const std::vector<uint8_t> k = random_codes(size_t(kKeys) * kDimQK, seed + 1, 0.5f);
  const std::vector<uint8_t> v = random_codes(size_t(kKeys) * kDimV, seed + 2, 1.0f);
  std::vector<uint8_t> vt(v.size());
  for (int n = 0; n < kDimV; ++n)
    for (int c = 0; c < kKeys; ++c) {
      vt[n * kKeys + c] = v[(c / 16 * 16 + ptx::fp8_key_order(c % 16)) * kDimV + n];
    }
  DeviceArray<uint8_t> q_dev, k_dev, vt_dev;
  DeviceArray<float> s_dev, o_dev;
  HFA_CUDA_OK(q_dev.assign(q));
  HFA_CUDA_OK(k_dev.assign(k));
  HFA_CUDA_OK(vt_dev.assign(vt));
  HFA_CUDA_OK(s_dev.allocate(size_t(kM) * kKeys));
  HFA_CUDA_OK(o_dev.allocate(size_t(kM) * kDimV));
  HFA_CUDA_OK(s_dev.poison());
  HFA_CUDA_OK(o_dev.poison());

  const size_t smem = size_t(kM + kKeys) * kDimQK + size_t(kDimV) * kKeys + ptx_test::kSwizzleAlignment;
  auto kernel = wgmma_fp8_kernel<kDimV>;
  HFA_CUDA_OK(ptx_test::allow_shared_bytes(kernel, smem));
  kernel<<<1, 128, smem>>>(q_dev.get(), k_dev.get(), vt_dev.get(), s_dev.get(), o_dev.get());
  HFA_KERNEL_OK();
  std::vector<float> s, o;
  HFA_CUDA_OK(s_dev.download(s));
  HFA_CUDA_OK(o_dev.download(o));

  // S against float64; O against P = e4m3(S as the kernel computed it) times V, so that each
  // check sees one GEMM's error (the FP8 accumulator keeps fewer bits than fp32: a looser bound).
  Mismatches s_mismatches, o_mismatches;
  for (int m = 0; m < kM; ++m) {
    for (int j = 0; j < kKeys; ++j) {
      double want = 0.0, magnitude = 0.0;
      for (int d = 0; d < kDimQK; ++d) {
        const double product = double(quant::e4m3_decode(q[m * kDimQK + d])) *
                               quant::e4m3_decode(k[j * kDimQK + d]);
        want += product;
        magnitude += std::fabs(product);
      }
      const double got = s[m * kKeys + j];
      if (!(std::fabs(got - want) <= 1e-3 * magnitude + 1e-6)) {
        s_mismatches.add("S[" + std::to_string(m) + "][" + std::to_string(j) + "]", got, want);
      }
    }
    for (int n = 0; n < kDimV; ++n) {
      double want = 0.0, magnitude = 0.0;
      for (int j = 0; j < kKeys; ++j) {
        const double p = quant::e4m3_decode(quant::e4m3_encode(s[m * kKeys + j]));
        const double product = p * quant::e4m3_decode(v[j * kDimV + n]);
        want += product;
        magnitude += std::fabs(product);
      }
      const double got = o[m * kDimV + n];
      if (!(std::fabs(got - want) <= 1e-3 * magnitude + 1e-6)) {
        o_mismatches.add("O[" + std::to_string(m) + "][" + std::to_string(n) + "]", got, want);
      }
    }
  }
  EXPECT_EQ(s_mismatches.count(), 0u) << s_mismatches.report();
  EXPECT_EQ(o_mismatches.count(), 0u) << o_mismatches.report();
}

TEST(Sm90WgmmaFp8, ScoresThenProbabilitiesTimesTransposedV128) {
  HFA_REQUIRE_HOPPER();
  check_fp8<128>(31);
}

TEST(Sm90WgmmaFp8, ScoresThenProbabilitiesTimesTransposedV256) {
  HFA_REQUIRE_HOPPER();
  check_fp8<256>(57);
}

}  // namespace
}  // namespace hfa::sm90
