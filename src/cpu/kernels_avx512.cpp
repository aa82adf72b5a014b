// The AVX-512 kernels. This file alone is compiled with AVX-512 flags (src/cpu/CMakeLists.txt)
// and is only called after the CPU was checked (kernels_select.cpp).
//
// Everything in it lives in an unnamed namespace and uses intrinsics only, no inline functions
// from other headers: an inline function compiled here with AVX-512 could otherwise be picked by
// the linker for callers in portable files and crash CPUs without AVX-512.
#include <immintrin.h>

#include <cstdint>

#include "cpu/kernels.hpp"

namespace hfa::cpu {
namespace {

constexpr int kLanes = 16;  // floats in a zmm register

// Register blocking of the gemm micro-kernel: kGemmRows rows of A times kGemmVectors vectors of
// B make 6·4 = 24 accumulators, leaving 8 of the 32 zmm registers for B and broadcasts.
constexpr int kGemmRows = 6;
constexpr int kGemmVectors = 4;
constexpr int kGemmColumns = kGemmVectors * kLanes;

__mmask16 tail_mask(int count) {  // the first `count` lanes, count in [0, 16]
  return count >= kLanes ? static_cast<__mmask16>(0xffff)
                         : static_cast<__mmask16>((1u << count) - 1u);
}

// c[kRows × (16·kVectors)] (+)= a[kRows × k]·b[k × ...]; the last vector covers `tail` lanes.
// a is read row-major (a[r·lda + p]) or, kTransposedA, column-major (a[p·lda + r]).
template <bool kTransposedA, int kRows, int kVectors>
void gemm_tile(int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
               __mmask16 tail, bool accumulate) {
  __m512 acc[kRows][kVectors];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      const __mmask16 mask = v == kVectors - 1 ? tail : static_cast<__mmask16>(0xffff);
      acc[r][v] = accumulate ? _mm512_maskz_loadu_ps(mask, c + static_cast<int64_t>(r) * ldc + v * kLanes)
                             : _mm512_setzero_ps();
    }
  }
  for (int p = 0; p < k; ++p) {
    const float* b_row = b + static_cast<int64_t>(p) * ldb;
    __m512 b_vec[kVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      b_vec[v] = v == kVectors - 1 ? _mm512_maskz_loadu_ps(tail, b_row + v * kLanes)
                                   : _mm512_loadu_ps(b_row + v * kLanes);
    }
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512 a_broadcast = _mm512_set1_ps(kTransposedA ? a[static_cast<int64_t>(p) * lda + r]
                                                             : a[static_cast<int64_t>(r) * lda + p]);
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_fmadd_ps(a_broadcast, b_vec[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      const __mmask16 mask = v == kVectors - 1 ? tail : static_cast<__mmask16>(0xffff);
      _mm512_mask_storeu_ps(c + static_cast<int64_t>(r) * ldc + v * kLanes, mask, acc[r][v]);
    }
  }
}

using GemmTile = void (*)(int, const float*, int, const float*, int, float*, int, __mmask16, bool);

#define HFA_GEMM_TILE_ROW(at, rows)                                                  \
  {                                                                                 \
    gemm_tile<at, rows, 1>, gemm_tile<at, rows, 2>, gemm_tile<at, rows, 3>,         \
        gemm_tile<at, rows, 4>                                                      \
  }
#define HFA_GEMM_TILES(at)                                                          \
  {                                                                                 \
    HFA_GEMM_TILE_ROW(at, 1), HFA_GEMM_TILE_ROW(at, 2), HFA_GEMM_TILE_ROW(at, 3),   \
        HFA_GEMM_TILE_ROW(at, 4), HFA_GEMM_TILE_ROW(at, 5), HFA_GEMM_TILE_ROW(at, 6) \
  }
// kGemmTiles[transposed a][rows − 1][vectors − 1]
const GemmTile kGemmTiles[2][kGemmRows][kGemmVectors] = {HFA_GEMM_TILES(false),
                                                         HFA_GEMM_TILES(true)};
#undef HFA_GEMM_TILES
#undef HFA_GEMM_TILE_ROW

template <bool kTransposedA>
void gemm_blocks(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                 int ldc, bool accumulate) {
  for (int j0 = 0; j0 < n; j0 += kGemmColumns) {
    const int columns = n - j0 < kGemmColumns ? n - j0 : kGemmColumns;
    const int vectors = (columns + kLanes - 1) / kLanes;
    const __mmask16 tail = tail_mask(columns - (vectors - 1) * kLanes);
    for (int i0 = 0; i0 < m; i0 += kGemmRows) {
      const int rows = m - i0 < kGemmRows ? m - i0 : kGemmRows;
      const float* a_block = kTransposedA ? a + i0 : a + static_cast<int64_t>(i0) * lda;
      kGemmTiles[kTransposedA][rows - 1][vectors - 1](
          k, a_block, lda, b + j0, ldb, c + static_cast<int64_t>(i0) * ldc + j0, ldc, tail,
          accumulate);
    }
  }
}

void gemm(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
          bool accumulate) {
  gemm_blocks<false>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void gemm_at(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate) {
  gemm_blocks<true>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

// 2^x: x = n + f with f in [−½, ½]; 2^f by its Taylor series to degree 7 (relative error
// below 1e-8, under float rounding); 2^n by scalef. Below −126 the result is 0 (also −inf),
// so masked scores give exactly zero probability and no denormals.
__m512 exp2_vec(__m512 x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 poly = _mm512_set1_ps(1.525273380405984e-05f);  // ln2^7 / 7!
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(1.5403530393381606e-04f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(1.3333558146428443e-03f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(9.618129107628477e-03f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(5.550410866482158e-02f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(2.402265069591007e-01f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(6.931471805599453e-01f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, poly, n);
}

// tanh(u) = sign(u)·(1 − e)/(1 + e) with e = exp(−2|u|) in (0, 1]: no overflow anywhere.
__m512 tanh_vec(__m512 u) {
  const __m512 sign_bit = _mm512_set1_ps(-0.0f);
  const __m512 magnitude = _mm512_andnot_ps(sign_bit, u);
  const __m512 e = exp2_vec(_mm512_mul_ps(magnitude, _mm512_set1_ps(-2.885390081777927f)));  // −2·log2(e)
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  return _mm512_or_ps(t, _mm512_and_ps(u, sign_bit));
}

void columns_max(const float* x, int rows, int cols, int ld, float* max_inout) {
  for (int i = 0; i < cols; i += kLanes) {
    const __mmask16 mask = tail_mask(cols - i);
    __m512 result = _mm512_maskz_loadu_ps(mask, max_inout + i);
    for (int r = 0; r < rows; ++r) {
      result = _mm512_max_ps(result, _mm512_maskz_loadu_ps(mask, x + static_cast<int64_t>(r) * ld + i));
    }
    _mm512_mask_storeu_ps(max_inout + i, mask, result);
  }
}

void exp2_columns(float* x, int rows, int cols, int ld, const float* shifts,
                  const float* shifts_low, float* sums_inout) {
  for (int i = 0; i < cols; i += kLanes) {
    const __mmask16 mask = tail_mask(cols - i);
    const __m512 shift = _mm512_maskz_loadu_ps(mask, shifts + i);
    const __m512 shift_low = shifts_low ? _mm512_maskz_loadu_ps(mask, shifts_low + i) : _mm512_setzero_ps();
    __m512 sum = _mm512_setzero_ps();
    for (int r = 0; r < rows; ++r) {
      float* at = x + static_cast<int64_t>(r) * ld + i;
      const __m512 shifted = _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, at), shift), shift_low);
      const __m512 p = exp2_vec(shifted);
      _mm512_mask_storeu_ps(at, mask, p);
      sum = _mm512_add_ps(sum, p);
    }
    if (sums_inout) {
      _mm512_mask_storeu_ps(sums_inout + i, mask, _mm512_add_ps(sum, _mm512_maskz_loadu_ps(mask, sums_inout + i)));
    }
  }
}

void scale(float* x, int n, float factor) {
  const __m512 factor_vec = _mm512_set1_ps(factor);
  for (int j = 0; j < n; j += kLanes) {
    const __mmask16 mask = tail_mask(n - j);
    _mm512_mask_storeu_ps(x + j, mask, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + j), factor_vec));
  }
}

void softcap(float* x, float* tanh_out, int n, float cap) {
  const __m512 cap_vec = _mm512_set1_ps(cap);
  for (int j = 0; j < n; j += kLanes) {
    const __mmask16 mask = tail_mask(n - j);
    const __m512 t = tanh_vec(_mm512_maskz_loadu_ps(mask, x + j));
    if (tanh_out) _mm512_mask_storeu_ps(tanh_out + j, mask, t);
    _mm512_mask_storeu_ps(x + j, mask, _mm512_mul_ps(t, cap_vec));
  }
}

float dot(const float* a, const float* b, int n) {
  __m512 sum = _mm512_setzero_ps();
  for (int j = 0; j < n; j += kLanes) {
    const __mmask16 mask = tail_mask(n - j);
    sum = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a + j), _mm512_maskz_loadu_ps(mask, b + j), sum);
  }
  return _mm512_reduce_add_ps(sum);
}

void softmax_grad_rows(float* x, float* dp, const float* tanh, int rows, int cols, int ld,
                       const float* shift_high, const float* shift_low, const float* d) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int r = 0; r < rows; ++r) {
    const __m512 high = _mm512_set1_ps(shift_high[r]);
    const __m512 low = _mm512_set1_ps(shift_low[r]);
    const __m512 d_vec = _mm512_set1_ps(d[r]);
    float* p_row = x + static_cast<int64_t>(r) * ld;
    float* ds_row = dp + static_cast<int64_t>(r) * ld;
    for (int j = 0; j < cols; j += kLanes) {
      const __mmask16 mask = tail_mask(cols - j);
      const __m512 p = exp2_vec(_mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, p_row + j), high), low));
      _mm512_mask_storeu_ps(p_row + j, mask, p);
      __m512 ds = _mm512_mul_ps(p, _mm512_sub_ps(_mm512_maskz_loadu_ps(mask, ds_row + j), d_vec));
      if (tanh != nullptr) {
        const __m512 t = _mm512_maskz_loadu_ps(mask, tanh + static_cast<int64_t>(r) * ld + j);
        ds = _mm512_mul_ps(ds, _mm512_fnmadd_ps(t, t, one));
      }
      _mm512_mask_storeu_ps(ds_row + j, mask, ds);
    }
  }
}

