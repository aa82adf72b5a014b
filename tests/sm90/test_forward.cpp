// The Hopper forward kernel against the float64 oracle (docs/design.md §6), through the public API:
// every head dim × dtype × causal × GQA ratio, seqlens that fill no tile, seqlen_q ≠ seqlen_k
// both ways, outputs poisoned with NaN first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/half_float.hpp"
#include "common/problem.hpp"
#include "cpu/reference.hpp"
#include "hfa/hfa.hpp"
#include "sm90/gpu_test_support.hpp"

namespace hfa::test {
namespace {

struct Case {
  int hdim;
  DType dtype;
  bool causal;
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k;
  bool heads_major = false;  // stored (batch, head, seq, dim), viewed through strides
  // Elements between out's rows (seq-major): a row stride TMA cannot take, so O is stored from
  // registers where it would go out through shared memory.
  int out_row_pad = 0;
};

std::string case_name(const Case& c) {
  std::ostringstream s;
  s << "d" << c.hdim << "_" << dtype_name(c.dtype) << (c.causal ? "_causal" : "_full") << "_b"
    << c.batch << "_h" << c.heads_q << "_kv" << c.heads_kv << "_q" << c.seqlen_q << "_k"
    << c.seqlen_k << (c.heads_major ? "_bhsd" : "")
    << (c.out_row_pad > 0 ? "_outpad" + std::to_string(c.out_row_pad) : "");
  return s.str();
}

float decode(uint16_t bits, DType t) {
  return t == DType::bf16 ? detail::bf16_to_float(bits) : detail::fp16_to_float(bits);
}
uint16_t encode(float x, DType t) {
  return t == DType::bf16 ? detail::float_to_bf16(x) : detail::float_to_fp16(x);
}
constexpr uint16_t kNaNBits = 0xFFFF;  // NaN in both bf16 and fp16

// One (batch, seq, head, dim) tensor of 16-bit values in host memory, in either layout.
struct HostTensor {
  std::vector<uint16_t> bits;
  int64_t shape[4];
  int64_t stride[4];

  HostTensor(int b, int s, int h, int d, bool heads_major, int row_pad = 0) : shape{b, s, h, d} {
    if (heads_major) {
      stride[0] = int64_t(h) * s * d, stride[1] = d, stride[2] = int64_t(s) * d, stride[3] = 1;
    } else {
      const int64_t row = int64_t(h) * d + row_pad;
      stride[0] = s * row, stride[1] = row, stride[2] = d, stride[3] = 1;
    }
    bits.resize(size_t(b) * stride[0]);
  }
  size_t index(int b, int s, int h, int d) const {
    return b * stride[0] + s * stride[1] + h * stride[2] + d;
  }
  detail::Strides strides() const { return {stride[0], stride[1], stride[2]}; }
  Tensor view(void* data, DType t) const {
    return make_tensor(data, t, {shape[0], shape[1], shape[2], shape[3]},
                       {stride[0], stride[1], stride[2], stride[3]}, Device::cuda(0));
  }
};

HostTensor random_tensor(int b, int s, int h, int d, const Case& c, std::mt19937& rng) {
  HostTensor t(b, s, h, d, c.heads_major);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : t.bits) x = encode(normal(rng), c.dtype);
  return t;
}

// The problem over host memory, for the oracle and the peer.
detail::ForwardProblem host_problem(const Case& c, const HostTensor& q, const HostTensor& k,
                                    const HostTensor& v) {
  detail::ForwardProblem p;
  p.dtype = p.out_dtype = c.dtype;
  p.batch = c.batch, p.seqlen_q = c.seqlen_q, p.seqlen_k = c.seqlen_k;
  p.heads_q = c.heads_q, p.heads_kv = c.heads_kv, p.hdim_qk = p.hdim_v = c.hdim;
  p.q = q.bits.data(), p.k = k.bits.data(), p.v = v.bits.data();
  p.q_stride = q.strides(), p.k_stride = k.strides(), p.v_stride = v.strides();
  p.softmax_scale = 1.0f / std::sqrt(float(c.hdim));
  p.causal = c.causal;
  p.window_right = c.causal ? 0 : -1;
  return p;
}

// A standard 16-bit implementation of the same inputs (the "peer" of docs/design.md §6): fp32
// scores and sums, probabilities rounded to the input type before P·V, the output rounded at
// the end.
std::vector<double> peer_forward(const Case& c, const HostTensor& q, const HostTensor& k,
                                 const HostTensor& v) {
  std::vector<double> out(size_t(c.batch) * c.seqlen_q * c.heads_q * c.hdim, 0.0);
  const float scale = 1.0f / std::sqrt(float(c.hdim));
  const int group = c.heads_q / c.heads_kv;
  std::vector<float> score(c.seqlen_k);
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads_q; ++h)
      for (int i = 0; i < c.seqlen_q; ++i) {
        const int last_key = c.causal ? i + c.seqlen_k - c.seqlen_q : c.seqlen_k - 1;
        float max = -INFINITY;
        for (int j = 0; j <= std::min(last_key, c.seqlen_k - 1); ++j) {
          float dot = 0.0f;
          for (int d = 0; d < c.hdim; ++d) {
            dot += decode(q.bits[q.index(b, i, h, d)], c.dtype) *
                   decode(k.bits[k.index(b, j, h / group, d)], c.dtype);
          }
          score[j] = dot * scale;
          max = std::max(max, score[j]);
        }
        if (last_key < 0) continue;
        float sum = 0.0f;
        std::vector<float> acc(c.hdim, 0.0f);
        for (int j = 0; j <= std::min(last_key, c.seqlen_k - 1); ++j) {
          const float p = std::exp(score[j] - max);
          sum += p;
          const float p_rounded = decode(encode(p, c.dtype), c.dtype);
          for (int d = 0; d < c.hdim; ++d) {
            acc[d] += p_rounded * decode(v.bits[v.index(b, j, h / group, d)], c.dtype);
          }
        }
        for (int d = 0; d < c.hdim; ++d) {
          out[((size_t(b) * c.seqlen_q + i) * c.heads_q + h) * c.hdim + d] =
              decode(encode(acc[d] / sum, c.dtype), c.dtype);
        }
      }
  return out;
}

