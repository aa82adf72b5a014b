// The C++ entry points: validate, check the workspace, dispatch.
#include "api/dispatch.hpp"
#include "api/errors.hpp"
#include "api/validate.hpp"
#include "api/validate_kvcache.hpp"

namespace hfa {

using namespace detail;

Status forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor* lse, const Options& options) {
  return guarded("forward", [&]() -> Status {
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
  return guarded("forward_workspace_size", [&]() -> Status {
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
  return guarded("backward", [&]() -> Status {
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
  return guarded("backward_workspace_size", [&]() -> Status {
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
  return guarded("forward_kvcache", [&]() -> Status {
    KVCacheProblem problem;
    HFA_RETURN_IF_ERROR(
        build_kvcache_problem({&q, &k_cache, &v_cache, &out, lse, &options}, &problem));
    // The CPU path needs no workspace; a GPU one will size its split partials here.
    if (int64_t{problem.batch} * problem.seqlen_q == 0) return Status::ok();
    return dispatch_forward_kvcache(problem);
  });
}

}  // namespace hfa
