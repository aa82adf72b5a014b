// Memory shared between the tensors of a call (hfa.h, "Memory shared between tensors"), through
// the C ABI on CPU tensors: an output that shares a byte with another tensor of its call, or whose
// own elements overlap, is rejected before anything is written, by a message naming both
// arguments; inputs that overlap one another, outputs interleaved in one buffer without sharing a
// byte, and the in-place forms (an appended cache, a merge into one of its partials) run and give
// what separate buffers give.
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fixture.hpp"
#include "hfa/hfa.h"

namespace hfa::test {
namespace {

// The bytes of some buffers, to compare after a call.
class Snapshot {
 public:
  explicit Snapshot(std::vector<const std::vector<float>*> buffers) : buffers_(std::move(buffers)) {
    for (const std::vector<float>* b : buffers_) copies_.push_back(*b);
  }
  bool unchanged() const {
    for (std::size_t i = 0; i < buffers_.size(); ++i)
      if (std::memcmp(buffers_[i]->data(), copies_[i].data(), copies_[i].size() * sizeof(float)))
        return false;
    return true;
  }

 private:
  std::vector<const std::vector<float>*> buffers_;
  std::vector<std::vector<float>> copies_;
};

// The C call failed with HFA_ERROR_INVALID_ARGUMENT, hfa_last_error() starts with `prefix`, and
// every byte of `watched` (the call's outputs, and inputs an output lies over) is as it was.
::testing::AssertionResult RejectedWritingNothing(const std::function<hfa_status()>& call,
                                                  const std::string& prefix,
                                                  std::vector<const std::vector<float>*> watched) {
  const Snapshot before(std::move(watched));
  const hfa_status status = call();
  const std::string message = hfa_last_error();
  if (status != HFA_ERROR_INVALID_ARGUMENT)
    return ::testing::AssertionFailure()
           << "status " << hfa_status_name(status) << " (\"" << message << "\")";
  if (message.rfind(prefix, 0) != 0)
    return ::testing::AssertionFailure()
           << "message \"" << message << "\" does not start with \"" << prefix << "\"";
  if (!before.unchanged())
    return ::testing::AssertionFailure() << "memory was written: \"" << message << "\"";
  return ::testing::AssertionSuccess();
}

hfa_status c_forward(Attention& a, const hfa_options& options) {
  return hfa_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, &a.lse.tensor, &options);
}

hfa_status c_backward(Attention& a, const hfa_options& options) {
  return hfa_backward(&a.dout.tensor, &a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor,
                      &a.lse.tensor, &a.dq.tensor, &a.dk.tensor, &a.dv.tensor, &options);
}

// Views of one buffer laid out as (batch, seqlen, parts, heads, headdim): part `part` of it, as
// packed QKV (or the gradient dqkv) holds q, k and v.
Tensor part_of(std::vector<float>& buffer, int64_t batch, int64_t seqlen, int64_t parts,
               int64_t part, int64_t heads, int64_t hdim) {
  const int64_t row = parts * heads * hdim;
  return make_tensor(buffer.data() + part * heads * hdim, DType::f32, {batch, seqlen, heads, hdim},
                     {seqlen * row, row, hdim, 1});
}

// --- Rejected: the cases of the issue -------------------------------------------------------

TEST(Aliasing, ForwardOutOverKOrV) {
  Attention a;
  a.seqlen_k = a.seqlen_q * 2;  // k and v hold out's element count
  a.allocate();
  const hfa_options options = hfa_default_options();
  for (Buffer* input : {&a.k, &a.v}) {
    a.out.tensor.data = input->data.data();
    const std::string prefix = std::string("out: overlaps ") + (input == &a.k ? "k" : "v") + " (";
    EXPECT_TRUE(RejectedWritingNothing([&] { return c_forward(a, options); }, prefix,
                                       {&a.k.data, &a.v.data, &a.lse.data}));
  }
}

TEST(Aliasing, ForwardLseInsideOut) {
  Attention a;
  a.lse.tensor.data = a.out.data.data() + 100;
  const hfa_options options = hfa_default_options();
  EXPECT_TRUE(RejectedWritingNothing([&] { return c_forward(a, options); }, "lse: overlaps out (",
                                     {&a.out.data, &a.lse.data}));
}

TEST(Aliasing, BackwardDqAndDkInOneBuffer) {
  Attention a;
  ASSERT_TRUE(a.forward().is_ok());
  a.dk.tensor.data = a.dq.data.data();
  const hfa_options options = hfa_default_options();
  EXPECT_TRUE(RejectedWritingNothing([&] { return c_backward(a, options); }, "dk: overlaps dq (",
                                     {&a.dq.data, &a.dk.data, &a.dv.data}));
}

// Head stride 32 with headdim 64: head h's second half is head h + 1's first.
TEST(Aliasing, OutWhoseHeadsOverlap) {
  Attention a;
  a.out.tensor.stride[2] = 32;
  const hfa_options options = hfa_default_options();
  EXPECT_TRUE(RejectedWritingNothing(
      [&] { return c_forward(a, options); },
      "out: elements (0, 0, 1, 0) and (0, 0, 0, 32) share memory (strides (768, 256, 32, 1))",
      {&a.out.data, &a.lse.data}));
}

// A plain f32 KV-cache call: q (1, 2, 2, 64), contiguous caches (1, 8, 1, 64) holding 5 tokens;
// with `append`, one new token per sequence.
struct Decode {
  Buffer q, k_cache, v_cache, out, lse, k_new, v_new;
  std::vector<int32_t> lengths{5};
  Tensor lengths_tensor{};
  hfa_kvcache_options options = hfa_default_kvcache_options();

