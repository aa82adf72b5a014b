// Prepared calls (hfa_prepare_*, hfa_run): each call validates once, whichever way it is made, and
// a prepared call runs as the call itself does.
#include <cstdint>
#include <cstring>
#include <vector>

#include "api/validate.hpp"
#include "fixture.hpp"
#include "hfa/hfa.h"
#include "kvcache/kv_case.hpp"

namespace hfa::test {
namespace {

// The validations (problem builds) `call` makes on this thread.
template <typename Call>
uint64_t validations_of(Call&& call) {
  const uint64_t before = detail::validations_on_this_thread();
  call();
  return detail::validations_on_this_thread() - before;
}

std::vector<unsigned char> bytes_of(const Buffer& b) {
  const auto* p = reinterpret_cast<const unsigned char*>(b.data.data());
  return {p, p + b.data.size() * sizeof(float)};
}

// A KV-cache call that appends two new tokens per sequence to a paged bf16 cache.
struct AppendingKVCase : KVCase {
  Storage k_new, v_new;
  AppendingKVCase() {
    cache_seqlens = {3, 20};
    build();
    k_new.make(DType::bf16, {batch(), 2, heads_kv, hdim});
    v_new.make(DType::bf16, {batch(), 2, heads_kv, hdim});
    std::memset(k_new.bytes.data(), 0x3c, k_new.bytes.size());  // bf16 0x3c3c: about 0.011
    std::memset(v_new.bytes.data(), 0x3f, v_new.bytes.size());  // bf16 0x3f3f: about 0.75
    options.k_new = &k_new.tensor;
    options.v_new = &v_new.tensor;
  }
};

TEST(PreparedCall, ForwardValidatesOnce) {
  Attention a;
  const hfa_options options = hfa_default_options();
  EXPECT_EQ(1u, validations_of([&] {
    ASSERT_EQ(hfa_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, &a.lse.tensor,
                          &options),
              HFA_SUCCESS);
  }));
  const std::vector<unsigned char> out = bytes_of(a.out), lse = bytes_of(a.lse);

  a.poison_outputs();
  hfa_call call;
  size_t workspace_bytes = 1;
  EXPECT_EQ(1u, validations_of([&] {
    ASSERT_EQ(hfa_prepare_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor,
                                  &a.lse.tensor, &options, &call, &workspace_bytes),
              HFA_SUCCESS);
    ASSERT_EQ(hfa_run(&call, nullptr, workspace_bytes), HFA_SUCCESS);
  }));
  EXPECT_EQ(workspace_bytes, 0u);  // the CPU keeps its scratch per thread
  EXPECT_EQ(bytes_of(a.out), out);
  EXPECT_EQ(bytes_of(a.lse), lse);

  // What the front ends did before: the size query, then the call.
  size_t bytes = 0;
  EXPECT_EQ(2u, validations_of([&] {
    ASSERT_EQ(hfa_forward_workspace_size(&a.q.tensor, &a.k.tensor, &a.v.tensor, &options, &bytes),
              HFA_SUCCESS);
    ASSERT_EQ(hfa_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, &a.lse.tensor,
                          &options),
              HFA_SUCCESS);
  }));
}

TEST(PreparedCall, BackwardValidatesOnce) {
  Attention a;
  ASSERT_TRUE(a.forward().is_ok());
  const hfa_options options = hfa_default_options();
  EXPECT_EQ(1u, validations_of([&] {
    ASSERT_EQ(hfa_backward(&a.dout.tensor, &a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor,
                           &a.lse.tensor, &a.dq.tensor, &a.dk.tensor, &a.dv.tensor, &options),
              HFA_SUCCESS);
  }));
  const std::vector<unsigned char> dq = bytes_of(a.dq), dk = bytes_of(a.dk), dv = bytes_of(a.dv);

  for (Buffer* b : {&a.dq, &a.dk, &a.dv}) b->poison();
  hfa_call call;
  size_t workspace_bytes = 1;
  EXPECT_EQ(1u, validations_of([&] {
    ASSERT_EQ(hfa_prepare_backward(&a.dout.tensor, &a.q.tensor, &a.k.tensor, &a.v.tensor,
                                   &a.out.tensor, &a.lse.tensor, &a.dq.tensor, &a.dk.tensor,
                                   &a.dv.tensor, &options, &call, &workspace_bytes),
              HFA_SUCCESS);
    ASSERT_EQ(hfa_run(&call, nullptr, workspace_bytes), HFA_SUCCESS);
  }));
  EXPECT_EQ(bytes_of(a.dq), dq);
  EXPECT_EQ(bytes_of(a.dk), dk);
  EXPECT_EQ(bytes_of(a.dv), dv);
}

