// CUDA tensors where no GPU can run them give a clear error, never a crash.
#include "fixture.hpp"

namespace hfa::test {
namespace {

void move_to_cuda(Attention& a, int32_t index) {
  for (Buffer* b : {&a.q, &a.k, &a.v, &a.out, &a.lse, &a.dout, &a.dq, &a.dk, &a.dv}) {
    b->tensor.device = HFA_CUDA;
    b->tensor.device_index = index;
  }
}

TEST(Devices, CountIsConsistent) {
  EXPECT_GE(cuda_device_count(), 0);
  EXPECT_EQ(cuda_device_count(), hfa_cuda_device_count());
#ifndef HFA_WITH_SM90
  EXPECT_EQ(cuda_device_count(), 0);
#endif
}

TEST(Devices, CudaTensorsWithoutAGpu) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  Attention a;
  move_to_cuda(a, 0);
  // The host buffers stand in for device memory: the call must be refused before any access.
  EXPECT_TRUE(ForwardRejected(a, "q", "on cuda:0, but", Code::not_supported));
  EXPECT_TRUE(BackwardRejected(a, "q", "on cuda:0, but", Code::not_supported));
#ifdef HFA_WITH_SM90
  EXPECT_NE(a.forward().message().find("no CUDA device is available"), std::string::npos);
#else
  EXPECT_NE(a.forward().message().find("this build has no CUDA backend"), std::string::npos);
#endif
  std::size_t bytes = 0;
  EXPECT_EQ(forward_workspace_size(a.q.tensor, a.k.tensor, a.v.tensor, a.options, &bytes).code(),
            Code::not_supported);
}

TEST(Devices, CudaIndexOutOfRange) {
  const int32_t count = cuda_device_count();
  if (count == 0) GTEST_SKIP() << "no GPU: covered by CudaTensorsWithoutAGpu";
  Attention a;
  move_to_cuda(a, count);
  EXPECT_TRUE(ForwardRejected(a, "q", "CUDA device"));
}

TEST(Devices, MismatchedCudaIndices) {
  Attention a;
  move_to_cuda(a, 0);
  a.k.tensor.device_index = 1;
  // Device agreement is checked before availability, so this holds with or without a GPU.
  EXPECT_TRUE(ForwardRejected(a, "k", "on cuda:1, expected cuda:0 (as q)"));
}

}  // namespace
}  // namespace hfa::test
