// A small, valid attention call on CPU tensors that each test bends in one place. Outputs start
// filled with a sentinel byte so a test can tell whether anything was written.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hfa/hfa.hpp"
#include "quant/e4m3.hpp"

namespace hfa::test {

constexpr unsigned char kSentinel = 0x7b;

// Storage for one tensor, in floats (large enough for any 2- or 4-byte dtype of this shape).
struct Buffer {
  std::vector<float> data;
  Tensor tensor{};

  void make(DType dtype, std::initializer_list<int64_t> shape) {
    int64_t count = 1;
    for (int64_t extent : shape) count *= extent;
    data.assign(static_cast<std::size_t>(count), 0.0f);
    tensor = make_tensor(data.data(), dtype, shape);
  }
  void fill_random(std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& x : data) x = normal(rng);
  }
  void poison() { std::memset(data.data(), kSentinel, data.size() * sizeof(float)); }
  bool untouched() const {
    const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
    for (std::size_t i = 0; i < data.size() * sizeof(float); ++i)
      if (bytes[i] != kSentinel) return false;
    return true;
  }
};

// Fixed-length f32 attention: q (b, sq, hq, d), k/v (b, sk, hkv, d/dv).
struct Attention {
  int64_t batch = 2, seqlen_q = 3, seqlen_k = 5, heads_q = 4, heads_kv = 2, hdim = 64, hdim_v = 64;
  DType dtype = DType::f32;
  Buffer q, k, v, out, lse, dout, dq, dk, dv;
  Options options;

  Attention() { allocate(); }

  // (Re)creates every buffer for the current sizes: inputs random, outputs poisoned.
  void allocate() {
    std::mt19937 rng(1234);
    q.make(dtype, {batch, seqlen_q, heads_q, hdim});
    k.make(dtype, {batch, seqlen_k, heads_kv, hdim});
    v.make(dtype, {batch, seqlen_k, heads_kv, hdim_v});
    dout.make(dtype, {batch, seqlen_q, heads_q, hdim_v});
    out.make(dtype, {batch, seqlen_q, heads_q, hdim_v});
    lse.make(DType::f32, {batch, heads_q, seqlen_q});
    dq.make(dtype, {batch, seqlen_q, heads_q, hdim});
    dk.make(dtype, {batch, seqlen_k, heads_kv, hdim});
    dv.make(dtype, {batch, seqlen_k, heads_kv, hdim_v});
    for (Buffer* b : {&q, &k, &v, &dout}) b->fill_random(rng);
    poison_outputs();
  }
  void poison_outputs() {
    for (Buffer* b : {&out, &lse, &dq, &dk, &dv}) b->poison();
  }

  Status forward() { return hfa::forward(q.tensor, k.tensor, v.tensor, out.tensor, &lse.tensor, options); }
  Status backward() {
    return hfa::backward(dout.tensor, q.tensor, k.tensor, v.tensor, out.tensor, lse.tensor,
                         dq.tensor, dk.tensor, dv.tensor, options);
  }
  bool forward_outputs_untouched() const { return out.untouched() && lse.untouched(); }
  bool backward_outputs_untouched() const {
    return dq.untouched() && dk.untouched() && dv.untouched();
  }
};

// The fixture's call (batch 2, seqlen_q 3, seqlen_k 5, heads 4 / 2, d 64) with e4m3 codes of
// random values in q, k, v and a bf16 out.
inline Attention fp8_attention() {
  Attention a;
  a.dtype = DType::e4m3;
  a.allocate();
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (Buffer* b : {&a.q, &a.k, &a.v}) {
    auto* codes = reinterpret_cast<uint8_t*>(b->data.data());
    for (std::size_t i = 0; i < b->data.size() * sizeof(float); ++i)
      codes[i] = quant::e4m3_encode(normal(rng));
  }
  a.out.make(DType::bf16, {a.batch, a.seqlen_q, a.heads_q, a.hdim_v});
  a.out.poison();
  return a;
}

// Scales to point descales at: any shape the tests need fits.
struct Scales {
  std::vector<float> values = std::vector<float>(64, 0.5f);
  Tensor view(std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides = {}) {
    return make_tensor(values.data(), DType::f32, shape, strides);
  }
};

// The status has `code`, its message starts with "<argument>: " and contains `fragment`.
inline ::testing::AssertionResult Rejected(const Status& status, Code code, const std::string& argument,
                                           const std::string& fragment = "") {
  if (status.code() != code)
    return ::testing::AssertionFailure()
           << "code " << static_cast<int>(status.code()) << ", expected " << static_cast<int>(code)
           << " (message: \"" << status.message() << "\")";
  if (status.message().rfind(argument + ": ", 0) != 0)
    return ::testing::AssertionFailure()
           << "message \"" << status.message() << "\" does not start with \"" << argument << ": \"";
  if (status.message().find(fragment) == std::string::npos)
    return ::testing::AssertionFailure()
           << "message \"" << status.message() << "\" lacks \"" << fragment << "\"";
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult Invalid(const Status& status, const std::string& argument,
                                          const std::string& fragment = "") {
  return Rejected(status, Code::invalid_argument, argument, fragment);
}

}  // namespace hfa::test

namespace hfa::test {

// The forward is rejected as described and wrote nothing.
inline ::testing::AssertionResult ForwardRejected(Attention& a, const std::string& argument,
                                                  const std::string& fragment = "",
                                                  Code code = Code::invalid_argument) {
  a.poison_outputs();
  if (auto result = Rejected(a.forward(), code, argument, fragment); !result) return result;
  if (!a.forward_outputs_untouched()) return ::testing::AssertionFailure() << "an output was written";
  return ::testing::AssertionSuccess();
}

// The backward is rejected as described and wrote nothing.
inline ::testing::AssertionResult BackwardRejected(Attention& a, const std::string& argument,
                                                   const std::string& fragment = "",
                                                   Code code = Code::invalid_argument) {
  a.poison_outputs();
  if (auto result = Rejected(a.backward(), code, argument, fragment); !result) return result;
  if (!a.backward_outputs_untouched()) return ::testing::AssertionFailure() << "a gradient was written";
  return ::testing::AssertionSuccess();
}

}  // namespace hfa::test
