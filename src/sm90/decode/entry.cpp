// The KV-cache forward on a Hopper GPU: the dispatch layer's entry (common/backend.hpp).
// Support checks, the validation mode's copy of the lengths and block table, the device's SM
// count (read once), then the launch for q's dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "api/validate_kvcache.hpp"
#include "common/backend.hpp"
#include "sm90/decode/append.hpp"
#include "sm90/decode/launch.hpp"
#include "sm90/device.hpp"

namespace hfa::sm90::decode {
namespace {

Status cuda_error(const std::string& what) {
  return {Code::cuda, "sm90 KV-cache forward: " + what + ": " + cudaGetErrorString(cudaGetLastError())};
}

// Validation mode: the lengths, the varlen offsets (queries and new tokens) and the used
// block-table entries, copied to the host and checked like a CPU call's (the one place this path
// synchronizes, as documented).
Status validate_values(const detail::KVCacheProblem& p) {
  auto stream = static_cast<cudaStream_t>(p.stream);
  // A varlen offsets array (batch + 1) into `host`, when given; queued on the stream.
  auto copy_offsets = [&](const int32_t* device, std::vector<int32_t>& host, const char* name) {
    if (device == nullptr) return Status::ok();
    host.resize(std::size_t(p.batch) + 1);
    if (cudaMemcpyAsync(host.data(), device, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                        stream) != cudaSuccess)
      return cuda_error(std::string("validation: reading ") + name);
    return Status::ok();
  };
  std::vector<int32_t> lengths(std::size_t(p.batch));
  if (cudaMemcpyAsync(lengths.data(), p.cache_seqlens, lengths.size() * sizeof(int32_t),
                      cudaMemcpyDeviceToHost, stream) != cudaSuccess)
    return cuda_error("validation: reading cache_seqlens");
  std::vector<int32_t> table;
  if (p.block_table != nullptr) {
    table.resize(std::size_t(p.batch) * p.max_pages);
    if (cudaMemcpy2DAsync(table.data(), std::size_t(p.max_pages) * sizeof(int32_t), p.block_table,
                          std::size_t(p.block_table_stride) * sizeof(int32_t),
                          std::size_t(p.max_pages) * sizeof(int32_t), std::size_t(p.batch),
                          cudaMemcpyDeviceToHost, stream) != cudaSuccess)
      return cuda_error("validation: reading block_table");
  }
  std::vector<int32_t> offsets, new_offsets;  // cu_seqlens_q, cu_seqlens_k_new
  if (Status s = copy_offsets(p.cu_seqlens_q, offsets, "cu_seqlens_q"); !s) return s;
  if (Status s = copy_offsets(p.cu_seqlens_k_new, new_offsets, "cu_seqlens_k_new"); !s) return s;
  if (cudaStreamSynchronize(stream) != cudaSuccess) return cuda_error("validation: synchronizing");
  detail::KVCacheProblem host = p;
  host.cache_seqlens = lengths.data();
  if (p.is_varlen()) host.cu_seqlens_q = offsets.data();
  if (p.is_varlen_new()) host.cu_seqlens_k_new = new_offsets.data();
  if (p.block_table != nullptr) {
    host.block_table = table.data();
    host.block_table_stride = p.max_pages;
  }
  return detail::check_kvcache_values(host);
}

constexpr const char* kFamily = "sm90 KV-cache forward";

// The device the split planner sizes for: the SMs left once sm_margin are kept free (the grid
// is not persistent, so the margin shrinks the automatic split count rather than the grid).
Status planned_device(const detail::KVCacheProblem& p, const sm90::DeviceFacts& facts,
                      DeviceInfo* info) {
  if (!facts.status) return facts.status;
  return sm90::usable_sms(facts, p.sm_margin, p.device.index, kFamily, &info->sm_count);
}

}  // namespace
}  // namespace hfa::sm90::decode

namespace hfa::detail {

Status sm90_kvcache_workspace_size(const KVCacheProblem& p, std::size_t* bytes) {
  using namespace sm90::decode;
  *bytes = 0;
  if (Status s = check_support(p); !s) return s;
  sm90::DeviceGuard guard(p.device.index);
  DeviceInfo info;
  if (Status s = planned_device(p, sm90::device_facts(p.device.index), &info); !s) return s;
  *bytes = workspace_bytes(p, info);
  return Status::ok();
}

Status sm90_forward_kvcache(const KVCacheProblem& p) {
  using namespace sm90::decode;
  if (Status s = check_support(p); !s) return s;
  sm90::DeviceGuard guard(p.device.index);
  DeviceInfo info;
  if (Status s = planned_device(p, sm90::device_facts(p.device.index), &info); !s) return s;
  constexpr uintptr_t kWorkspaceAlignment = 16;  // fp32 partials, read as float4-friendly rows
  if (workspace_bytes(p, info) > 0 &&
      reinterpret_cast<uintptr_t>(p.workspace) % kWorkspaceAlignment != 0)
    return {Code::invalid_argument, "workspace: must be 16-byte aligned on the GPU"};
  if (p.validate)
    if (Status s = validate_values(p); !s) return s;
  // The append first, on the same stream: the attention reads the keys it writes (and the
  // rotated queries, from the workspace).
  detail::KVCacheProblem attention;
  if (Status s = append_new_tokens(p, &attention); !s) return s;
  if (p.total_query_rows() == 0) return Status::ok();  // an append without queries
  if (p.dtype == DType::bf16) return run<__nv_bfloat16>(attention, info);
  return run<__half>(attention, info);
}

}  // namespace hfa::detail
