// The KV-cache forward on a Hopper GPU: its entries in the dispatch table (common/backend.hpp).
// Support checks, the device's SM count (read once), then the launch for q's dtype. The values on
// the device (lengths, block table, varlen offsets) are trusted here: validation mode checks
// them in the API, before dispatch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "sm90/decode/append.hpp"
#include "sm90/decode/launch.hpp"
#include "sm90/device.hpp"
#include "sm90/operations.hpp"

namespace hfa::sm90 {
namespace {

constexpr const char* kFamily = "sm90 KV-cache forward";

// The device the split planner sizes for: the SMs left once sm_margin are kept free (the grid
// is not persistent, so the margin shrinks the automatic split count rather than the grid).
Status planned_device(const detail::KVCacheProblem& p, const DeviceFacts& facts,
                      decode::DeviceInfo* info) {
  if (!facts.status) return facts.status;
  return usable_sms(facts, p.sm_margin, p.device.index, kFamily, &info->sm_count);
}

}  // namespace

Status forward_kvcache_workspace_size(const detail::KVCacheProblem& p, std::size_t* bytes) {
  using namespace decode;
  *bytes = 0;
  if (Status s = check_support(p); !s) return s;
  DeviceGuard guard(p.device.index);
  DeviceInfo info;
  if (Status s = planned_device(p, device_facts(p.device.index), &info); !s) return s;
  *bytes = workspace_bytes(p, info);
  return Status::ok();
}

Status forward_kvcache(const detail::KVCacheProblem& p) {
  using namespace decode;
  if (Status s = check_support(p); !s) return s;
  DeviceGuard guard(p.device.index);
  DeviceInfo info;
  if (Status s = planned_device(p, device_facts(p.device.index), &info); !s) return s;
  constexpr uintptr_t kWorkspaceAlignment = 16;  // fp32 partials, read as float4-friendly rows
  if (workspace_bytes(p, info) > 0 &&
      reinterpret_cast<uintptr_t>(p.workspace) % kWorkspaceAlignment != 0)
    return {Code::invalid_argument, "workspace: must be 16-byte aligned on the GPU"};
  // The append first, on the same stream: the attention reads the keys it writes (and the
  // rotated queries, from the workspace).
  detail::KVCacheProblem attention;
  if (Status s = append_new_tokens(p, &attention); !s) return s;
  if (p.total_query_rows() == 0) return Status::ok();  // an append without queries
  if (p.dtype == DType::bf16) return run<__nv_bfloat16>(attention, info);
  return run<__half>(attention, info);
}

}  // namespace hfa::sm90
