// Backend choice: the one place that maps a problem to an entry of the dispatch table.
#pragma once

#include <cstddef>
#include <exception>
#include <new>

#include "common/errors.hpp"
#include "common/backend.hpp"

namespace hfa::detail {

// Each picks the backend of the problem's device (validation has made sure there is one). A
// backend without the entry (a kernel family not written yet) answers not_supported; a
// backend without a workspace query needs no workspace.
Status dispatch_forward_workspace_size(const ForwardProblem& problem, std::size_t* bytes);
Status dispatch_forward(const ForwardProblem& problem);
Status dispatch_backward_workspace_size(const BackwardProblem& problem, std::size_t* bytes);
Status dispatch_backward(const BackwardProblem& problem);
// The KV-cache forward: the CPU backend, or the sm90 decode path for CUDA tensors.
Status dispatch_forward_kvcache(const KVCacheProblem& problem);
Status dispatch_kvcache_workspace_size(const KVCacheProblem& problem, std::size_t* bytes);

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
