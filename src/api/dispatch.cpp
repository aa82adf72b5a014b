#include "api/dispatch.hpp"

namespace hfa::detail {

#ifndef HFA_WITH_SM90
// Without CUDA in the build there is no src/sm90 to define these; validation rejects CUDA
// tensors before dispatch.
const Backend* sm90_backend() { return nullptr; }
Status sm90_forward_kvcache(const KVCacheProblem&) {
  return not_supported("the KV-cache forward: this build has no CUDA backend");
}
Status sm90_kvcache_workspace_size(const KVCacheProblem&, std::size_t* bytes) {
  *bytes = 0;
  return not_supported("the KV-cache forward: this build has no CUDA backend");
}
Status sm90_quantize_kv(const QuantizeProblem&) {
  return not_supported("KV quantization: this build has no CUDA backend");
}
Status sm90_quantize_fp8(const Fp8QuantizeProblem&) {
  return not_supported("FP8 quantization: this build has no CUDA backend");
}
Status sm90_hadamard_signs(uint64_t, float*, int64_t, Device, void*) {
  return not_supported("Hadamard signs: this build has no CUDA backend");
}
Status sm90_merge_partials(const MergePartialsProblem&) {
  return not_supported("merging partials: this build has no CUDA backend");
}
#endif

namespace {

const Backend& backend_for(const Device& device) {
  if (device.kind == DeviceKind::cuda) return *sm90_backend();  // non-null: validation checked
  return cpu_backend();
}

Status missing(const Backend& backend, const char* what) {
  return not_supported("the ", backend.name, " backend has no ", what, " yet");
}

}  // namespace

Status dispatch_forward_workspace_size(const ForwardProblem& problem, std::size_t* bytes) {
  const Backend& backend = backend_for(problem.device);
  *bytes = 0;
  return backend.forward_workspace_size ? backend.forward_workspace_size(problem, bytes)
                                        : Status::ok();
}

Status dispatch_forward(const ForwardProblem& problem) {
  const Backend& backend = backend_for(problem.device);
  return backend.forward ? backend.forward(problem) : missing(backend, "forward");
}

Status dispatch_backward_workspace_size(const BackwardProblem& problem, std::size_t* bytes) {
  const Backend& backend = backend_for(problem.fwd.device);
  *bytes = 0;
  return backend.backward_workspace_size ? backend.backward_workspace_size(problem, bytes)
                                         : Status::ok();
}

Status dispatch_backward(const BackwardProblem& problem) {
  const Backend& backend = backend_for(problem.fwd.device);
  return backend.backward ? backend.backward(problem) : missing(backend, "backward");
}

Status dispatch_kvcache_workspace_size(const KVCacheProblem& problem, std::size_t* bytes) {
  *bytes = 0;
  if (problem.device.kind == DeviceKind::cuda) return sm90_kvcache_workspace_size(problem, bytes);
  return Status::ok();
}

Status dispatch_forward_kvcache(const KVCacheProblem& problem) {
  if (problem.device.kind == DeviceKind::cuda) return sm90_forward_kvcache(problem);
  return cpu_forward_kvcache(problem);
}

}  // namespace hfa::detail
