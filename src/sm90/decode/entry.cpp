// The KV-cache forward on a Hopper GPU: its entries in the dispatch table (common/backend.hpp).
// Each makes the call's plan once (support, the SMs it may use, the split count, the workspace:
// plan.cpp); the forward then appends the new tokens and launches the attention for q's dtype.
// The values on the device (lengths, block table, varlen offsets) are trusted here: validation
// mode checks them in the API, before dispatch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "common/errors.hpp"
#include "common/mla.hpp"
#include "sm90/decode/append.hpp"
#include "sm90/decode/launch.hpp"
#include "sm90/device.hpp"
#include "sm90/operations.hpp"

namespace hfa::sm90 {

Status forward_kvcache_workspace_size(const detail::KVCacheProblem& p, std::size_t* bytes) {
  *bytes = 0;
  decode::Plan plan;
  HFA_RETURN_IF_ERROR(decode::make_plan(p, &plan));
  *bytes = plan.workspace_bytes;
  return Status::ok();
}

Status forward_kvcache(const detail::KVCacheProblem& p) {
  decode::Plan plan;
  HFA_RETURN_IF_ERROR(decode::make_plan(p, &plan));
  constexpr uintptr_t kWorkspaceAlignment = 16;  // fp32 partials, read as float4-friendly rows
  if (plan.workspace_bytes > 0 &&
      reinterpret_cast<uintptr_t>(p.workspace) % kWorkspaceAlignment != 0)
    return {Code::invalid_argument, "workspace: must be 16-byte aligned on the GPU"};
  const DeviceGuard guard(p.device.index);
  // The append first, on the same stream: the attention reads the keys it writes (and the
  // rotated queries, from the workspace).
  detail::KVCacheProblem attention;
  HFA_RETURN_IF_ERROR(decode::append_new_tokens(p, &attention));
  if (p.total_query_rows() == 0) return Status::ok();  // an append without queries
  if (detail::is_mla_shape(attention.hdim_qk, attention.hdim_v)) {
    if (attention.format == detail::CacheFormat::mla_fp8) return decode::run_mla_fp8(attention, plan);
    if (p.dtype == DType::bf16) return decode::run_mla<__nv_bfloat16>(attention, plan);
    return decode::run_mla<__half>(attention, plan);
  }
  if (p.dtype == DType::bf16) return decode::run<__nv_bfloat16>(attention, plan);
  return decode::run<__half>(attention, plan);
}

}  // namespace hfa::sm90
