// The kernel tables, each ISA on its own, against float64 arithmetic: the portable table always,
// the AVX-512 one where this CPU has it (whatever HFA_CPU_ISA says).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/half_float.hpp"
#include "cpu/kernels.hpp"

namespace hfa::cpu {
namespace {

std::vector<const Kernels*> kernel_tables() {
  std::vector<const Kernels*> tables{&generic_kernels()};
  if (const Kernels* avx512 = avx512_kernels()) tables.push_back(avx512);
  return tables;
}

std::vector<float> random_floats(std::size_t count, unsigned seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal;
  std::vector<float> values(count);
  for (float& x : values) x = normal(generator);
  return values;
}

TEST(Kernels, GemmBothLayoutsOddSizes) {
  for (const Kernels* kernels : kernel_tables()) {
    for (int m : {1, 5, 13}) {
      for (int n : {1, 16, 37, 70, 130}) {
        for (int k : {1, 19, 64}) {
          const int lda = k + 3, lda_t = m + 2, ldb = n + 5, ldc = n + 1;
          const auto a = random_floats(static_cast<std::size_t>(m) * lda, 1);
          const auto a_t = random_floats(static_cast<std::size_t>(k) * lda_t, 2);
          const auto b = random_floats(static_cast<std::size_t>(k) * ldb, 3);
          const auto c0 = random_floats(static_cast<std::size_t>(m) * ldc, 4);
          for (bool transposed : {false, true}) {
            for (bool accumulate : {false, true}) {
              std::vector<float> c = c0;
              if (transposed) {
                kernels->gemm_at(m, n, k, a_t.data(), lda_t, b.data(), ldb, c.data(), ldc, accumulate);
              } else {
                kernels->gemm(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, accumulate);
              }
              for (int i = 0; i < m; ++i) {
                for (int j = 0; j < ldc; ++j) {
                  if (j >= n) {  // outside the product: untouched
                    ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]) << kernels->isa;
                    continue;
                  }
                  double expected = accumulate ? c0[i * ldc + j] : 0.0;
                  for (int p = 0; p < k; ++p) {
                    const double a_ip = transposed ? a_t[p * lda_t + i] : a[i * lda + p];
                    expected += a_ip * b[p * ldb + j];
                  }
                  ASSERT_NEAR(c[i * ldc + j], expected, 1e-5 * (k + 1))
                      << kernels->isa << " m " << m << " n " << n << " k " << k
                      << (transposed ? " transposed" : "") << " at " << i << "," << j;
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(Kernels, Exp2IsAccurateAndExactlyZeroBelowRange) {
  const float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> x;
  for (float value = -130.0f; value <= 0.5f; value += 0.01171875f) x.push_back(value);
  x.push_back(-kInf);
  const std::vector<float> shifts(x.size(), 0.25f);
  for (const Kernels* kernels : kernel_tables()) {
    // The row form through the softmax's backward (its P), the column form with sums.
    std::vector<float> row = x, dp(x.size(), 1.0f);
    const float high = 0.125f, low = 0.125f, d = 0.0f;
    kernels->softmax_grad_rows(row.data(), dp.data(), nullptr, 1, static_cast<int>(row.size()), 0, &high, &low, &d);
    std::vector<float> columns = x;
    std::vector<float> sums(x.size(), 0.0f);
    kernels->exp2_columns(columns.data(), 1, static_cast<int>(x.size()), 0, shifts.data(), nullptr, sums.data());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double shifted = static_cast<double>(x[i]) - 0.25;
      const double expected = shifted < -126.0 ? 0.0 : std::exp2(shifted);
      if (shifted < -126.0) {
        // Tiny values may flush to zero (the AVX-512 table does, on purpose); never more.
        EXPECT_LE(row[i], 1.2e-38f) << kernels->isa;
      } else {
        EXPECT_NEAR(row[i], expected, 3e-7 * expected) << kernels->isa << " x " << x[i];
      }
      EXPECT_EQ(columns[i], row[i]) << kernels->isa;
      EXPECT_EQ(sums[i], row[i]) << kernels->isa;
    }
    EXPECT_EQ(row.back(), 0.0f) << kernels->isa << ": exp2(-inf) must be exactly 0";
  }
}

TEST(Kernels, SoftcapAndTanh) {
  const auto x = random_floats(101, 5);
  for (const Kernels* kernels : kernel_tables()) {
    std::vector<float> capped(x.size()), tanh(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) capped[i] = 4.0f * x[i];
    kernels->softcap(capped.data(), tanh.data(), static_cast<int>(x.size()), 3.0f);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double t = std::tanh(4.0 * x[i]);
      EXPECT_NEAR(tanh[i], t, 2e-7) << kernels->isa;
      EXPECT_NEAR(capped[i], 3.0 * t, 6e-7) << kernels->isa;
    }
  }
}

// P and dS of a block of rows against float64, with and without the softcap's factor; columns
// past `cols` (the leading dimension's padding) untouched.
TEST(Kernels, SoftmaxGradRows) {
  const int rows = 3, cols = 37, ld = 40;
  const auto x0 = random_floats(rows * ld, 9), dp0 = random_floats(rows * ld, 10);
  const auto t = random_floats(rows * ld, 11);
  const float high[rows] = {0.5f, -1.0f, 2.0f}, low[rows] = {1e-7f, 0.0f, -3e-8f};
  const float d[rows] = {0.25f, -0.5f, 1.5f};
  for (const Kernels* kernels : kernel_tables()) {
    for (bool softcap : {false, true}) {
      std::vector<float> x = x0, dp = dp0;
      kernels->softmax_grad_rows(x.data(), dp.data(), softcap ? t.data() : nullptr, rows, cols, ld, high, low, d);
      for (int r = 0; r < rows; ++r) {
        for (int j = 0; j < ld; ++j) {
          const int at = r * ld + j;
          if (j >= cols) {
            ASSERT_EQ(x[at], x0[at]) << kernels->isa;
            ASSERT_EQ(dp[at], dp0[at]) << kernels->isa;
            continue;
          }
          const double p = std::exp2((double{x0[at]} - high[r]) - low[r]);
          const double ds = p * (dp0[at] - d[r]) * (softcap ? 1.0 - double{t[at]} * t[at] : 1.0);
          EXPECT_NEAR(x[at], p, 1e-6 * p) << kernels->isa << " " << r << "," << j;
          EXPECT_NEAR(dp[at], ds, 1e-6 * (std::abs(ds) + p)) << kernels->isa << " " << r << "," << j;
        }
      }
    }
  }
}

TEST(Kernels, ColumnMaxAndDot) {
  const int rows = 5, cols = 37, ld = 40;
  const auto x = random_floats(rows * ld, 6);
  const auto d = random_floats(cols, 7);
  for (const Kernels* kernels : kernel_tables()) {
    std::vector<float> max(cols, 0.5f);
    kernels->columns_max(x.data(), rows, cols, ld, max.data());
    for (int i = 0; i < cols; ++i) {
      float expected = 0.5f;
      for (int r = 0; r < rows; ++r) expected = std::max(expected, x[r * ld + i]);
      EXPECT_EQ(max[i], expected) << kernels->isa;
    }
    EXPECT_NEAR(kernels->dot(x.data(), d.data(), cols), [&] {
      double sum = 0;
      for (int i = 0; i < cols; ++i) sum += double{x[i]} * d[i];
      return sum;
    }(), 1e-5) << kernels->isa;
  }
}

// Conversions agree bit for bit with half_float.hpp (round to nearest even), subnormals,
// overflow and infinities included.
TEST(Kernels, LoadStoreMatchHalfFloat) {
  std::vector<float> values = random_floats(1000, 8);
  for (float& x : values) x *= 300.0f;
  for (float special : {0.0f, -0.0f, 1e-6f, -3e-7f, 6.1e-5f, 65504.0f, 65520.0f, 1e6f, 3.4e38f,
                        1.00048828125f /* a tie in f16 */, 1.00390625f /* a tie in bf16 */,
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()}) {
    values.push_back(special);
  }
  const int n = static_cast<int>(values.size());
  for (const Kernels* kernels : kernel_tables()) {
    std::vector<uint16_t> f16(n), bf16(n);
    kernels->store(DType::f16, values.data(), n, f16.data());
    kernels->store(DType::bf16, values.data(), n, bf16.data());
    std::vector<float> back16(n), back_bf16(n), back32(n);
    kernels->load(DType::f16, f16.data(), n, 2.0f, back16.data());
    kernels->load(DType::bf16, bf16.data(), n, 1.0f, back_bf16.data());
    kernels->load(DType::f32, values.data(), n, 1.0f, back32.data());
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(f16[i], detail::float_to_fp16(values[i])) << kernels->isa << " " << values[i];
      ASSERT_EQ(bf16[i], detail::float_to_bf16(values[i])) << kernels->isa << " " << values[i];
      ASSERT_EQ(back16[i], 2.0f * detail::fp16_to_float(f16[i])) << kernels->isa;
      ASSERT_EQ(back_bf16[i], detail::bf16_to_float(bf16[i])) << kernels->isa;
      ASSERT_EQ(back32[i], values[i]) << kernels->isa;
    }
  }
}

}  // namespace
}  // namespace hfa::cpu
