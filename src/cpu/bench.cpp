#include "cpu/bench.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/thread_pool.hpp"

namespace hfa::cpu {
namespace {

// cblas_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                            int, float, float*, int);
constexpr int kCblasRowMajor = 101;
constexpr int kCblasNoTrans = 111;
constexpr int kCblasTrans = 112;

// OpenBLAS 0.3.21 (Debian 12) predates Zen 5 and runs it on its AVX2 "Haswell" kernels; on a CPU
// with AVX-512 ask for its AVX-512 ("SkylakeX") kernels instead, unless the user chose a core
// type. It reads the variable when the library loads, so this must precede dlopen.
CblasSgemm load_openblas_sgemm() {
  static const CblasSgemm sgemm = [] () -> CblasSgemm {
    if (__builtin_cpu_supports("avx512f")) setenv("OPENBLAS_CORETYPE", "SkylakeX", 0);
    for (const char* name : {"libopenblas.so.0", "libopenblas.so"}) {
      if (void* library = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
        if (void* symbol = dlsym(library, "cblas_sgemm")) return reinterpret_cast<CblasSgemm>(symbol);
      }
    }
    return nullptr;
  }();
  return sgemm;
}

// hfa's own GEMM: C panels of kPanelRows × kPanelColumns spread over the pool, each summed over
// k in slices of kDepth so that the B slice (kDepth × kPanelColumns) stays in L2.
constexpr int kPanelRows = 96;
constexpr int kPanelColumns = 256;
constexpr int kDepth = 256;

void own_sgemm(bool transpose_b, int m, int n, int k, const float* a, const float* b, float* c) {
  // The micro-kernel wants B row-major (k × n); a transposed B is copied once.
  std::vector<float> b_rows;
  if (transpose_b) {
    b_rows.resize(static_cast<std::size_t>(k) * n);
    for (int j = 0; j < n; ++j) {
      for (int p = 0; p < k; ++p) b_rows[static_cast<std::size_t>(p) * n + j] = b[static_cast<std::size_t>(j) * k + p];
    }
    b = b_rows.data();
  }
  const Kernels& kernels = active_kernels();
  const int row_panels = (m + kPanelRows - 1) / kPanelRows;
  const int column_panels = (n + kPanelColumns - 1) / kPanelColumns;
  ThreadPool::shared().parallel_for(int64_t{row_panels} * column_panels, [&](int64_t item, int) {
    const int i0 = static_cast<int>(item / column_panels) * kPanelRows;
    const int j0 = static_cast<int>(item % column_panels) * kPanelColumns;
    const int rows = std::min(kPanelRows, m - i0), columns = std::min(kPanelColumns, n - j0);
    for (int p0 = 0; p0 < k; p0 += kDepth) {
      kernels.gemm(rows, columns, std::min(kDepth, k - p0), a + static_cast<int64_t>(i0) * k + p0, k,
                   b + static_cast<int64_t>(p0) * n + j0, n, c + static_cast<int64_t>(i0) * n + j0, n,
                   p0 > 0);
    }
  });
}

// C[m×n] = A[m×k]·B with B stored k × n, or n × k when transpose_b.
using Sgemm = void (*)(bool transpose_b, int m, int n, int k, const float* a, const float* b, float* c);

void openblas_sgemm(bool transpose_b, int m, int n, int k, const float* a, const float* b, float* c) {
  load_openblas_sgemm()(kCblasRowMajor, kCblasNoTrans, transpose_b ? kCblasTrans : kCblasNoTrans, m,
                        n, k, 1.0f, a, k, b, transpose_b ? k : n, 0.0f, c, n);
}

struct GemmImplementation {
  std::string name;
  Sgemm run;
};

// Every GEMM at hand: the yardstick is the fastest of them on the shape measured.
std::vector<GemmImplementation> gemm_implementations() {
  std::vector<GemmImplementation> all;
  if (load_openblas_sgemm()) {
    const char* core = std::getenv("OPENBLAS_CORETYPE");
    all.push_back({std::string("OpenBLAS cblas_sgemm (libopenblas.so.0") +
                       (core ? std::string(", OPENBLAS_CORETYPE=") + core : std::string()) + ")",
                   openblas_sgemm});
  }
  all.push_back({std::string("hfa blocked GEMM (") + active_kernels().isa + " micro-kernel)", own_sgemm});
  return all;
}

std::vector<float> random_matrix(std::size_t count, unsigned seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal;
  std::vector<float> values(count);
  for (float& x : values) x = normal(generator);
  return values;
}

// Best GFLOP/s of `run` (doing `flops` each time) over repeats lasting at least min_seconds.
template <class Run>
double best_rate(double flops, double min_seconds, Run&& run) {
  using Clock = std::chrono::steady_clock;
  run();  // warm-up: threads started, pages touched, caches warm
  double best_seconds = 1e30, total = 0.0;
  for (int repeat = 0; repeat < 3 || total < min_seconds; ++repeat) {
    const auto start = Clock::now();
    run();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best_seconds = std::min(best_seconds, seconds);
    total += seconds;
  }
  return flops / best_seconds * 1e-9;
}

// The best rate of the fastest implementation on `work(sgemm)`; `which` names it and lists all.
template <class Work>
double fastest_gemm_rate(double flops, double min_seconds, std::string* which, Work&& work) {
  double best = 0.0;
  std::string winner, all;
  for (const GemmImplementation& gemm : gemm_implementations()) {
    const double rate = best_rate(flops, min_seconds, [&] { work(gemm.run); });
    char line[64];
    std::snprintf(line, sizeof line, " %.1f GFLOP/s", rate);
    all += (all.empty() ? "" : "; ") + gemm.name + line;
    if (rate > best) {
      best = rate;
      winner = gemm.name;
    }
  }
  if (which) *which = winner + " [fastest of: " + all + "]";
  return best;
}

}  // namespace

double measure_fp32_gemm_gflops(int m, int n, int k, std::string* which, double min_seconds) {
  const auto a = random_matrix(static_cast<std::size_t>(m) * k, 1);
  const auto b = random_matrix(static_cast<std::size_t>(k) * n, 2);
  std::vector<float> c(static_cast<std::size_t>(m) * n);
  return fastest_gemm_rate(2.0 * m * n * k, min_seconds, which, [&](Sgemm sgemm) {
    sgemm(false, m, n, k, a.data(), b.data(), c.data());
  });
}

double measure_attention_gemm_gflops(int seqlen_q, int seqlen_k, int hdim, std::string* which,
                                     double min_seconds) {
  const auto q = random_matrix(static_cast<std::size_t>(seqlen_q) * hdim, 1);
  const auto k = random_matrix(static_cast<std::size_t>(seqlen_k) * hdim, 2);
  const auto v = random_matrix(static_cast<std::size_t>(seqlen_k) * hdim, 3);
  std::vector<float> s(static_cast<std::size_t>(seqlen_q) * seqlen_k);
  std::vector<float> o(static_cast<std::size_t>(seqlen_q) * hdim);
  return fastest_gemm_rate(4.0 * seqlen_q * seqlen_k * hdim, min_seconds, which, [&](Sgemm sgemm) {
    sgemm(true, seqlen_q, seqlen_k, hdim, q.data(), k.data(), s.data());   // S = Q·Kᵀ
    sgemm(false, seqlen_q, hdim, seqlen_k, s.data(), v.data(), o.data());  // O = S·V
  });
}

}  // namespace hfa::cpu