class ForwardSm90 : public ::testing::TestWithParam<Case> {};

TEST_P(ForwardSm90, MatchesFloat64Reference) {
  HFA_REQUIRE_HOPPER();
  const Case c = GetParam();
  std::mt19937 rng(std::hash<std::string>{}(case_name(c)));
  const HostTensor q = random_tensor(c.batch, c.seqlen_q, c.heads_q, c.hdim, c, rng);
  const HostTensor k = random_tensor(c.batch, c.seqlen_k, c.heads_kv, c.hdim, c, rng);
  const HostTensor v = random_tensor(c.batch, c.seqlen_k, c.heads_kv, c.hdim, c, rng);
  HostTensor out(c.batch, c.seqlen_q, c.heads_q, c.hdim, c.heads_major, c.out_row_pad);
  std::fill(out.bits.begin(), out.bits.end(), kNaNBits);
  std::vector<float> lse(size_t(c.batch) * c.heads_q * c.seqlen_q, NAN);

  DeviceBuffer dq(q.bits.size() * 2), dk(k.bits.size() * 2), dv(v.bits.size() * 2);
  DeviceBuffer dout(out.bits.size() * 2), dlse(lse.size() * 4);
  HFA_CUDA_OK(dq.upload(q.bits));
  HFA_CUDA_OK(dk.upload(k.bits));
  HFA_CUDA_OK(dv.upload(v.bits));
  HFA_CUDA_OK(dout.upload(out.bits));
  HFA_CUDA_OK(dlse.upload(lse));

  const Tensor lse_view = make_tensor(dlse.get(), DType::f32, {c.batch, c.heads_q, c.seqlen_q}, {},
                                      Device::cuda(0));
  Options options;
  options.causal = c.causal;
  const Tensor qt = q.view(dq.get(), c.dtype), kt = k.view(dk.get(), c.dtype);
  const Tensor vt = v.view(dv.get(), c.dtype);
  std::size_t workspace_bytes = 0;
  ASSERT_TRUE(forward_workspace_size(qt, kt, vt, options, &workspace_bytes).is_ok());
  DeviceBuffer workspace(workspace_bytes);
  options.workspace = workspace.get();
  options.workspace_bytes = workspace_bytes;
  const Status status = forward(qt, kt, vt, out.view(dout.get(), c.dtype), &lse_view, options);
  ASSERT_TRUE(status.is_ok()) << status.message();
  HFA_CUDA_OK(cudaDeviceSynchronize());
  HFA_CUDA_OK(dout.download(out.bits));
  HFA_CUDA_OK(dlse.download(lse));

  const detail::ForwardProblem problem = host_problem(c, q, k, v);
  std::vector<double> ref(out.bits.size()), ref_lse(lse.size());
  cpu::reference_forward(problem, ref.data(), ref_lse.data());
  const std::vector<double> peer = peer_forward(c, q, k, v);

  double error = 0.0, peer_error = 0.0;
  size_t unwritten = 0, worst = 0;
  for (int b = 0; b < c.batch; ++b)
    for (int i = 0; i < c.seqlen_q; ++i)
      for (int h = 0; h < c.heads_q; ++h)
        for (int d = 0; d < c.hdim; ++d) {
          const size_t at = ((size_t(b) * c.seqlen_q + i) * c.heads_q + h) * c.hdim + d;
          const float got = decode(out.bits[out.index(b, i, h, d)], c.dtype);
          if (std::isnan(got)) {
            ++unwritten;
            continue;
          }
          const double e = std::abs(got - ref[at]);
          if (e > error) error = e, worst = at;
          peer_error = std::max(peer_error, std::abs(peer[at] - ref[at]));
        }
  EXPECT_EQ(unwritten, 0u) << "output elements left NaN (unwritten or NaN)";
  const double bound = 2.0 * peer_error + 1e-5;
  EXPECT_LE(error, bound) << "max |out - ref| " << error << " at flat index " << worst
                          << " exceeds 2 x peer error " << peer_error;

  double lse_error = 0.0;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(ref_lse[i])) {
      EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "lse[" << i << "] should be -inf, got " << lse[i];
    } else {
      ASSERT_FALSE(std::isnan(lse[i])) << "lse[" << i << "] unwritten";
      lse_error = std::max(lse_error, std::abs(lse[i] - ref_lse[i]));
    }
  }
  EXPECT_LE(lse_error, 1e-3) << "max |lse - ref|";
}

