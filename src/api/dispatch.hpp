// Backend choice: the one place that maps a problem to an entry of the dispatch table.
#pragma once

#include <cstddef>
#include <exception>
#include <new>
#include <span>

#include "common/errors.hpp"
#include "common/backend.hpp"

namespace hfa::detail {

// One per entry of the dispatch table, each run by the backend of the problem's device
// (validation has made sure this build has it). A backend without the entry (a kernel family
// not written yet) answers not_supported; one without a workspace query needs no workspace.
Status dispatch_forward(const ForwardProblem& problem);
Status dispatch_forward_workspace_size(const ForwardProblem& problem, std::size_t* bytes);
Status dispatch_backward(const BackwardProblem& problem);
Status dispatch_backward_workspace_size(const BackwardProblem& problem, std::size_t* bytes);
Status dispatch_forward_kvcache(const KVCacheProblem& problem);
Status dispatch_forward_kvcache_workspace_size(const KVCacheProblem& problem, std::size_t* bytes);
Status dispatch_quantize_kv(const QuantizeProblem& problem);
Status dispatch_quantize_fp8(const Fp8QuantizeProblem& problem);
Status dispatch_hadamard_signs(const HadamardSignsProblem& problem);
Status dispatch_merge_partials(const MergePartialsProblem& problem);
Status dispatch_read_to_host(std::span<const HostRead> reads, Device device, void* stream);

// Runs `fn`, turning an escaping exception (bad_alloc in a CPU buffer, say) into a Status:
// nothing may unwind through the API, and never through the C ABI.
template <typename Fn>
Status guarded(const char* what, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return {Code::internal, cat(what, ": out of host memory")};
  } catch (const std::exception& e) {
    return {Code::internal, cat(what, ": ", e.what())};
  } catch (...) {
    return {Code::internal, cat(what, ": unknown exception")};
  }
}

}  // namespace hfa::detail
