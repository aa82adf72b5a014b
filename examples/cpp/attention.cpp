// Causal GQA attention on the CPU through hfa's C++ API, checked against a plain loop.
//
// Tensors are views over the caller's memory, (batch, seqlen, heads, headdim) as in
// FlashAttention; hfa allocates nothing. On a GPU the same call takes device pointers:
// hfa::make_tensor(ptr, dtype, shape, {}, hfa::Device::cuda()) and a cudaStream_t in
// options.stream.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "hfa/hfa.hpp"

constexpr int64_t kBatch = 2, kSeqlen = 100, kHeadsQ = 8, kHeadsKV = 2, kHeadDim = 64;

// Row out[b, i, h, :] by the definition: softmax over keys j <= i of q·k / sqrt(d), times v.
std::vector<double> reference_row(const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, int64_t b, int64_t i, int64_t h) {
  const int64_t hk = h / (kHeadsQ / kHeadsKV);  // the kv head this query head reads (GQA)
  auto row = [b](const std::vector<float>& x, int64_t s, int64_t heads, int64_t head) {
    return &x[((b * kSeqlen + s) * heads + head) * kHeadDim];
  };
  std::vector<double> scores(i + 1);
  for (int64_t j = 0; j <= i; ++j) {
    double dot = 0;
    for (int64_t c = 0; c < kHeadDim; ++c) dot += row(q, i, kHeadsQ, h)[c] * row(k, j, kHeadsKV, hk)[c];
    scores[j] = dot / std::sqrt(double(kHeadDim));
  }
  const double top = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  std::vector<double> out(kHeadDim, 0.0);
  for (int64_t j = 0; j <= i; ++j) {
    const double weight = std::exp(scores[j] - top);
    sum += weight;
    for (int64_t c = 0; c < kHeadDim; ++c) out[c] += weight * row(v, j, kHeadsKV, hk)[c];
  }
  for (double& x : out) x /= sum;
  return out;
}

int main() {
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::vector<float> q(kBatch * kSeqlen * kHeadsQ * kHeadDim), out(q.size());
  std::vector<float> k(kBatch * kSeqlen * kHeadsKV * kHeadDim), v(k.size());
  for (auto* x : {&q, &k, &v}) std::generate(x->begin(), x->end(), [&] { return normal(rng); });

  const auto tq = hfa::make_tensor(q.data(), hfa::DType::f32, {kBatch, kSeqlen, kHeadsQ, kHeadDim});
  const auto tk = hfa::make_tensor(k.data(), hfa::DType::f32, {kBatch, kSeqlen, kHeadsKV, kHeadDim});
  const auto tv = hfa::make_tensor(v.data(), hfa::DType::f32, {kBatch, kSeqlen, kHeadsKV, kHeadDim});
  const auto tout = hfa::make_tensor(out.data(), hfa::DType::f32, {kBatch, kSeqlen, kHeadsQ, kHeadDim});
  hfa::Options options;
  options.causal = true;
  if (hfa::Status s = hfa::forward(tq, tk, tv, tout, /*lse=*/nullptr, options); !s) {
    std::fprintf(stderr, "hfa::forward: %s\n", s.message().c_str());  // names the bad argument
    return 1;
  }

  double max_error = 0;
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t i = 0; i < kSeqlen; ++i)
      for (int64_t h = 0; h < kHeadsQ; ++h) {
        const std::vector<double> expected = reference_row(q, k, v, b, i, h);
        for (int64_t c = 0; c < kHeadDim; ++c) {
          const float got = out[((b * kSeqlen + i) * kHeadsQ + h) * kHeadDim + c];
          max_error = std::max(max_error, std::abs(got - expected[c]));
        }
      }
  std::printf("hfa %s: causal GQA forward, max abs error against the plain loop %.2e\n",
              hfa_version(), max_error);
  return max_error < 1e-4 ? 0 : 1;
}
