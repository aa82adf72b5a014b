// The strides the Hopper backend's TMA maps take (tma_descriptor.cpp): a zero stride over several
// rows or heads (a broadcast view, which TMA cannot express) is refused as not supported instead
// of read as 16 bytes; the stride of a dim of one element, which nothing uses, may be anything;
// an empty tensor's strides (0 from the API) encode; a thread whose first CUDA call is hfa's
// encodes its maps (the driver needs a current context). Skipped without a Hopper GPU.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "common/attention_case.hpp"
#include "common/backend.hpp"
#include "common/expected.hpp"
#include "common/forward_checks.hpp"
#include "sm90/gpu_case.hpp"

namespace hfa::test {
namespace {

AttentionCase small_case(int batch, int seqlen_k) {
  AttentionCase c;
  c.dtype = DType::bf16;
  c.hdim_qk = c.hdim_v = 128;
  c.batch = batch, c.seqlen_q = 64, c.seqlen_k = seqlen_k;
  c.heads_q = 4, c.heads_kv = 2;
  return c;
}

Status forward_with(const GpuCase& gpu, const detail::ForwardProblem& p) {
  const detail::Backend& sm90 = *detail::sm90_backend();
  std::size_t bytes = 0;
  EXPECT_TRUE(sm90.forward_workspace_size(p, &bytes).is_ok());
  DeviceBuffer workspace(bytes);
  detail::ForwardProblem run = p;
  run.workspace = workspace.get(), run.workspace_bytes = bytes;
  const Status status = sm90.forward(run);
  cudaDeviceSynchronize();
  return status;
}

TEST(TileMaps, BroadcastIsNotSupported) {
  HFA_REQUIRE_HOPPER();
  AttentionData data(small_case(2, 100));
  GpuCase gpu(data);
  ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
  detail::ForwardProblem p = gpu.forward_problem();
  p.k_stride.head = 0;  // both kv heads read kv head 0: a broadcast over heads
  const Status status = forward_with(gpu, p);
  EXPECT_EQ(status.code(), Code::not_supported);
  EXPECT_NE(status.message().find("broadcast"), std::string::npos) << status.message();
}

TEST(TileMaps, OneElementDimsTakeAnyStride) {
  HFA_REQUIRE_HOPPER();
  AttentionData data(small_case(1, 100));
  const ForwardExpectation expected = expected_forward(data, true);
  GpuCase gpu(data);
  ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
  detail::ForwardProblem p = gpu.forward_problem();
  p.q_stride.batch = p.k_stride.batch = p.v_stride.batch = 3;  // batch 1: never used
  const Status status = forward_with(gpu, p);
  ASSERT_TRUE(status.is_ok()) << status.message();
  ASSERT_NO_FATAL_FAILURE(gpu.download_forward());
  check_forward_results(data, expected);
}

TEST(TileMaps, EmptyKeysWithZeroStridesEncode) {
  HFA_REQUIRE_HOPPER();
  AttentionData data(small_case(2, 0));
  const ForwardExpectation expected = expected_forward(data, true);
  GpuCase gpu(data);
  ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
  detail::ForwardProblem p = gpu.forward_problem();
  p.k_stride = p.v_stride = {};  // what the API hands on for tensors with no elements
  const Status status = forward_with(gpu, p);
  ASSERT_TRUE(status.is_ok()) << status.message();
  ASSERT_NO_FATAL_FAILURE(gpu.download_forward());
  check_forward_results(data, expected);
}

// Device 0 is current in a new thread before any CUDA call, but no context is: hfa must make it
// current (DeviceGuard) before the driver encodes a TMA map. The thread makes no CUDA call of
// its own; its launch is on the legacy default stream, which the synchronize below waits for.
TEST(TileMaps, FirstCudaCallOfAThreadEncodes) {
  HFA_REQUIRE_HOPPER();
  AttentionData data(small_case(2, 100));
  const ForwardExpectation expected = expected_forward(data, true);
  GpuCase gpu(data);
  ASSERT_NO_FATAL_FAILURE(gpu.check_copies());
  detail::ForwardProblem p = gpu.forward_problem();
  ASSERT_EQ(p.device.index, 0);
  std::size_t bytes = 0;
  ASSERT_TRUE(detail::sm90_backend()->forward_workspace_size(p, &bytes).is_ok());
  DeviceBuffer workspace(bytes);
  p.workspace = workspace.get(), p.workspace_bytes = bytes;
  Status status = Status::ok();
  std::thread([&] { status = detail::sm90_backend()->forward(p); }).join();
  cudaDeviceSynchronize();
  ASSERT_TRUE(status.is_ok()) << status.message();
  ASSERT_NO_FATAL_FAILURE(gpu.download_forward());
  check_forward_results(data, expected);
}

}  // namespace
}  // namespace hfa::test