std::vector<Case> forward_cases() {
  std::vector<Case> cases;
  const std::pair<int, int> seqlens[] = {{1, 1}, {17, 17}, {255, 1000}, {1000, 255}, {1000, 1000}};
  for (int hdim : {64, 128, 256})
    for (DType dtype : {DType::bf16, DType::f16})
      for (bool causal : {false, true})
        for (auto [sq, sk] : seqlens)
          for (int group : {1, 4}) cases.push_back({hdim, dtype, causal, 2, 4, 4 / group, sq, sk});
  // Long sequences, a caller's (batch, head, seq, dim) layout, MQA.
  for (int hdim : {64, 128, 256})
    for (bool causal : {false, true}) {
      cases.push_back({hdim, DType::bf16, causal, 1, 2, 1, 4097, 4097});
      cases.push_back({hdim, DType::f16, causal, 2, 3, 3, 300, 513, true});
      cases.push_back({hdim, DType::bf16, causal, 2, 4, 2, 300, 300, false, 4});
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Grid, ForwardSm90, ::testing::ValuesIn(forward_cases()),
                         [](const auto& info) { return case_name(info.param); });

// Calls the kernels do not cover must say so, never compute a wrong answer (fp32 is the one
// left: the tensor cores take 16-bit inputs).
TEST(ForwardSm90Support, UnsupportedCallsSayNotSupported) {
  HFA_REQUIRE_HOPPER();
  const int b = 1, s = 64, h = 2, d = 128;
  const size_t bytes = size_t(b) * s * h * d * dtype_size(DType::f32);
  DeviceBuffer q(bytes), k(bytes), v(bytes), out(bytes);
  HFA_CUDA_OK(cudaMemset(out.get(), 0x7F, bytes));
  auto view = [&](const DeviceBuffer& buffer) {
    return make_tensor(buffer.get(), DType::f32, {b, s, h, d}, {}, Device::cuda(0));
  };
  const Status status = forward(view(q), view(k), view(v), view(out), nullptr, Options{});
  EXPECT_EQ(status.code(), Code::not_supported) << status.message();
  EXPECT_NE(status.message().find("not supported"), std::string::npos) << status.message();
  std::vector<uint8_t> after(bytes);
  HFA_CUDA_OK(out.download(after));
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint8_t x) { return x == 0x7F; }))
      << "output was written by a rejected call";
}

}  // namespace
}  // namespace hfa::test
