// The portable kernels for any x86-64 (baseline SSE2): the gemm keeps its accumulators in
// 4-float vectors, the other loops are plain C++ left to the compiler's vectorizer. Also the
// plain statement of what the AVX-512 kernels must compute.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/half_float.hpp"
#include "cpu/kernels.hpp"

namespace hfa::cpu {
namespace {

// The portable gemm: blocks of kBlockRows × kBlockColumns accumulators held in registers as
// 4-float vectors (GCC/Clang vector extensions: SSE2 on any x86-64), over the whole depth k;
// ragged edges take the plain loop.
using Vec4 = float __attribute__((vector_size(16)));
constexpr int kVecLanes = 4;
constexpr int kBlockRows = 4;
constexpr int kBlockVectors = 2;
constexpr int kBlockColumns = kBlockVectors * kVecLanes;

Vec4 load_vec4(const float* at) {
  Vec4 v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

void store_vec4(float* at, Vec4 v) { std::memcpy(at, &v, sizeof v); }

template <bool kTransposedA>
float a_element(const float* a, int lda, int i, int p) {
  return kTransposedA ? a[static_cast<int64_t>(p) * lda + i] : a[static_cast<int64_t>(i) * lda + p];
}

template <bool kTransposedA>
void gemm_full_block(int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                     bool accumulate) {
  Vec4 acc[kBlockRows][kBlockVectors];
  for (int r = 0; r < kBlockRows; ++r) {
    for (int v = 0; v < kBlockVectors; ++v) {
      acc[r][v] = accumulate ? load_vec4(c + r * ldc + v * kVecLanes) : Vec4{};
    }
  }
  for (int p = 0; p < k; ++p) {
    const float* b_row = b + static_cast<int64_t>(p) * ldb;
    Vec4 b_vec[kBlockVectors];
    for (int v = 0; v < kBlockVectors; ++v) b_vec[v] = load_vec4(b_row + v * kVecLanes);
    for (int r = 0; r < kBlockRows; ++r) {
      const float a_rp = a_element<kTransposedA>(a, lda, r, p);
      const Vec4 a_broadcast = {a_rp, a_rp, a_rp, a_rp};
      for (int v = 0; v < kBlockVectors; ++v) acc[r][v] += a_broadcast * b_vec[v];
    }
  }
  for (int r = 0; r < kBlockRows; ++r) {
    for (int v = 0; v < kBlockVectors; ++v) store_vec4(c + r * ldc + v * kVecLanes, acc[r][v]);
  }
}

// c[i][j] for i in [i0, i1), j in [j0, j1), one element at a time.
template <bool kTransposedA>
void gemm_edge(int i0, int i1, int j0, int j1, int k, const float* a, int lda, const float* b,
               int ldb, float* c, int ldc, bool accumulate) {
  for (int i = i0; i < i1; ++i) {
    for (int j = j0; j < j1; ++j) {
      float sum = accumulate ? c[static_cast<int64_t>(i) * ldc + j] : 0.0f;
      for (int p = 0; p < k; ++p) sum += a_element<kTransposedA>(a, lda, i, p) * b[static_cast<int64_t>(p) * ldb + j];
      c[static_cast<int64_t>(i) * ldc + j] = sum;
    }
  }
}

template <bool kTransposedA>
void gemm_blocks(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                 int ldc, bool accumulate) {
  const int full_rows = m / kBlockRows * kBlockRows, full_columns = n / kBlockColumns * kBlockColumns;
  for (int i0 = 0; i0 < full_rows; i0 += kBlockRows) {
    const float* a_block = kTransposedA ? a + i0 : a + static_cast<int64_t>(i0) * lda;
    for (int j0 = 0; j0 < full_columns; j0 += kBlockColumns) {
      gemm_full_block<kTransposedA>(k, a_block, lda, b + j0, ldb, c + static_cast<int64_t>(i0) * ldc + j0,
                                    ldc, accumulate);
    }
  }
  gemm_edge<kTransposedA>(0, full_rows, full_columns, n, k, a, lda, b, ldb, c, ldc, accumulate);
  gemm_edge<kTransposedA>(full_rows, m, 0, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void gemm(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
          bool accumulate) {
  gemm_blocks<false>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void gemm_at(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate) {
  gemm_blocks<true>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void columns_max(const float* x, int rows, int cols, int ld, float* max_inout) {
  for (int r = 0; r < rows; ++r) {
    const float* row = x + static_cast<int64_t>(r) * ld;
    for (int i = 0; i < cols; ++i) max_inout[i] = std::max(max_inout[i], row[i]);
  }
}

void exp2_columns(float* x, int rows, int cols, int ld, const float* shifts,
                  const float* shifts_low, float* sums_inout) {
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<int64_t>(r) * ld;
    for (int i = 0; i < cols; ++i) {
      row[i] = std::exp2(shifts_low ? (row[i] - shifts[i]) - shifts_low[i] : row[i] - shifts[i]);
    }
    if (sums_inout) {
      for (int i = 0; i < cols; ++i) sums_inout[i] += row[i];
    }
  }
}

void scale(float* x, int n, float factor) {
  for (int j = 0; j < n; ++j) x[j] *= factor;
}

void softcap(float* x, float* tanh_out, int n, float cap) {
  for (int j = 0; j < n; ++j) {
    const float t = std::tanh(x[j]);
    if (tanh_out) tanh_out[j] = t;
    x[j] = cap * t;
  }
}

float dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

void softmax_grad_rows(float* x, float* dp, const float* tanh, int rows, int cols, int ld,
                       const float* shift_high, const float* shift_low, const float* d) {
  for (int r = 0; r < rows; ++r) {
    float* p = x + static_cast<int64_t>(r) * ld;
    float* ds = dp + static_cast<int64_t>(r) * ld;
    for (int j = 0; j < cols; ++j) {
      p[j] = std::exp2((p[j] - shift_high[r]) - shift_low[r]);
      ds[j] = p[j] * (ds[j] - d[r]);
    }
    if (tanh != nullptr) {
      const float* t = tanh + static_cast<int64_t>(r) * ld;
      for (int j = 0; j < cols; ++j) ds[j] *= 1.0f - t[j] * t[j];
    }
  }
}

void load(DType dtype, const void* src, int n, float factor, float* dst) {
  switch (dtype) {
    case DType::f32: {
      const auto* in = static_cast<const float*>(src);
      for (int j = 0; j < n; ++j) dst[j] = factor * in[j];
      break;
    }
    case DType::f16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (int j = 0; j < n; ++j) dst[j] = factor * detail::fp16_to_float(in[j]);
      break;
    }
    case DType::bf16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (int j = 0; j < n; ++j) dst[j] = factor * detail::bf16_to_float(in[j]);
      break;
    }
    default:
      break;  // the backend accepts only the three types above
  }
}

void store(DType dtype, const float* src, int n, void* dst) {
  switch (dtype) {
    case DType::f32:
      std::memcpy(dst, src, sizeof(float) * static_cast<std::size_t>(n));
      break;
    case DType::f16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int j = 0; j < n; ++j) out[j] = detail::float_to_fp16(src[j]);
      break;
    }
    case DType::bf16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int j = 0; j < n; ++j) out[j] = detail::float_to_bf16(src[j]);
      break;
    }
    default:
      break;
  }
}

}  // namespace

const Kernels& generic_kernels() {
  static const Kernels table{"generic",     gemm,    gemm_at, columns_max,       exp2_columns,
                             scale,         softcap, dot,     softmax_grad_rows, load,
                             store};
  return table;
}

}  // namespace hfa::cpu