TEST(PreparedCall, KVCacheValidatesOnce) {
  // The append writes the cache: each run gets a fresh case, the same every time.
  AppendingKVCase direct, prepared;
  const hfa_kvcache_options direct_options = to_c(direct.options);
  EXPECT_EQ(1u, validations_of([&] {
    ASSERT_EQ(hfa_forward_kvcache(&direct.q.tensor, &direct.k.tensor, &direct.v.tensor,
                                  &direct.out.tensor, &direct.lse.tensor, &direct_options),
              HFA_SUCCESS);
  }));

  const hfa_kvcache_options options = to_c(prepared.options);
  hfa_call call;
  size_t workspace_bytes = 1;
  EXPECT_EQ(1u, validations_of([&] {
    ASSERT_EQ(hfa_prepare_forward_kvcache(&prepared.q.tensor, &prepared.k.tensor,
                                          &prepared.v.tensor, &prepared.out.tensor,
                                          &prepared.lse.tensor, &options, &call,
                                          &workspace_bytes),
              HFA_SUCCESS);
    ASSERT_EQ(hfa_run(&call, nullptr, workspace_bytes), HFA_SUCCESS);
  }));
  EXPECT_EQ(workspace_bytes, 0u);
  EXPECT_EQ(prepared.out.bytes, direct.out.bytes);
  EXPECT_EQ(prepared.lse.bytes, direct.lse.bytes);
  EXPECT_EQ(prepared.k.bytes, direct.k.bytes);  // the same tokens appended
  EXPECT_EQ(prepared.v.bytes, direct.v.bytes);
}

// A prepared call keeps what the views say, not the views: temporaries may go, and a copy of the
// call runs. It reads the data when it runs.
TEST(PreparedCall, HoldsWhatTheViewsSay) {
  Attention a;
  Call call;
  {
    Options options;
    options.causal = true;
    Tensor q = a.q.tensor, k = a.k.tensor, v = a.v.tensor, out = a.out.tensor;
    ASSERT_TRUE(prepare_forward(q, k, v, out, &a.lse.tensor, options, &call, nullptr).is_ok());
    std::memset(&q, 0, sizeof q);
    std::memset(&out, 0, sizeof out);
  }
  a.q.data[0] += 1.0f;  // read at the run, not at the prepare
  Call copy;
  std::memcpy(&copy, &call, sizeof call);
  ASSERT_TRUE(run(copy).is_ok());
  const std::vector<unsigned char> out = bytes_of(a.out);

  a.poison_outputs();
  a.options.causal = true;
  ASSERT_TRUE(a.forward().is_ok());
  EXPECT_EQ(bytes_of(a.out), out);

  a.poison_outputs();
  ASSERT_TRUE(run(call).is_ok());  // a run leaves the call as it was
  EXPECT_EQ(bytes_of(a.out), out);
}

// A prepare fails as the call does, and leaves no call to run.
TEST(PreparedCall, AFailedPrepareLeavesNoCall) {
  Attention a;
  hfa_call call;
  ASSERT_EQ(hfa_prepare_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, nullptr,
                                nullptr, &call, nullptr),
            HFA_SUCCESS);
  a.k.tensor.shape[3] = 128;
  size_t workspace_bytes = 7;
  EXPECT_EQ(hfa_prepare_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, nullptr,
                                nullptr, &call, &workspace_bytes),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "k: expected headdim 64 (as q), got 128");
  EXPECT_EQ(workspace_bytes, 7u);
  EXPECT_EQ(hfa_run(&call, nullptr, 0), HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(),
               "call: holds no prepared call (its prepare failed, or never ran on it)");
  EXPECT_TRUE(a.forward_outputs_untouched());

  // Rejected by the C ABI before the C++ API: no call either.
  a.k.tensor.shape[3] = 64;
  ASSERT_EQ(hfa_prepare_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, nullptr,
                                nullptr, &call, nullptr),
            HFA_SUCCESS);
  EXPECT_EQ(hfa_prepare_forward(nullptr, &a.k.tensor, &a.v.tensor, &a.out.tensor, nullptr,
                                nullptr, &call, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "q: is null");
  EXPECT_EQ(hfa_run(&call, nullptr, 0), HFA_ERROR_INVALID_ARGUMENT);

  // Storage no prepare wrote.
  hfa_call zeros{};
  EXPECT_EQ(hfa_run(&zeros, nullptr, 0), HFA_ERROR_INVALID_ARGUMENT);
  hfa_call stray;
  std::memset(&stray, 0x5a, sizeof stray);
  EXPECT_EQ(hfa_run(&stray, nullptr, 0), HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(a.forward_outputs_untouched());
}

TEST(PreparedCall, NullArguments) {
  Attention a;
  EXPECT_EQ(hfa_prepare_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, nullptr,
                                nullptr, nullptr, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "call: is null");
  EXPECT_EQ(hfa_run(nullptr, nullptr, 0), HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "call: is null");
  hfa_call call;
  EXPECT_EQ(hfa_prepare_backward(&a.dout.tensor, &a.q.tensor, &a.k.tensor, &a.v.tensor,
                                 &a.out.tensor, nullptr, &a.dq.tensor, &a.dk.tensor, &a.dv.tensor,
                                 nullptr, &call, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "lse: is null");
  KVCase c;
  c.build();
  EXPECT_EQ(hfa_prepare_forward_kvcache(&c.q.tensor, &c.k.tensor, &c.v.tensor, &c.out.tensor,
                                        nullptr, nullptr, &call, nullptr),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "options: is null");
  EXPECT_EQ(hfa_run(&call, nullptr, 0), HFA_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace hfa::test
