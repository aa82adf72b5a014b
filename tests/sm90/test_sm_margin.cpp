// sm_margin on the Hopper backend: a margin in [0, SM count) changes no byte of the forward
// (its persistent grid only gets fewer CTAs, each tile computed the same way) nor of the
// deterministic backward (whose grid it does not change); a margin that leaves no SM is an
// invalid argument naming sm_margin, before anything is launched. Skipped without a Hopper GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/attention_case.hpp"
#include "common/backend.hpp"
#include "sm90/gpu_case.hpp"

namespace hfa::test {
namespace {

// Enough tiles (batch · heads · 128-row blocks) to fill every SM more than once. With a margin
// of all SMs but one, one CTA walks every tile: its double-buffered Q (hdim 64, hdim 128
// causal) goes round its ring many times.
AttentionCase many_tiles(bool causal, int hdim = 128) {
  AttentionCase c;
  c.dtype = DType::bf16;
  c.hdim_qk = c.hdim_v = hdim;
  c.batch = 2;
  c.heads_q = 16;
  c.heads_kv = 4;
  c.seqlen_q = c.seqlen_k = 1000;
  c.causal = causal;  // causal: the dynamic (tile counter) schedule; else the static one
  return c;
}

struct Outputs {
  std::vector<std::byte> out, lse, dq, dk, dv;
};

std::vector<std::byte> bytes_of(const HostTensor& t) {
  const auto* begin = static_cast<const std::byte*>(t.data());
  return {begin, begin + t.storage_bytes()};
}

// Forward and deterministic backward of `c` with this margin, their outputs' bytes.
void run_with_margin(const AttentionCase& c, int32_t margin, Outputs* result) {
  AttentionData data(c);
  GpuCase gpu(data);
  gpu.sm_margin = margin;
  ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
  ASSERT_NO_FATAL_FAILURE(gpu.forward());
  ASSERT_NO_FATAL_FAILURE(gpu.backward(/*deterministic=*/true));
  *result = {bytes_of(data.out), bytes_of(data.lse), bytes_of(data.dq), bytes_of(data.dk),
             bytes_of(data.dv)};
}

TEST(SmMargin, SameBytesWithAnyMargin) {
  HFA_REQUIRE_HOPPER();
  const int sms = sm_count();
  for (int hdim : {64, 128}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(causal ? "causal" : "full") + " hdim " + std::to_string(hdim));
      Outputs plain;
      ASSERT_NO_FATAL_FAILURE(run_with_margin(many_tiles(causal, hdim), 0, &plain));
      for (int32_t margin : {1, 8, sms / 2, sms - 1}) {
        SCOPED_TRACE("sm_margin " + std::to_string(margin));
        Outputs with_margin;
        ASSERT_NO_FATAL_FAILURE(run_with_margin(many_tiles(causal, hdim), margin, &with_margin));
        EXPECT_TRUE(with_margin.out == plain.out);
        EXPECT_TRUE(with_margin.lse == plain.lse);
        EXPECT_TRUE(with_margin.dq == plain.dq);
        EXPECT_TRUE(with_margin.dk == plain.dk);
        EXPECT_TRUE(with_margin.dv == plain.dv);
      }
    }
  }
}

// A margin of the SM count or more leaves the call nothing to run on.
TEST(SmMargin, NoSmLeftIsRejected) {
  HFA_REQUIRE_HOPPER();
  const int sms = sm_count();
  for (int32_t margin : {sms, sms + 7}) {
    SCOPED_TRACE("sm_margin " + std::to_string(margin));
    AttentionData data(many_tiles(false));
    GpuCase gpu(data);
    gpu.sm_margin = margin;
    ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
    const detail::Backend& sm90 = *detail::sm90_backend();
    const std::string expected = "sm_margin: " + std::to_string(margin) + " leaves no SM of the " +
                                 std::to_string(sms) + " of cuda:0";
    const Status forward = sm90.forward(gpu.forward_problem());
    EXPECT_EQ(forward.code(), Code::invalid_argument);
    EXPECT_EQ(forward.message().rfind(expected, 0), 0u) << forward.message();
    const Status backward = gpu.enqueue_backward(false, nullptr, 0, nullptr);
    EXPECT_EQ(backward.code(), Code::invalid_argument);
    EXPECT_EQ(backward.message().rfind(expected, 0), 0u) << backward.message();
  }
}

}  // namespace
}  // namespace hfa::test
