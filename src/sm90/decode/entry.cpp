// The KV-cache forward on a Hopper GPU: the dispatch layer's entry (common/backend.hpp).
// Support checks, the validation mode's copy of the lengths and block table, the device's SM
// count (read once), then the launch for q's dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/validate_kvcache.hpp"
#include "common/backend.hpp"
#include "sm90/decode/launch.hpp"

namespace hfa::sm90::decode {
namespace {

struct DeviceFacts {
  Status status;
  DeviceInfo info;
};

Status cuda_error(const std::string& what) {
  return {Code::cuda, "sm90 KV-cache forward: " + what + ": " + cudaGetErrorString(cudaGetLastError())};
}

const DeviceFacts& device_facts(int device) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<DeviceFacts>> cache;
  std::lock_guard lock(mutex);
  if (device >= int(cache.size())) cache.resize(device + 1);
  if (!cache[device]) {
    auto facts = std::make_unique<DeviceFacts>();
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
      facts->status = cuda_error("cannot query device " + std::to_string(device));
    } else if (prop.major != 9 || prop.minor != 0) {
      facts->status = {Code::not_supported, std::string("sm90 KV-cache forward: device ") + prop.name +
                                                " is sm_" + std::to_string(prop.major * 10 + prop.minor) +
                                                "; these kernels need a Hopper GPU (sm_90)"};
    } else {
      facts->info.sm_count = prop.multiProcessorCount;
    }
    cache[device] = std::move(facts);
  }
  return *cache[device];
}

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

// Validation mode: the lengths and the used block-table entries, copied to the host and checked
// like a CPU call's (the one place this path synchronizes, as documented).
Status validate_values(const detail::KVCacheProblem& p) {
  auto stream = static_cast<cudaStream_t>(p.stream);
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
  if (cudaStreamSynchronize(stream) != cudaSuccess) return cuda_error("validation: synchronizing");
  detail::KVCacheProblem host = p;
  host.cache_seqlens = lengths.data();
  if (p.block_table != nullptr) {
    host.block_table = table.data();
    host.block_table_stride = p.max_pages;
  }
  return detail::check_kvcache_values(host);
}

}  // namespace
}  // namespace hfa::sm90::decode

namespace hfa::detail {

Status sm90_kvcache_workspace_size(const KVCacheProblem& p, std::size_t* bytes) {
  using namespace sm90::decode;
  *bytes = 0;
  if (Status s = check_support(p); !s) return s;
  DeviceGuard guard(p.device.index);
  const DeviceFacts& facts = device_facts(p.device.index);
  if (!facts.status) return facts.status;
  *bytes = workspace_bytes(p, facts.info);
  return Status::ok();
}

Status sm90_forward_kvcache(const KVCacheProblem& p) {
  using namespace sm90::decode;
  if (Status s = check_support(p); !s) return s;
  DeviceGuard guard(p.device.index);
  const DeviceFacts& facts = device_facts(p.device.index);
  if (!facts.status) return facts.status;
  constexpr uintptr_t kWorkspaceAlignment = 16;  // fp32 partials, read as float4-friendly rows
  if (workspace_bytes(p, facts.info) > 0 &&
      reinterpret_cast<uintptr_t>(p.workspace) % kWorkspaceAlignment != 0)
    return {Code::invalid_argument, "workspace: must be 16-byte aligned on the GPU"};
  if (p.validate)
    if (Status s = validate_values(p); !s) return s;
  if (p.dtype == DType::bf16) return run<__nv_bfloat16>(p, facts.info);
  return run<__half>(p, facts.info);
}

}  // namespace hfa::detail