  explicit Decode(bool append = false) {
    std::mt19937 rng(5);
    q.make(DType::f32, {1, 2, 2, 64});
    k_cache.make(DType::f32, {1, 8, 1, 64});
    v_cache.make(DType::f32, {1, 8, 1, 64});
    out.make(DType::f32, {1, 2, 2, 64});
    lse.make(DType::f32, {1, 2, 2});
    k_new.make(DType::f32, {1, 1, 1, 64});
    v_new.make(DType::f32, {1, 1, 1, 64});
    for (Buffer* b : {&q, &k_cache, &v_cache, &k_new, &v_new}) b->fill_random(rng);
    out.poison();
    lse.poison();
    lengths_tensor = make_tensor(lengths.data(), DType::i32, {1});
    options.cache_seqlens = &lengths_tensor;
    if (append) {
      options.k_new = &k_new.tensor;
      options.v_new = &v_new.tensor;
    }
  }
  hfa_status run() {
    return hfa_forward_kvcache(&q.tensor, &k_cache.tensor, &v_cache.tensor, &out.tensor,
                               &lse.tensor, &options);
  }
};

TEST(Aliasing, KVCacheOutOverKCache) {
  Decode d;
  d.out.tensor.data = d.k_cache.data.data();
  EXPECT_TRUE(RejectedWritingNothing([&] { return d.run(); }, "out: overlaps k_cache (",
                                     {&d.k_cache.data, &d.v_cache.data, &d.lse.data}));
}

// --- Rejected: the other entry points -------------------------------------------------------

TEST(Aliasing, Fp8ForwardOutOverQ) {
  Attention a = fp8_attention();
  a.out.tensor.data = a.q.data.data();  // bf16 out over the e4m3 codes
  const hfa_options options = hfa_default_options();
  EXPECT_TRUE(RejectedWritingNothing([&] { return c_forward(a, options); }, "out: overlaps q (",
                                     {&a.q.data, &a.lse.data}));
}

TEST(Aliasing, AccumulateLseInsideOut) {
  Attention a;
  hfa_options options = hfa_default_options();
  options.accumulate = 1;
  a.lse.tensor.data = a.out.data.data() + a.out.data.size() - 24;  // over out's last 24 elements
  EXPECT_TRUE(RejectedWritingNothing([&] { return c_forward(a, options); }, "lse: overlaps out (",
                                     {&a.out.data, &a.lse.data}));
}

TEST(Aliasing, BackwardGradientOverAnInput) {
  Attention a;
  ASSERT_TRUE(a.forward().is_ok());
  const hfa_options options = hfa_default_options();
  const std::vector<const std::vector<float>*> all = {&a.q.data,   &a.k.data,   &a.v.data,
                                                      &a.out.data, &a.lse.data, &a.dout.data,
                                                      &a.dq.data,  &a.dk.data,  &a.dv.data};
  Tensor dq = a.dq.tensor;
  a.dq.tensor.data = a.q.data.data();  // in place over q: not supported
  EXPECT_TRUE(
      RejectedWritingNothing([&] { return c_backward(a, options); }, "dq: overlaps q (", all));
  a.dq.tensor = dq;
  a.dv.tensor.data = a.dout.data.data();
  EXPECT_TRUE(
      RejectedWritingNothing([&] { return c_backward(a, options); }, "dv: overlaps dout (", all));
  a.dv.tensor =
      make_tensor(a.dq.data.data() + 64, DType::f32, {2, 5, 2, 64});  // dq's buffer, a row on
  EXPECT_TRUE(
      RejectedWritingNothing([&] { return c_backward(a, options); }, "dv: overlaps dq (", all));
}

TEST(Aliasing, BackwardDsinksOverSinks) {
  Attention a;
  std::vector<float> sinks(4, 0.5f);
  Tensor sinks_tensor = make_tensor(sinks.data(), DType::f32, {4});
  hfa_options options = hfa_default_options();
  options.sinks = &sinks_tensor;
  ASSERT_EQ(c_forward(a, options), HFA_SUCCESS) << hfa_last_error();
  options.dsinks = &sinks_tensor;
  EXPECT_TRUE(RejectedWritingNothing([&] { return c_backward(a, options); },
                                     "dsinks: overlaps sinks (",
                                     {&sinks, &a.dq.data, &a.dk.data, &a.dv.data}));
}

TEST(Aliasing, KVCacheAppendIntoAnotherTensor) {
  Decode d(true);
  const std::vector<const std::vector<float>*> all = {
      &d.q.data,   &d.k_cache.data, &d.v_cache.data, &d.out.data,
      &d.lse.data, &d.k_new.data,   &d.v_new.data};
  // The new token's keys read from the very slots the append writes.
  d.k_new.tensor.data = d.k_cache.data.data() + 5 * 64;
  EXPECT_TRUE(RejectedWritingNothing([&] { return d.run(); }, "k_cache: overlaps k_new (", all));
  // One cache for keys and values: the append would write each slot twice.
  Decode shared(true);
  shared.v_cache.tensor = shared.k_cache.tensor;
  EXPECT_TRUE(RejectedWritingNothing([&] { return shared.run(); }, "v_cache: overlaps k_cache (",
                                     {&shared.k_cache.data, &shared.out.data, &shared.lse.data}));
}

TEST(Aliasing, QuantizeCodesOverTheirValues) {
  std::mt19937 rng(3);
  Buffer x, codes, scale;
  x.make(DType::f32, {4, 2, 64});
  x.fill_random(rng);
  codes.make(DType::e4m3, {4, 2, 64});
  scale.make(DType::f32, {4, 2});
  hfa_quantize_options kv{};
  kv.format = HFA_KV_FP8_PER_TOKEN;
  codes.tensor.data = x.data.data();
  EXPECT_TRUE(RejectedWritingNothing(
      [&] { return hfa_quantize_kv(&x.tensor, &codes.tensor, &scale.tensor, &kv); },
      "codes: overlaps x (", {&x.data, &scale.data}));
  // Dequantizing into the codes' own bytes.
  Buffer values;
  values.make(DType::f32, {4, 2, 64});
  values.tensor.data = x.data.data();
  std::vector<float> per_token(8, 0.25f);
  Tensor per_token_scale = make_tensor(per_token.data(), DType::f32, {4, 2});
  EXPECT_TRUE(RejectedWritingNothing(
      [&] { return hfa_dequantize_kv(&codes.tensor, &per_token_scale, &values.tensor, &kv); },
      "out: overlaps codes (", {&x.data, &per_token}));

  // FP8 attention inputs: the scales written over the codes.
  Buffer fp8_x, fp8_codes, fp8_scale;
  fp8_x.make(DType::f32, {1, 4, 2, 64});
  fp8_x.fill_random(rng);
  fp8_codes.make(DType::e4m3, {1, 4, 2, 64});
  fp8_codes.poison();
  fp8_scale.make(DType::f32, {1, 2});
  fp8_scale.tensor.data = fp8_codes.data.data() + 10;
  hfa_quantize_fp8_options fp8{};
  fp8.granularity = HFA_FP8_PER_HEAD;
  EXPECT_TRUE(RejectedWritingNothing(
      [&] { return hfa_quantize_fp8(&fp8_x.tensor, &fp8_codes.tensor, &fp8_scale.tensor, &fp8); },
      "scale: overlaps codes (", {&fp8_x.data, &fp8_codes.data}));
}

// --- Legal sharing: the results of separate buffers -----------------------------------------

// q, k and v as views of one packed (batch, seqlen, 3, heads, headdim) buffer, and dq, dk, dv as
// views of one packed gradient: interleaved, never sharing a byte.
TEST(Aliasing, PackedQkvAndDqkvGiveTheSeparateResults) {
  Attention separate;
  separate.seqlen_k = separate.seqlen_q;
  separate.heads_kv = separate.heads_q;
  separate.allocate();
  const int64_t b = separate.batch, s = separate.seqlen_q, h = separate.heads_q, d = separate.hdim;
  std::vector<float> qkv(static_cast<std::size_t>(b * s * 3 * h * d));
  std::vector<float> dqkv(qkv.size(), 0.0f);
  Tensor packed[3], gradient[3];
  const Buffer* parts[3] = {&separate.q, &separate.k, &separate.v};
  for (int p = 0; p < 3; ++p) {
    packed[p] = part_of(qkv, b, s, 3, p, h, d);
    gradient[p] = part_of(dqkv, b, s, 3, p, h, d);
    for (int64_t i = 0; i < b * s; ++i)  // row i of part p: heads · headdim values
      std::memcpy(qkv.data() + (i * 3 + p) * h * d, parts[p]->data.data() + i * h * d,
                  h * d * sizeof(float));
  }
  ASSERT_TRUE(separate.forward().is_ok());
  ASSERT_TRUE(separate.backward().is_ok());

  Buffer out, lse;
  out.make(DType::f32, {b, s, h, d});
  lse.make(DType::f32, {b, h, s});
  const hfa_options options = hfa_default_options();
  ASSERT_EQ(hfa_forward(&packed[0], &packed[1], &packed[2], &out.tensor, &lse.tensor, &options),
            HFA_SUCCESS)
      << hfa_last_error();
  EXPECT_EQ(out.data, separate.out.data);
  EXPECT_EQ(lse.data, separate.lse.data);
  ASSERT_EQ(hfa_backward(&separate.dout.tensor, &packed[0], &packed[1], &packed[2], &out.tensor,
                         &lse.tensor, &gradient[0], &gradient[1], &gradient[2], &options),
            HFA_SUCCESS)
      << hfa_last_error();
  const Buffer* grads[3] = {&separate.dq, &separate.dk, &separate.dv};
  for (int p = 0; p < 3; ++p)
    for (int64_t i = 0; i < b * s; ++i)
      ASSERT_EQ(0, std::memcmp(dqkv.data() + (i * 3 + p) * h * d, grads[p]->data.data() + i * h * d,
                               h * d * sizeof(float)))
          << "part " << p << " row " << i;
}

// k_cache and v_cache as views of one (batch, capacity, 2, heads_kv, headdim) buffer, appended to
// in place: the caches and the result of separate buffers.
TEST(Aliasing, InterleavedCachesAppendInPlace) {
  Decode separate(true);
  std::vector<float> kv(2 * separate.k_cache.data.size());
  for (int64_t slot = 0; slot < 8; ++slot) {
    std::memcpy(kv.data() + (2 * slot) * 64, separate.k_cache.data.data() + slot * 64,
                64 * sizeof(float));
    std::memcpy(kv.data() + (2 * slot + 1) * 64, separate.v_cache.data.data() + slot * 64,
                64 * sizeof(float));
  }
  ASSERT_EQ(separate.run(), HFA_SUCCESS) << hfa_last_error();

  Decode shared(true);
  shared.k_cache.tensor = make_tensor(kv.data(), DType::f32, {1, 8, 1, 64}, {8 * 128, 128, 64, 1});
  shared.v_cache.tensor =
      make_tensor(kv.data() + 64, DType::f32, {1, 8, 1, 64}, {8 * 128, 128, 64, 1});
  ASSERT_EQ(shared.run(), HFA_SUCCESS) << hfa_last_error();
  EXPECT_EQ(shared.out.data, separate.out.data);
  EXPECT_EQ(shared.lse.data, separate.lse.data);
  for (int64_t slot = 0; slot < 8; ++slot) {
    EXPECT_EQ(
        0, std::memcmp(kv.data() + (2 * slot) * 64, separate.k_cache.data.data() + slot * 64, 256))
        << slot;
    EXPECT_EQ(0, std::memcmp(kv.data() + (2 * slot + 1) * 64,
                             separate.v_cache.data.data() + slot * 64, 256))
        << slot;
  }
}

// Without an append the caches are only read: one tensor may be both (keys equal to values).
TEST(Aliasing, OneCacheForKeysAndValuesWithoutAppend) {
  Decode separate;
  std::copy(separate.k_cache.data.begin(), separate.k_cache.data.end(),
            separate.v_cache.data.begin());
  ASSERT_EQ(separate.run(), HFA_SUCCESS) << hfa_last_error();
  Decode shared;
  shared.v_cache.tensor = shared.k_cache.tensor;
  ASSERT_EQ(shared.run(), HFA_SUCCESS) << hfa_last_error();
  EXPECT_EQ(shared.out.data, separate.out.data);
}

// Two partials of (1, 2, 2, 8); out interleaved with outs[1] in one (1, 2, 2, 2, 8) buffer.
TEST(Aliasing, MergeOutInterleavedWithAPartial) {
  std::mt19937 rng(9);
  Buffer outs[2], lses[2], separate_out, separate_lse;
  for (int i = 0; i < 2; ++i) {
    outs[i].make(DType::f32, {1, 2, 2, 8});
    lses[i].make(DType::f32, {1, 2, 2});
    outs[i].fill_random(rng);
    lses[i].fill_random(rng);
  }
  separate_out.make(DType::f32, {1, 2, 2, 8});
  separate_lse.make(DType::f32, {1, 2, 2});
  const hfa_tensor* out_ptrs[2] = {&outs[0].tensor, &outs[1].tensor};
  const hfa_tensor* lse_ptrs[2] = {&lses[0].tensor, &lses[1].tensor};
  ASSERT_EQ(hfa_merge_partials(out_ptrs, lse_ptrs, 2, &separate_out.tensor, &separate_lse.tensor,
                               nullptr),
            HFA_SUCCESS)
      << hfa_last_error();

  std::vector<float> pair(2 * outs[1].data.size());
  const Tensor partial = make_tensor(pair.data(), DType::f32, {1, 2, 2, 8}, {64, 32, 16, 1});
  const Tensor out = make_tensor(pair.data() + 8, DType::f32, {1, 2, 2, 8}, {64, 32, 16, 1});
  for (int64_t row = 0; row < 4; ++row)
    std::memcpy(pair.data() + row * 16, outs[1].data.data() + row * 8, 8 * sizeof(float));
  Buffer lse;
  lse.make(DType::f32, {1, 2, 2});
  const hfa_tensor* interleaved[2] = {&outs[0].tensor, &partial};
  ASSERT_EQ(hfa_merge_partials(interleaved, lse_ptrs, 2, &out, &lse.tensor, nullptr), HFA_SUCCESS)
      << hfa_last_error();
  for (int64_t row = 0; row < 4; ++row)
    EXPECT_EQ(0, std::memcmp(pair.data() + row * 16 + 8, separate_out.data.data() + row * 8,
                             8 * sizeof(float)))
        << row;
  EXPECT_EQ(lse.data, separate_lse.data);
}

}  // namespace
}  // namespace hfa::test
