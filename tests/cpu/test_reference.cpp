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

// The same keys under three query rows of 1, causal with seqlen_q 3 > seqlen_k 2, bottom-right
// aligned: row 0 sees nothing, row 1 key 0, row 2 both keys.
AttentionData causal_three_rows_two_keys(bool sinks) {
  AttentionCase c;
  c.seqlen_q = 3;
  c.seqlen_k = 2;
  c.hdim_qk = c.hdim_v = 1;
  c.softmax_scale = 1.0f;
  c.causal = true;
  c.sinks = sinks;
  AttentionData data(c);
  for (int i = 0; i < 3; ++i) data.q.set(i, 1.0);
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
  AttentionData data = causal_three_rows_two_keys(false);
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

// The two-key case with a sink of logit 0.5 in the denominator (scores [0, 1]).
TEST(Reference, SinkByHand) {
  AttentionData data = two_key_case(0.0f);
  data.sinks = {0.5f};
  detail::ForwardProblem p = data.forward_problem();
  p.sinks = data.sinks.data();
  double out = 0, lse = 0;
  cpu::reference_forward(p, &out, &lse);
  const double e = std::exp(1.0), s = std::exp(0.5);
  EXPECT_NEAR(out, (1.0 + 3.0 * e) / (1.0 + e + s), 1e-15);
  EXPECT_NEAR(lse, std::log(1.0 + e + s), 1e-15);
}

// A sink larger than every score sets the running max; a row that sees no key gets O = 0 and
// LSE = the sink (causal, seqlen_q 3 > seqlen_k 2: row 0 sees nothing).
TEST(Reference, SinkOnEmptyAndDominatedRows) {
  AttentionData data = causal_three_rows_two_keys(true);
  data.sinks = {800.0f};  // exp(800) overflows a double: only a max that includes it works
  double out[3], lse[3];
  cpu::reference_forward(data.forward_problem(), out, lse);
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(lse[0], 800.0);
  EXPECT_NEAR(lse[1], 800.0, 1e-12);
  EXPECT_NEAR(out[1], std::exp(-800.0), 1e-300);
  EXPECT_TRUE(std::isfinite(out[2]) && std::isfinite(lse[2]));

  data.sinks = {-std::numeric_limits<float>::infinity()};  // −inf is no sink at all
  cpu::reference_forward(data.forward_problem(), out, lse);
  EXPECT_EQ(lse[0], -kInf);
  EXPECT_NEAR(out[1], 1.0, 1e-15);
  EXPECT_NEAR(lse[1], 0.0, 1e-15);
}

// Used lengths: only the first seqused rows and keys take part, bottom-right aligned on them;
// rows beyond are not written, gradients beyond are 0.
TEST(Reference, SequsedByHand) {
  AttentionCase c;
  c.seqlen_q = 3;
  c.seqlen_k = 4;
  c.hdim_qk = c.hdim_v = 1;
  c.softmax_scale = 1.0f;
  c.causal = true;
  c.seqused_q = {2};
  c.seqused_k = {2};
  AttentionData data(c);
  for (int i = 0; i < 3; ++i) data.q.set(i, 1.0);
  const double keys[4] = {0.0, 1.0, 100.0, 100.0}, values[4] = {1.0, 3.0, 50.0, 50.0};
  for (int j = 0; j < 4; ++j) {
    data.k.set(j, keys[j]);
    data.v.set(j, values[j]);
  }
  double out[3] = {7, 7, 7}, lse[3] = {7, 7, 7};
  cpu::reference_forward(data.forward_problem(), out, lse);
  // Used 2 × 2, causal aligned on them: row 0 sees key 0, row 1 keys 0 and 1.
  const double e = std::exp(1.0);
  EXPECT_NEAR(out[0], 1.0, 1e-15);
  EXPECT_NEAR(lse[0], 0.0, 1e-15);
  EXPECT_NEAR(out[1], (1.0 + 3.0 * e) / (1.0 + e), 1e-15);
  EXPECT_EQ(out[2], 7.0);
  EXPECT_EQ(lse[2], 7.0);

  double dq[3] = {7, 7, 7}, dk[4] = {7, 7, 7, 7}, dv[4] = {7, 7, 7, 7};
  cpu::reference_backward(data.backward_problem(), dq, dk, dv);
  EXPECT_EQ(dq[2], 0.0);
  for (int j : {2, 3}) {
    EXPECT_EQ(dk[j], 0.0);
    EXPECT_EQ(dv[j], 0.0);
  }
  EXPECT_NE(dv[1], 0.0);
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
  for (float& sink : data.sinks) sink = static_cast<float>(std::round(sink / kGrid) * kGrid);
  const std::vector<double> weight = data.dout.values();
  std::vector<double> out(static_cast<std::size_t>(data.out.numel()));
  auto loss = [&] {
    cpu::reference_forward(data.forward_problem(), out.data(), nullptr);
    double sum = 0.0;
    for (std::size_t i = 0; i < out.size(); ++i) sum += out[i] * weight[i];
    return sum;
  };
  std::vector<double> dq(data.dq.numel()), dk(data.dk.numel()), dv(data.dv.numel());
  std::vector<double> dsinks(data.sinks.size());
  cpu::reference_backward(data.backward_problem(), dq.data(), dk.data(), dv.data(), dsinks.data());

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
  for (std::size_t h = 0; h < data.sinks.size(); ++h) {
    const float x = data.sinks[h];
    data.sinks[h] = static_cast<float>(x + step);
    const double up = loss();
    data.sinks[h] = static_cast<float>(x - step);
    const double down = loss();
    data.sinks[h] = x;
    const double numeric = (up - down) / (2 * step);
    EXPECT_NEAR(dsinks[h], numeric, 1e-5 * (1.0 + std::fabs(numeric))) << "dsinks[" << h << "]";
  }
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

TEST(Reference, GradientsMatchFiniteDifferencesSinks) {
  AttentionCase c = small_case();
  c.seqlen_q = 9;  // rows that see no key: their gradient flows to the sink alone
  c.causal = true;
  c.softcap = 3.0f;
  c.sinks = true;
  check_gradients_by_finite_differences(c);
}

// Varlen with an empty sequence, used lengths and GQA.
AttentionCase varlen_seqused_case() {
  AttentionCase c = small_case();
  c.heads_q = 4;
  c.heads_kv = 2;
  c.varlen_q = {3, 0, 5};
  c.varlen_k = {5, 2, 4};
  c.seqused_q = {2, 0, 4};
  c.seqused_k = {5, 1, 2};
  return c;
}

TEST(Reference, GradientsMatchFiniteDifferencesSinksSequsedVarlen) {
  AttentionCase c = varlen_seqused_case();
  c.causal = true;
  c.sinks = true;
  check_gradients_by_finite_differences(c);
}

// ---- ALiBi ---------------------------------------------------------------------------------

// q (1 × 1), k = [0, 1], v = [1, 3], scale 1, slope 0.5: key j is 1 − j keys from the diagonal
// (seqlen_k − seqlen_q = 1), so the scores [0, 1] become [−0.5, 1].
TEST(Reference, AlibiByHand) {
  AttentionData data = two_key_case(0.0f);
  data.alibi_slopes = {0.5f};
  detail::ForwardProblem p = data.forward_problem();
  p.vectors.alibi_slopes = {data.alibi_slopes.data(), 0, 1};
  double out = 0, lse = 0;
  cpu::reference_forward(p, &out, &lse);
  const double a = std::exp(-0.5), b = std::exp(1.0);
  EXPECT_NEAR(out, (a * 1 + b * 3) / (a + b), 1e-15);
  EXPECT_NEAR(lse, std::log(a + b), 1e-15);
}

// The oracle against attention written out densely here, in float64 and with none of the
// oracle's code: every (i, j) scored, masked and biased by the definition in hfa/options.def.
void expect_oracle_matches_dense(const AttentionCase& c) {
  SCOPED_TRACE(c.name());
  AttentionData data(c);
  const detail::ForwardProblem p = data.forward_problem();
  std::vector<double> out(static_cast<std::size_t>(data.out.numel())), lse(data.lse.numel());
  cpu::reference_forward(p, out.data(), lse.data());

  const int64_t group = c.heads_q / c.heads_kv;
  for (int64_t b = 0; b < c.sequences(); ++b) {
    const int64_t q0 = c.is_varlen() ? data.cu_seqlens_q()[b] : b * c.seqlen_q;
    const int64_t k0 = c.is_varlen() ? data.cu_seqlens_k()[b] : b * c.seqlen_k;
    int64_t sq = c.is_varlen() ? c.varlen_q[b] : c.seqlen_q;
    int64_t sk = c.is_varlen() ? c.varlen_k[b] : c.seqlen_k;
    if (!c.seqused_q.empty()) sq = c.seqused_q[b];
    if (!c.seqused_k.empty()) sk = c.seqused_k[b];
    for (int64_t h = 0; h < c.heads_q; ++h) {
      const double slope = data.alibi_slope(b, h);
      for (int64_t i = 0; i < sq; ++i) {
        std::vector<double> score(static_cast<std::size_t>(sk), -kInf);
        double max = -kInf;
        for (int64_t j = 0; j < sk; ++j) {
          const int64_t diagonal = i + sk - sq;
          const int32_t right = c.effective_window_right();
          if (right >= 0 && j > diagonal + right) continue;
          if (c.window_left >= 0 && j < diagonal - c.window_left) continue;
          double s = 0;
          for (int64_t d = 0; d < c.hdim_qk; ++d)
            s += data.q.get(((q0 + i) * c.heads_q + h) * c.hdim_qk + d) *
                 data.k.get(((k0 + j) * c.heads_kv + h / group) * c.hdim_qk + d);
          s *= c.softmax_scale.value_or(1 / std::sqrt(static_cast<float>(c.hdim_qk)));
          if (c.softcap > 0) s = c.softcap * std::tanh(s / c.softcap);
          score[j] = s - slope * std::abs(double(diagonal - j));
          max = std::max(max, score[j]);
        }
        const int64_t lse_at = c.is_varlen() ? h * data.total_q() + q0 + i
                                             : (b * c.heads_q + h) * c.seqlen_q + i;
        double* out_row = &out[((q0 + i) * c.heads_q + h) * c.hdim_v];
        if (max == -kInf) {  // a row that sees no key: O = 0, LSE = −inf
          EXPECT_EQ(lse[lse_at], -kInf);
          for (int64_t d = 0; d < c.hdim_v; ++d) EXPECT_EQ(out_row[d], 0.0);
          continue;
        }
        double sum = 0;
        for (double& x : score) sum += (x = std::exp(x - max));
        EXPECT_NEAR(lse[lse_at], max + std::log(sum), 1e-12) << b << " " << h << " " << i;
        for (int64_t d = 0; d < c.hdim_v; ++d) {
          double o = 0;
          for (int64_t j = 0; j < sk; ++j)
            o += score[j] / sum * data.v.get(((k0 + j) * c.heads_kv + h / group) * c.hdim_v + d);
          EXPECT_NEAR(out_row[d], o, 1e-12);
        }
      }
    }
  }
}

TEST(Reference, AlibiMatchesDenseAttention) {
  AttentionCase c = small_case();
  c.softmax_scale = 0.4f;
  c.alibi = AttentionCase::Alibi::per_head;
  c.window_left = 3;
  c.window_right = 1;
  expect_oracle_matches_dense(c);
  // Varlen with used lengths (the last sequence: 4 rows over 2 keys, negative distances),
  // causal, softcap, GQA, a slope per (sequence, head).
  AttentionCase varlen = varlen_seqused_case();
  varlen.causal = true;
  varlen.softcap = 2.0f;
  varlen.alibi = AttentionCase::Alibi::per_sequence_head;
  expect_oracle_matches_dense(varlen);
}

// Per head with causal, softcap and rows that see no key; per (sequence, head) with varlen,
// used lengths, a window and sinks.
TEST(Reference, GradientsMatchFiniteDifferencesAlibi) {
  AttentionCase causal = small_case();
  causal.seqlen_q = 9;
  causal.causal = true;
  causal.softcap = 3.0f;
  causal.alibi = AttentionCase::Alibi::per_head;
  check_gradients_by_finite_differences(causal);
  AttentionCase varlen = varlen_seqused_case();
  varlen.window_left = 2;
  varlen.sinks = true;
  varlen.alibi = AttentionCase::Alibi::per_sequence_head;
  check_gradients_by_finite_differences(varlen);
}

}  // namespace
}  // namespace hfa::test
