// The C++ entry points: validate, check the workspace, dispatch.
#include <algorithm>
#include <cstdint>

#include "api/dispatch.hpp"
#include "common/environment.hpp"
#include "common/errors.hpp"
#include "api/validate.hpp"
#include "api/validate_kvcache.hpp"

namespace hfa {

using namespace detail;

namespace {

// A bad environment variable (common/environment.hpp) fails every call, the first one included.
template <typename Fn>
Status checked_call(const char* what, Fn&& fn) {
  return guarded(what, [&]() -> Status {
    HFA_RETURN_IF_ERROR(environment().status);
    return fn();
  });
}

}  // namespace

Status forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor* lse, const Options& options) {
  return checked_call("forward", [&]() -> Status {
    ForwardProblem problem;
    HFA_RETURN_IF_ERROR(
        build_forward_problem({&q, &k, &v, &out, lse, &options}, Purpose::run, &problem));
    std::size_t needed = 0;
    HFA_RETURN_IF_ERROR(dispatch_forward_workspace_size(problem, &needed));
    HFA_RETURN_IF_ERROR(check_workspace(needed, options));
    if (forward_is_empty(problem)) return Status::ok();
    return dispatch_forward(problem);
  });
}

Status forward_workspace_size(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Options& options, std::size_t* bytes) {
  return checked_call("forward_workspace_size", [&]() -> Status {
    if (bytes == nullptr) return invalid("bytes", "is null");
    ForwardProblem problem;
    HFA_RETURN_IF_ERROR(build_forward_problem({&q, &k, &v, nullptr, nullptr, &options},
                                              Purpose::workspace_query, &problem));
    return dispatch_forward_workspace_size(problem, bytes);
  });
}

Status backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                const Tensor& dv, const Options& options) {
  return checked_call("backward", [&]() -> Status {
    BackwardProblem problem;
    HFA_RETURN_IF_ERROR(build_backward_problem(
        {&dout, &q, &k, &v, &out, &lse, &dq, &dk, &dv, &options}, Purpose::run, &problem));
    std::size_t needed = 0;
    HFA_RETURN_IF_ERROR(dispatch_backward_workspace_size(problem, &needed));
    HFA_RETURN_IF_ERROR(check_workspace(needed, options));
    if (backward_is_empty(problem)) return Status::ok();
    return dispatch_backward(problem);
  });
}

Status backward_workspace_size(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Options& options, std::size_t* bytes) {
  return checked_call("backward_workspace_size", [&]() -> Status {
    if (bytes == nullptr) return invalid("bytes", "is null");
    BackwardArgs args;
    args.q = &q;
    args.k = &k;
    args.v = &v;
    args.options = &options;
    BackwardProblem problem;
    HFA_RETURN_IF_ERROR(build_backward_problem(args, Purpose::workspace_query, &problem));
    return dispatch_backward_workspace_size(problem, bytes);
  });
}

Status forward_kvcache(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& out, const Tensor* lse, const KVCacheOptions& options) {
  return checked_call("forward_kvcache", [&]() -> Status {
    KVCacheProblem problem;
    HFA_RETURN_IF_ERROR(build_kvcache_problem({&q, &k_cache, &v_cache, &out, lse, &options},
                                              Purpose::run, &problem));
    // No query rows: nothing to compute, unless new tokens are to be appended.
    if (problem.total_query_rows() == 0 && problem.k_new == nullptr) return Status::ok();
    std::size_t needed = 0;
    HFA_RETURN_IF_ERROR(dispatch_forward_kvcache_workspace_size(problem, &needed));
    if (needed > 0 && (options.workspace == nullptr || options.workspace_bytes < needed))
      return invalid("workspace", options.workspace == nullptr ? "is null" : "is too small",
                     ": this call needs ", needed, " bytes, got ", options.workspace_bytes,
                     " (size it with forward_kvcache_workspace_size)");
    return dispatch_forward_kvcache(problem);
  });
}

Status forward_kvcache_workspace_size(const Tensor& q, const Tensor& k_cache,
                                      const Tensor& v_cache, const KVCacheOptions& options,
                                      std::size_t* bytes) {
  return checked_call("forward_kvcache_workspace_size", [&]() -> Status {
    if (bytes == nullptr) return invalid("bytes", "is null");
    // The call's checks need an out: a contiguous stand-in of q's shape with v's headdim (never
    // written; the query reads no tensor data). Extents past int32 are q's or v_cache's to
    // reject (checked before out): until then the stand-in's sizes saturate, not overflow.
    Tensor out = q;
    const int last = std::clamp(q.rank, 1, HFA_MAX_RANK) - 1;  // 3, or 2 for varlen q
    const int64_t v_row = std::clamp<int64_t>(v_cache.shape[3], 0, INT32_MAX);
    out.shape[last] = v_cache.dtype == HFA_FP4_E2M1X2 ? 2 * v_row : v_row;
    int64_t running = 1;
    for (int d = last; d >= 0; --d) {
      out.stride[d] = running;
      if (__builtin_mul_overflow(running, std::max<int64_t>(out.shape[d], 1), &running))
        running = INT64_MAX;
    }
    KVCacheProblem problem;
    HFA_RETURN_IF_ERROR(build_kvcache_problem({&q, &k_cache, &v_cache, &out, nullptr, &options},
                                              Purpose::workspace_query, &problem));
    // Written only now: a rejected query leaves *bytes as it was, as every rejected call does.
    *bytes = 0;
    if (problem.total_query_rows() == 0) return Status::ok();
    return dispatch_forward_kvcache_workspace_size(problem, bytes);
  });
}

}  // namespace hfa
