// The "cpu" entry of the dispatch table: the tiled kernels over host memory.
#include "common/backend.hpp"

#include <string>

#include "cpu/kvcache.hpp"
#include "cpu/sequence.hpp"
#include "cpu/tiled_attention.hpp"

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

Status forward(const ForwardProblem& p) {
  if (p.dtype == DType::e4m3) {  // FP8: forward only, over dequantized copies
    if (Status status = check_out_type(p); !status) return status;
    return cpu::fp8_forward(p);
  }
  if (Status status = check_types(p); !status) return status;
  return cpu::tiled_forward(p);
}

Status backward(const BackwardProblem& p) {
  if (Status status = check_types(p.fwd); !status) return status;
  const bool has_queries = p.fwd.batch > 0 && cpu::longest_queries(p.fwd) > 0;
  if (p.fwd.lse == nullptr && has_queries) return {Code::invalid_argument, "lse: the backward needs the forward's lse"};
  return cpu::tiled_backward(p);
}

// The CPU kernels keep their scratch per thread: no caller workspace.
Status forward_workspace_size(const ForwardProblem&, std::size_t* bytes) {
  *bytes = 0;
  return Status::ok();
}

Status backward_workspace_size(const BackwardProblem&, std::size_t* bytes) {
  *bytes = 0;
  return Status::ok();
}

}  // namespace

Status cpu_forward_kvcache(const KVCacheProblem& p) {
  if (!is_supported(p.dtype)) {
    return {Code::not_supported, std::string("cpu backend: q of dtype ") + dtype_name(p.dtype) +
                                     " is not supported (f32, f16, bf16)"};
  }
  return cpu::kvcache_forward(p);
}

const Backend& cpu_backend() {
  static const Backend backend{"cpu", forward, forward_workspace_size, backward,
                               backward_workspace_size};
  return backend;
}

}  // namespace hfa::detail
