// The GPU append's host side: support, the rotated queries' workspace, and the launch of one
// warp per task (append_kernel.cuh) on the caller's stream, before the attention.
#include "sm90/decode/append.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "sm90/decode/append_kernel.cuh"
#include "sm90/decode/head_dim.hpp"

namespace hfa::sm90::decode {
namespace {

using detail::KVCacheProblem;

static_assert(std::is_trivially_copyable_v<KVCacheProblem>,
              "append_kernel takes the problem itself as its parameter");
constexpr std::size_t kMaxKernelParameterBytes = 4096;
static_assert(sizeof(KVCacheProblem) + sizeof(AppendWork) <= kMaxKernelParameterBytes);
constexpr int64_t kMaxGridX = INT32_MAX;

bool rotates_q(const KVCacheProblem& p) { return p.k_new != nullptr && p.rotary_cos != nullptr; }

AppendWork work_of(const KVCacheProblem& p, uint16_t* rotated_q) {
  AppendWork work;
  work.token_tasks = p.total_new_rows() * p.heads_kv;
  const int64_t query_tasks = rotates_q(p) ? p.total_query_rows() * p.heads_q : 0;
  work.tasks = work.token_tasks + query_tasks;
  work.rotated_q = rotated_q;
  return work;
}

int64_t blocks_of(const AppendWork& work) { return (work.tasks + kAppendWarps - 1) / kAppendWarps; }

}  // namespace

Status check_append_support(const KVCacheProblem& p) {
  if (p.k_new == nullptr) return Status::ok();
  // The rest the decode's checks cover: bf16/fp16 rows of a supported head dim (the kernel is
  // compiled for each), cache rows at 16-byte and per-token scales at 4-byte aligned addresses
  // (what the stores need).
  if (blocks_of(work_of(p, nullptr)) > kMaxGridX)
    return {Code::not_supported,
            "k_new: new tokens · heads_kv + query rows · heads_q above the GPU append's " +
                std::to_string(kMaxGridX * kAppendWarps) + " (one warp each)"};
  return Status::ok();
}

std::size_t rotated_q_bytes(const KVCacheProblem& p) {
  if (!rotates_q(p)) return 0;
  const std::size_t bytes =
      std::size_t(p.total_query_rows()) * p.heads_q * p.hdim_qk * sizeof(uint16_t);
  return (bytes + kAppendWorkspaceAlignment - 1) / kAppendWorkspaceAlignment * kAppendWorkspaceAlignment;
}

Status append_new_tokens(const KVCacheProblem& p, KVCacheProblem* attention) {
  *attention = p;
  if (p.k_new == nullptr) return Status::ok();
  const std::size_t rotated_bytes = rotated_q_bytes(p);
  // The API checked the workspace against the plan's workspace_bytes, whose front this is.
  auto* rotated_q = rotated_bytes > 0 ? static_cast<uint16_t*>(p.workspace) : nullptr;
  const AppendWork work = work_of(p, rotated_q);
  if (work.tasks > 0) {
    const Status launched = with_head_dim(p.hdim_qk, [&](auto head_dim) {
      append_kernel<decltype(head_dim)::value>
          <<<unsigned(blocks_of(work)), kAppendThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(p, work);
      return Status::ok();
    });
    if (!launched) return launched;
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return {Code::cuda, std::string("sm90 KV-cache append: launch: ") + cudaGetErrorString(e)};
  }
  if (rotated_q != nullptr) {
    // q's rows in their order (packed tokens for varlen, with no batch stride), contiguous.
    const int64_t row = int64_t{p.heads_q} * p.hdim_qk;
    attention->q = rotated_q;
    attention->q_stride = {p.is_varlen() ? 0 : p.seqlen_q * row, row, p.hdim_qk};
    attention->workspace = static_cast<std::byte*>(p.workspace) + rotated_bytes;
    attention->workspace_bytes = p.workspace_bytes - rotated_bytes;
  }
  return Status::ok();
}

}  // namespace hfa::sm90::decode
