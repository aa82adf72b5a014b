// An AttentionCase on the sm90 backend: device copies of its host buffers (outputs start as the
// host ones, NaN), the forward and the backward run through the backend's entries over them,
// and the results copied back into the case's host buffers for the common checks.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/attention_case.hpp"
#include "common/backend.hpp"
#include "sm90/gpu_test_support.hpp"

namespace hfa::test {

class GpuCase {
 public:
  explicit GpuCase(AttentionData& data)
      : data_(data), q_(data.q), k_(data.k), v_(data.v), out_(data.out), lse_(data.lse),
        dout_(data.dout), dq_(data.dq), dk_(data.dk), dv_(data.dv),
        cu_q_(data.cu_seqlens_q()), cu_k_(data.cu_seqlens_k()), sinks_(data.sinks),
        dsinks_(data.dsinks), used_q_(data.spec().seqused_q), used_k_(data.spec().seqused_k),
        alibi_slopes_(data.alibi_slopes) {}

  int32_t sm_margin = 0;  // the problems' sm_margin (SMs left free)
  // A block-sparse mask over device memory (its views' data on the GPU); off by default.
  detail::BlockSparse block_sparse{};

  // The copies were made (check with ASSERT_NO_FATAL_FAILURE(gpu.check_copies())).
  void check_copies() const {
    for (const DeviceCopy* copy : {&q_, &k_, &v_, &out_, &lse_, &dout_, &dq_, &dk_, &dv_, &cu_q_,
                                   &cu_k_, &sinks_, &dsinks_, &used_q_, &used_k_, &alibi_slopes_}) {
      HFA_CUDA_OK(copy->status());
    }
  }

  detail::ForwardProblem forward_problem() const {
    detail::ForwardProblem p = data_.forward_problem();
    p.q = q_.get<void>(), p.k = k_.get<void>(), p.v = v_.get<void>(), p.out = out_.get<void>();
    p.lse = lse_.get<float>();
    if (p.cu_seqlens_q != nullptr) {
      p.cu_seqlens_q = cu_q_.get<int32_t>();
      p.cu_seqlens_k = cu_k_.get<int32_t>();
    }
    if (p.sinks != nullptr) p.sinks = sinks_.get<float>();
    if (p.seqused_q != nullptr) p.seqused_q = used_q_.get<int32_t>();
    if (p.seqused_k != nullptr) p.seqused_k = used_k_.get<int32_t>();
    if (p.vectors.alibi_slopes) p.vectors.alibi_slopes.data = alibi_slopes_.get<float>();
    if (block_sparse) p.block_sparse = block_sparse;
    p.device = Device::cuda(0);
    p.sm_margin = sm_margin;
    return p;
  }

  detail::BackwardProblem backward_problem(bool deterministic) const {
    detail::BackwardProblem p = data_.backward_problem();
    p.fwd = forward_problem();
    p.dout = dout_.get<void>();
    p.dq = dq_.get<void>(), p.dk = dk_.get<void>(), p.dv = dv_.get<void>();
    if (p.dsinks != nullptr) p.dsinks = dsinks_.get<float>();
    p.fwd.deterministic = deterministic;
    return p;
  }

  // The forward on `stream` with its own workspace; out and lse copied back to the host.
  void forward(cudaStream_t stream = nullptr) {
    detail::ForwardProblem p = forward_problem();
    const detail::Backend& sm90 = *detail::sm90_backend();
    std::size_t bytes = 0;
    ASSERT_TRUE(sm90.forward_workspace_size(p, &bytes).is_ok());
    DeviceBuffer workspace(bytes);
    p.workspace = workspace.get(), p.workspace_bytes = bytes, p.stream = stream;
    const Status status = sm90.forward(p);
    ASSERT_TRUE(status.is_ok()) << status.message();
    HFA_CUDA_OK(cudaDeviceSynchronize());
    download_forward();
  }
  void download_forward() {
    download(out_, data_.out);
    download(lse_, data_.lse);
  }

  // The backward over the forward's out and lse (in device memory) into dq, dk, dv, dsinks.
  // With a workspace given (sized by workspace_bytes) it is used; the call is only enqueued on
  // `stream`, so that it can be captured. Without, it runs, syncs and copies the results back.
  std::size_t workspace_bytes(bool deterministic) const {
    std::size_t bytes = 0;
    const Status status = detail::sm90_backend()->backward_workspace_size(backward_problem(deterministic), &bytes);
    EXPECT_TRUE(status.is_ok()) << status.message();
    return bytes;
  }
  Status enqueue_backward(bool deterministic, void* workspace, std::size_t bytes, cudaStream_t stream) const {
    detail::BackwardProblem p = backward_problem(deterministic);
    p.fwd.workspace = workspace, p.fwd.workspace_bytes = bytes, p.fwd.stream = stream;
    return detail::sm90_backend()->backward(p);
  }
  void backward(bool deterministic = false) {
    DeviceBuffer workspace(workspace_bytes(deterministic));
    const Status status = enqueue_backward(deterministic, workspace.get(), workspace.bytes(), nullptr);
    ASSERT_TRUE(status.is_ok()) << status.message();
    HFA_CUDA_OK(cudaDeviceSynchronize());
    download_gradients();
  }
  void download_gradients() {
    download(dq_, data_.dq);
    download(dk_, data_.dk);
    download(dv_, data_.dv);
    if (!data_.dsinks.empty()) {
      HFA_CUDA_OK(cudaMemcpy(data_.dsinks.data(), dsinks_.get<void>(),
                             data_.dsinks.size() * sizeof(float), cudaMemcpyDeviceToHost));
    }
  }

 private:
  static void download(const DeviceCopy& from, HostTensor& to) {
    HFA_CUDA_OK(cudaMemcpy(to.data(), from.get<void>(), to.storage_bytes(), cudaMemcpyDeviceToHost));
  }

  AttentionData& data_;
  DeviceCopy q_, k_, v_, out_, lse_, dout_, dq_, dk_, dv_, cu_q_, cu_k_, sinks_, dsinks_, used_q_, used_k_;
  DeviceCopy alibi_slopes_;  // the slopes as the case's data holds them when the GpuCase is made
};

}  // namespace hfa::test
