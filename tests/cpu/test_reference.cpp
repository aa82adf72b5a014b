// The oracle itself: tiny cases worked out by hand, and its gradients against central finite
// differences of its own forward (float64).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/attention_case.hpp"
#include "cpu/reference.hpp"

namespace hfa::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// q (1 × 1), k = [0, 1], v = [1, 3], scale 1: scores [0, 1].
AttentionData two_key_case(float softcap) {
  AttentionCase c;
  c.seqlen_q = 1;
  c.seqlen_k = 2;
  c.hdim_qk = c.hdim_v = 1;
  c.softmax_scale = 1.0f;
  c.softcap = softcap;
  AttentionData data(c);
  data.q.set(0, 1.0);
  data.k.set(0, 0.0);
  data.k.set(1, 1.0);
  data.v.set(0, 1.0);
  data.v.set(1, 3.0);
  return data;
}

TEST(Reference, TwoKeysByHand) {
  AttentionData data = two_key_case(0.0f);
  double out = 0, lse = 0;
  cpu::reference_forward(data.forward_problem(), &out, &lse);
  const double e = std::exp(1.0);
  EXPECT_NEAR(out, (1.0 + 3.0 * e) / (1.0 + e), 1e-15);
  EXPECT_NEAR(lse, std::log(1.0 + e), 1e-15);
}

TEST(Reference, SoftcapByHand) {
  AttentionData data = two_key_case(2.0f);
  double out = 0, lse = 0;
  cpu::reference_forward(data.forward_problem(), &out, &lse);
  const double capped = 2.0 * std::tanh(0.5);  // softcap·tanh(1 / softcap); the first score stays 0
  const double e = std::exp(capped);
  EXPECT_NEAR(out, (1.0 + 3.0 * e) / (1.0 + e), 1e-15);
  EXPECT_NEAR(lse, std::log(1.0 + e), 1e-15);
}

// seqlen_q 3 > seqlen_k 2, causal, bottom-right aligned: row 0 sees nothing, row 1 key 0,
// row 2 keys 0 and 1.
TEST(Reference, CausalBottomRightByHand) {
  AttentionCase c;
  c.seqlen_q = 3;
  c.seqlen_k = 2;
  c.hdim_qk = c.hdim_v = 1;
  c.softmax_scale = 1.0f;
  c.causal = true;
  AttentionData data(c);
  for (int i = 0; i < 3; ++i) data.q.set(i, 1.0);
  data.k.set(0, 0.0);
  data.k.set(1, 1.0);
  data.v.set(0, 1.0);
  data.v.set(1, 3.0);
  double out[3], lse[3];
  cpu::reference_forward(data.forward_problem(), out, lse);
  const double e = std::exp(1.0);
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(lse[0], -kInf);
  EXPECT_NEAR(out[1], 1.0, 1e-15);
  EXPECT_NEAR(lse[1], 0.0, 1e-15);
  EXPECT_NEAR(out[2], (1.0 + 3.0 * e) / (1.0 + e), 1e-15);

  data.dout.set(0, 1.0);
  double dq[3], dk[2], dv[2];
  cpu::reference_backward(data.backward_problem(), dq, dk, dv);
  EXPECT_EQ(dq[0], 0.0);  // the empty row has no gradient, and no NaN anywhere
  for (double x : {dq[1], dq[2], dk[0], dk[1], dv[0], dv[1]}) EXPECT_TRUE(std::isfinite(x));
}

// L = Σ out∘W with W = dout: dL/dx from reference_backward against central differences.
// Inputs are multiples of 2⁻¹⁰ and the step is 2⁻¹⁰, so x ± h is exact in f32.
void check_gradients_by_finite_differences(AttentionCase c) {
  c.dtype = DType::f32;
  AttentionData data(c);
  constexpr double kGrid = 1.0 / 1024;
  for (HostTensor* t : {&data.q, &data.k, &data.v, &data.dout}) {
    for (int64_t i = 0; i < t->numel(); ++i) t->set(i, std::round(t->get(i) / kGrid) * kGrid);
  }
  const std::vector<double> weight = data.dout.values();
  std::vector<double> out(static_cast<std::size_t>(data.out.numel()));
  auto loss = [&] {
    cpu::reference_forward(data.forward_problem(), out.data(), nullptr);
    double sum = 0.0;
    for (std::size_t i = 0; i < out.size(); ++i) sum += out[i] * weight[i];
    return sum;
  };
  std::vector<double> dq(data.dq.numel()), dk(data.dk.numel()), dv(data.dv.numel());
  cpu::reference_backward(data.backward_problem(), dq.data(), dk.data(), dv.data());

  const double step = kGrid;
  auto check = [&](const char* name, HostTensor& input, const std::vector<double>& gradient) {
    for (int64_t i = 0; i < input.numel(); ++i) {
      const double x = input.get(i);
      input.set(i, x + step);
      const double up = loss();
      input.set(i, x - step);
      const double down = loss();
      input.set(i, x);
      const double numeric = (up - down) / (2 * step);
      EXPECT_NEAR(gradient[i], numeric, 1e-5 * (1.0 + std::fabs(numeric)))
          << name << "[" << i << "] of " << c.name();
    }
  };
  check("dq", data.q, dq);
  check("dk", data.k, dk);
  check("dv", data.v, dv);
}

AttentionCase small_case() {
  AttentionCase c;
  c.seqlen_q = 5;
  c.seqlen_k = 7;
  c.heads_q = 2;
  c.heads_kv = 1;
  c.hdim_qk = 4;
  c.hdim_v = 3;
  c.seed = 11;
  return c;
}

TEST(Reference, GradientsMatchFiniteDifferences) { check_gradients_by_finite_differences(small_case()); }

TEST(Reference, GradientsMatchFiniteDifferencesSoftcap) {
  AttentionCase c = small_case();
  c.softcap = 1.5f;
  c.input_scale = 2.0;  // scores large enough that the tanh bends
  check_gradients_by_finite_differences(c);
}

TEST(Reference, GradientsMatchFiniteDifferencesWindow) {
  AttentionCase c = small_case();
  c.seqlen_q = 9;  // > seqlen_k: the first rows of the causal window see nothing
  c.causal = true;
  c.window_left = 2;
  check_gradients_by_finite_differences(c);
}

TEST(Reference, GradientsMatchFiniteDifferencesVarlen) {
  AttentionCase c = small_case();
  c.varlen_q = {3, 0, 4};
  c.varlen_k = {5, 2, 0};
  c.window_left = 1;
  c.window_right = 2;
  check_gradients_by_finite_differences(c);
}

}  // namespace
}  // namespace hfa::test
