// The "cpu" entry of the dispatch table: the tiled kernels over host memory, and every other
// operation (cpu/operations.hpp).
#include "common/backend.hpp"

#include <cstddef>
#include <cstring>
#include <string>

#include "common/errors.hpp"
#include "cpu/kvcache.hpp"
#include "cpu/operations.hpp"
#include "cpu/sequence.hpp"
#include "cpu/tiled_attention.hpp"
#include "cpu/tiled_common.hpp"

namespace hfa::detail {
namespace {

bool is_supported(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}

Status check_out_type(const ForwardProblem& p) {
  if (!is_supported(p.out_dtype)) {
    return {Code::not_supported, std::string("cpu backend: out of dtype ") +
                                     dtype_name(p.out_dtype) + " is not supported"};
  }
  return Status::ok();
}

Status check_types(const ForwardProblem& p) {
  if (!is_supported(p.dtype)) {
    return {Code::not_supported, std::string("cpu backend: inputs of dtype ") +
                                     dtype_name(p.dtype) + " are not supported (f32, f16, bf16)"};
  }
  return check_out_type(p);
}

// The VECTOR options (hfa/options.def) the CPU kernels read; one given that they do not is
// refused, named, rather than silently ignored.
template <class Vectors>
Status check_vectors(const Vectors& vectors) {
  return refuse_unread(vectors, "cpu", {"alibi_slopes"});
}

// The tiled kernels give each sparse query block one work item of whole 64-row query tiles.
Status check_block_sparse(const ForwardProblem& p) {
  if (!p.block_sparse) return Status::ok();
  const int32_t block_q = p.block_sparse.block_q;
  if (block_q % cpu::kForwardQueryRows != 0 ||
      block_q > cpu::kForwardQueryRows * cpu::kForwardQueryTilesPerItem)
    return not_supported("sparse_block_q: the cpu kernels take a multiple of ",
                         cpu::kForwardQueryRows, " up to ",
                         cpu::kForwardQueryRows * cpu::kForwardQueryTilesPerItem, ", got ",
                         block_q);
  return Status::ok();
}

Status forward(const ForwardProblem& p) {
  HFA_RETURN_IF_ERROR(check_vectors(p.vectors));
  HFA_RETURN_IF_ERROR(check_block_sparse(p));
  if (p.dtype == DType::e4m3) {  // FP8: forward only, over dequantized copies
    if (Status status = check_out_type(p); !status) return status;
    return cpu::fp8_forward(p);
  }
  if (Status status = check_types(p); !status) return status;
  return cpu::tiled_forward(p);
}

Status backward(const BackwardProblem& p) {
  HFA_RETURN_IF_ERROR(check_vectors(p.fwd.vectors));
  HFA_RETURN_IF_ERROR(check_block_sparse(p.fwd));
  if (Status status = check_types(p.fwd); !status) return status;
  const bool has_queries = p.fwd.batch > 0 && cpu::longest_queries(p.fwd) > 0;
  if (p.fwd.lse == nullptr && has_queries) return {Code::invalid_argument, "lse: the backward needs the forward's lse"};
  return cpu::tiled_backward(p);
}

Status forward_kvcache(const KVCacheProblem& p) {
  HFA_RETURN_IF_ERROR(check_vectors(p.vectors));
  if (!is_supported(p.dtype)) {
    return {Code::not_supported, std::string("cpu backend: q of dtype ") + dtype_name(p.dtype) +
                                     " is not supported (f32, f16, bf16)"};
  }
  return cpu::kvcache_forward(p);
}

// The CPU kernels keep their scratch per thread: no caller workspace, whatever the call.
template <typename Problem>
Status no_workspace(const Problem&, std::size_t* bytes) {
  *bytes = 0;
  return Status::ok();
}

// The CPU's "device memory" is host memory: a copy, and nothing to wait for.
Status read_to_host(std::span<const HostRead> reads, Device, void*) {
  for (const HostRead& read : reads)
    for (std::size_t row = 0; read.row_bytes > 0 && row < read.rows; ++row)
      std::memcpy(static_cast<std::byte*>(read.host) + row * read.row_bytes,
                  static_cast<const std::byte*>(read.device) + row * read.device_pitch,
                  read.row_bytes);
  return Status::ok();
}

}  // namespace

const Backend& cpu_backend() {
  static const Backend backend{
      .name = "cpu",
      .forward = forward,
      .forward_workspace_size = no_workspace<ForwardProblem>,
      .backward = backward,
      .backward_workspace_size = no_workspace<BackwardProblem>,
      .forward_kvcache = forward_kvcache,
      .forward_kvcache_workspace_size = no_workspace<KVCacheProblem>,
      .quantize_kv = cpu::quantize_kv,
      .quantize_fp8 = cpu::quantize_fp8,
      .hadamard_signs = cpu::hadamard_signs,
      .merge_partials = cpu::merge_partials,
      .read_to_host = read_to_host,
  };
  return backend;
}

}  // namespace hfa::detail
