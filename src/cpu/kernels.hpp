// The few inner loops the tiled CPU attention spends its time in, behind one table so that the
// instruction set is chosen once at run time: an AVX-512 build of them (kernels_avx512.cpp,
// compiled with AVX-512 flags) and a portable one (kernels_generic.cpp) for any x86-64.
//
// Everything here works on fp32 tiles in row-major order with leading dimensions in floats.
// Scores are kept in the exp2 domain (the softmax scale times log2(e) is folded into Q).
#pragma once

#include <cstdint>

#include "hfa/hfa.hpp"

namespace hfa::cpu {

struct Kernels {
  const char* isa;  // "avx512" or "generic"

  // c[m×n] = a[m×k]·b[k×n], plus the old c when accumulate.
  void (*gemm)(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
               int ldc, bool accumulate);
  // The same with a stored transposed: c[m×n] = aᵀ·b with a[k×m] (element (i, p) at a[p·lda + i]).
  void (*gemm_at)(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                  int ldc, bool accumulate);

  // Column-wise softmax steps on a transposed score tile x[rows×cols] (rows = keys, columns =
  // queries): max_inout[i] = max(max_inout[i], x[·][i]); then
  // x[j][i] = exp2((x[j][i] − shifts[i]) − shifts_low[i]) with sums_inout[i] += Σ_j x[j][i].
  // shifts_low (the low part of a shift carried as two floats) and sums may be null.
  // exp2(−inf) is exactly 0.
  void (*columns_max)(const float* x, int rows, int cols, int ld, float* max_inout);
  void (*exp2_columns)(float* x, int rows, int cols, int ld, const float* shifts,
                       const float* shifts_low, float* sums_inout);

  void (*scale)(float* x, int n, float factor);
  // x[j] = cap·tanh(x[j]) (policy::SoftcapLog2's form); tanh_out[j] = tanh(x[j]) when tanh_out
  // is not null.
  void (*softcap)(float* x, float* tanh_out, int n, float cap);
  float (*dot)(const float* a, const float* b, int n);

  // The softmax's backward on a block of rows (leading dimension ld), in place: scores x
  // become P = exp2((x − shift_high[r]) − shift_low[r]), and dp (dO·Vᵀ) becomes the score
  // gradient dS = P∘(dp − d[r]), times the softcap's tanh derivative 1 − t² when tanh (the
  // tanh of each score) is not null. One call a block, so the exp2 and the gradient share a
  // pass over the tile.
  void (*softmax_grad_rows)(float* x, float* dp, const float* tanh, int rows, int cols, int ld,
                            const float* shift_high, const float* shift_low, const float* d);

  // dst[j] = factor·src[j] with src in dtype (f32, f16, bf16); and back, rounding to nearest even.
  void (*load)(DType dtype, const void* src, int n, float factor, float* dst);
  void (*store)(DType dtype, const float* src, int n, void* dst);
};

const Kernels& generic_kernels();
// Null when this CPU lacks AVX-512 (F, BW, DQ, VL).
const Kernels* avx512_kernels();

// The table every kernel uses: AVX-512 when the CPU has it, unless the environment variable
// HFA_CPU_ISA=generic forces the portable path (for tests and comparisons). Chosen once.
const Kernels& active_kernels();

}  // namespace hfa::cpu
