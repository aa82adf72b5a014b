#include "api/dispatch.hpp"

#include <utility>

namespace hfa::detail {

#ifndef HFA_WITH_SM90
// Without CUDA in the build there is no src/sm90 to define it; validation rejects CUDA tensors
// before dispatch (check_device_usable).
const Backend* sm90_backend() { return nullptr; }
#endif

namespace {

const Backend& backend_for(const Device& device) {
  if (device.kind == DeviceKind::cuda) return *sm90_backend();  // non-null: validation checked
  return cpu_backend();
}

// The one rule for an operation: the entry of the device's backend, or not_supported naming
// `what` where that backend has none.
template <typename... Params, typename... Args>
Status call(Status (*Backend::*entry)(Params...), const char* what, const Device& device,
            Args&&... args) {
  const Backend& backend = backend_for(device);
  if (backend.*entry == nullptr)
    return not_supported("the ", backend.name, " backend has no ", what, " yet");
  return (backend.*entry)(std::forward<Args>(args)...);
}

// A workspace query: a backend without one needs no workspace.
template <typename Problem>
Status workspace_size(Status (*Backend::*query)(const Problem&, std::size_t*),
                      const Device& device, const Problem& problem, std::size_t* bytes) {
  const Backend& backend = backend_for(device);
  *bytes = 0;
  return backend.*query ? (backend.*query)(problem, bytes) : Status::ok();
}

}  // namespace

Status dispatch_forward(const ForwardProblem& p) {
  return call(&Backend::forward, "forward", p.device, p);
}

Status dispatch_forward_workspace_size(const ForwardProblem& p, std::size_t* bytes) {
  return workspace_size(&Backend::forward_workspace_size, p.device, p, bytes);
}

Status dispatch_backward(const BackwardProblem& p) {
  return call(&Backend::backward, "backward", p.fwd.device, p);
}

Status dispatch_backward_workspace_size(const BackwardProblem& p, std::size_t* bytes) {
  return workspace_size(&Backend::backward_workspace_size, p.fwd.device, p, bytes);
}

Status dispatch_forward_kvcache(const KVCacheProblem& p) {
  return call(&Backend::forward_kvcache, "KV-cache forward", p.device, p);
}

Status dispatch_forward_kvcache_workspace_size(const KVCacheProblem& p, std::size_t* bytes) {
  return workspace_size(&Backend::forward_kvcache_workspace_size, p.device, p, bytes);
}

Status dispatch_quantize_kv(const QuantizeProblem& p) {
  return call(&Backend::quantize_kv, "KV quantization", p.device, p);
}

Status dispatch_quantize_fp8(const Fp8QuantizeProblem& p) {
  return call(&Backend::quantize_fp8, "FP8 quantization", p.device, p);
}

Status dispatch_hadamard_signs(const HadamardSignsProblem& p) {
  return call(&Backend::hadamard_signs, "Hadamard signs", p.device, p);
}

Status dispatch_merge_partials(const MergePartialsProblem& p) {
  return call(&Backend::merge_partials, "merge of partials", p.device, p);
}

Status dispatch_read_to_host(std::span<const HostRead> reads, Device device, void* stream) {
  return call(&Backend::read_to_host, "read of device memory", device, reads, device, stream);
}

}  // namespace hfa::detail
