// The Hopper backend's entry in the dispatch table: which problems the sm90 kernels take, and
// the launch of the one that fits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <string>

#include "common/backend.hpp"
#include "sm90/device.hpp"
#include "sm90/fwd/launch.hpp"

namespace hfa::sm90 {
namespace {

using detail::BackwardProblem;
using detail::ForwardProblem;

Status not_supported(const std::string& what) {
  return {Code::not_supported, "sm90 forward: " + what + " is not supported on this device yet"};
}

// The compiled (hdim_qk, hdim_v) configurations, smallest first. A problem runs on the first
// that holds both of its head dims, zero-padded (tile_config.hpp): hdim 96 on 128, 192/128 on
// its own (DeepSeek's shape), 128/64 on 128/128.
struct HeadDims {
  int qk, v;
};
constexpr HeadDims kCompiledHeadDims[] = {{64, 64}, {128, 128}, {192, 128}, {192, 192}, {256, 256}};

const HeadDims* head_dims_for(const ForwardProblem& p) {
  for (const HeadDims& dims : kCompiledHeadDims) {
    if (p.hdim_qk <= dims.qk && p.hdim_v <= dims.v) return &dims;
  }
  return nullptr;
}

Status check_forward_support(const ForwardProblem& p) {
  if (p.dtype != DType::bf16 && p.dtype != DType::f16) {
    return not_supported(std::string("dtype ") + dtype_name(p.dtype) + " (bf16 and fp16 are)");
  }
  if (head_dims_for(p) == nullptr) {
    return not_supported("headdim " + std::to_string(p.hdim_qk) + "/" + std::to_string(p.hdim_v) +
                         " (up to 256 are)");
  }
  return Status::ok();
}

template <typename Element>
Status dispatch_head_dims(const ForwardProblem& p, const fwd::LaunchContext& context) {
  const HeadDims& dims = *head_dims_for(p);
  switch (dims.qk * 1000 + dims.v) {
    case 64064: return fwd::run_forward<64, 64, Element>(p, context);
    case 128128: return fwd::run_forward<128, 128, Element>(p, context);
    case 192128: return fwd::run_forward<192, 128, Element>(p, context);
    case 192192: return fwd::run_forward<192, 192, Element>(p, context);
    default: return fwd::run_forward<256, 256, Element>(p, context);
  }
}

Status forward(const ForwardProblem& p) {
  if (Status status = check_forward_support(p); !status) return status;
  DeviceGuard guard(p.device.index);
  const DeviceFacts& facts = device_facts(p.device.index);
  if (!facts.status) return facts.status;
  const fwd::LaunchContext context{facts.sm_count, facts.l2_bytes};
  if (p.dtype == DType::bf16) return dispatch_head_dims<__nv_bfloat16>(p, context);
  return dispatch_head_dims<__half>(p, context);
}

Status forward_workspace_size(const ForwardProblem& p, std::size_t* bytes) {
  *bytes = fwd::workspace_bytes(p);
  return Status::ok();
}

Status backward(const BackwardProblem&) {
  return {Code::not_supported, "sm90 backward: not supported on this device yet"};
}

Status backward_workspace_size(const BackwardProblem&, std::size_t* bytes) {
  *bytes = 0;
  return Status::ok();
}

const detail::Backend kBackend{"sm90", forward, forward_workspace_size, backward,
                               backward_workspace_size};

}  // namespace
}  // namespace hfa::sm90

namespace hfa::detail {
const Backend* sm90_backend() { return &sm90::kBackend; }
}  // namespace hfa::detail