__m512 load_vec(DType dtype, const void* src, int j, __mmask16 mask) {
  switch (dtype) {
    case DType::f32:
      return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(src) + j);
    case DType::f16:
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(src) + j));
    case DType::bf16: {
      const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(src) + j));
      return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
    }
    default:
      return _mm512_setzero_ps();
  }
}

void load(DType dtype, const void* src, int n, float factor, float* dst) {
  const __m512 factor_vec = _mm512_set1_ps(factor);
  for (int j = 0; j < n; j += kLanes) {
    const __mmask16 mask = tail_mask(n - j);
    _mm512_mask_storeu_ps(dst + j, mask, _mm512_mul_ps(load_vec(dtype, src, j, mask), factor_vec));
  }
}

// float → bf16 bits, rounding to nearest even; NaN stays a (quiet) NaN.
__m256i to_bf16_vec(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512i quiet_nan = _mm512_or_si512(bits, _mm512_set1_epi32(0x00400000));
  const __m512i result = _mm512_mask_mov_epi32(rounded, is_nan, quiet_nan);
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(result, 16));
}

void store(DType dtype, const float* src, int n, void* dst) {
  for (int j = 0; j < n; j += kLanes) {
    const __mmask16 mask = tail_mask(n - j);
    const __m512 x = _mm512_maskz_loadu_ps(mask, src + j);
    switch (dtype) {
      case DType::f32:
        _mm512_mask_storeu_ps(static_cast<float*>(dst) + j, mask, x);
        break;
      case DType::f16:
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(dst) + j, mask,
                                 _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        break;
      case DType::bf16:
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(dst) + j, mask, to_bf16_vec(x));
        break;
      default:
        return;
    }
  }
}

const Kernels kAvx512Kernels{"avx512",      gemm,    gemm_at, columns_max,       exp2_columns,
                             scale,         softcap, dot,     softmax_grad_rows, load,
                             store};

}  // namespace

// Declared in kernels_select.cpp, which checks the CPU before handing this out.
const Kernels& avx512_kernels_unchecked() { return kAvx512Kernels; }

}  // namespace hfa::cpu
