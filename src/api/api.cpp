// The C++ entry points. Each call is prepared (validated into the problem the backends take, its
// workspace sized) once, then run (the workspace checked, the backend called): forward, backward
// and forward_kvcache do both; prepare_* and run() let a caller allocate the workspace between.
#include <algorithm>
#include <cstdint>
#include <new>
#include <type_traits>

#include "api/dispatch.hpp"
#include "api/prepared_call.hpp"
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
    if (const Status& bad = environment().status; !bad) return bad;  // no copy when it is ok
    return fn();
  });
}

// The problem, then the workspace its backend needs for it.
Status plan(const ForwardArgs& args, ForwardProblem* problem, std::size_t* workspace_bytes) {
  HFA_RETURN_IF_ERROR(build_forward_problem(args, Purpose::run, problem));
  return dispatch_forward_workspace_size(*problem, workspace_bytes);
}

Status plan(const BackwardArgs& args, BackwardProblem* problem, std::size_t* workspace_bytes) {
  HFA_RETURN_IF_ERROR(build_backward_problem(args, Purpose::run, problem));
  return dispatch_backward_workspace_size(*problem, workspace_bytes);
}

// No query rows: no rotated queries and no partials to keep, whatever the backend.
Status kvcache_workspace_size(const KVCacheProblem& problem, std::size_t* workspace_bytes) {
  *workspace_bytes = 0;
  if (problem.total_query_rows() == 0) return Status::ok();
  return dispatch_forward_kvcache_workspace_size(problem, workspace_bytes);
}

Status plan(const KVCacheArgs& args, KVCacheProblem* problem, std::size_t* workspace_bytes) {
  HFA_RETURN_IF_ERROR(build_kvcache_problem(args, Purpose::run, problem));
  return kvcache_workspace_size(*problem, workspace_bytes);
}

// `call` holds no call (a fresh PreparedCall) and gets one when the plan succeeds.
template <typename Problem, typename Args>
Status prepare_call(const Args& args, PreparedCall<Problem>* call) {
  HFA_RETURN_IF_ERROR(plan(args, &call->problem, &call->workspace_bytes));
  call->operation = kOperationOf<Problem>;
  return Status::ok();
}

// A call prepared into the caller's storage. It holds no call from the start, so that a failure
// anywhere, the environment's included, leaves none to run.
template <typename Problem, typename Args>
Status prepare_into(const char* what, const Args& args, Call* call,
                    std::size_t* workspace_bytes) {
  if (call != nullptr) clear(call);
  return checked_call(what, [&]() -> Status {
    if (call == nullptr) return invalid("call", "is null");
    auto* prepared = new (call->opaque) PreparedCall<Problem>;
    HFA_RETURN_IF_ERROR(prepare_call(args, prepared));
    if (workspace_bytes != nullptr) *workspace_bytes = prepared->workspace_bytes;
    return Status::ok();
  });
}

// A problem's run once its workspace is in it: the backend, unless there is nothing to compute.
Status run_problem(const ForwardProblem& problem) {
  if (forward_is_empty(problem)) return Status::ok();
  return dispatch_forward(problem);
}

Status run_problem(const BackwardProblem& problem) {
  if (backward_is_empty(problem)) return Status::ok();
  return dispatch_backward(problem);
}

Status run_problem(const KVCacheProblem& problem) {
  // No query rows: nothing to compute, unless new tokens are to be appended.
  if (problem.total_query_rows() == 0 && problem.k_new == nullptr) return Status::ok();
  return dispatch_forward_kvcache(problem);
}

// Where a problem keeps the caller's workspace (a backward's in its forward part).
template <typename Problem>
auto& workspace_holder(Problem& problem) {
  if constexpr (std::is_same_v<std::remove_const_t<Problem>, BackwardProblem>)
    return problem.fwd;
  else
    return problem;
}

// Runs a prepared call with the caller's workspace, checked, put into the problem, the one place
// it is known: into a copy, so that the call stays as it was, to run again. Where the prepared
// problem holds that workspace already (none: every CPU call, and a call prepared from options
// that carry it) the copy would be the same bytes, and the call's own problem is run, read in
// place: a problem is several hundred bytes to copy.
template <typename Problem>
Status run_call(const PreparedCall<Problem>& call, void* workspace, std::size_t workspace_bytes) {
  HFA_RETURN_IF_ERROR(check_workspace(call.workspace_bytes, workspace, workspace_bytes));
  const auto& prepared = workspace_holder(call.problem);
  if (prepared.workspace == workspace && prepared.workspace_bytes == workspace_bytes)
    return run_problem(call.problem);
  Problem problem = call.problem;
  workspace_holder(problem).workspace = workspace;
  workspace_holder(problem).workspace_bytes = workspace_bytes;
  return run_problem(problem);
}

// Runs the call prepare_into placed (or the caller copied, byte for byte).
template <typename Problem>
Status run_prepared(const Call& call, void* workspace, std::size_t workspace_bytes) {
  return run_call(*std::launder(reinterpret_cast<const PreparedCall<Problem>*>(call.opaque)),
                  workspace, workspace_bytes);
}

// prepare, then run with the workspace of the options: the calls that validate and run at once.
template <typename Problem, typename Args, typename CallOptions>
Status prepare_and_run(const Args& args, const CallOptions& options) {
  PreparedCall<Problem> call;
  HFA_RETURN_IF_ERROR(prepare_call(args, &call));
  return run_call(call, options.workspace, options.workspace_bytes);
}

}  // namespace

Status forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor* lse, const Options& options) {
  return checked_call("forward", [&] {
    return prepare_and_run<ForwardProblem>(ForwardArgs{&q, &k, &v, &out, lse, &options}, options);
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
  return checked_call("backward", [&] {
    return prepare_and_run<BackwardProblem>(
        BackwardArgs{&dout, &q, &k, &v, &out, &lse, &dq, &dk, &dv, &options}, options);
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
  return checked_call("forward_kvcache", [&] {
    return prepare_and_run<KVCacheProblem>(
        KVCacheArgs{&q, &k_cache, &v_cache, &out, lse, &options}, options);
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
    return kvcache_workspace_size(problem, bytes);
  });
}

Status prepare_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor* lse, const Options& options, Call* call,
                       std::size_t* workspace_bytes) {
  return prepare_into<ForwardProblem>("prepare_forward",
                                      ForwardArgs{&q, &k, &v, &out, lse, &options}, call,
                                      workspace_bytes);
}

Status prepare_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, const Options& options, Call* call,
                        std::size_t* workspace_bytes) {
  return prepare_into<BackwardProblem>(
      "prepare_backward", BackwardArgs{&dout, &q, &k, &v, &out, &lse, &dq, &dk, &dv, &options},
      call, workspace_bytes);
}

Status prepare_forward_kvcache(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                               const Tensor& out, const Tensor* lse,
                               const KVCacheOptions& options, Call* call,
                               std::size_t* workspace_bytes) {
  return prepare_into<KVCacheProblem>("prepare_forward_kvcache",
                                      KVCacheArgs{&q, &k_cache, &v_cache, &out, lse, &options},
                                      call, workspace_bytes);
}

Status run(const Call& call, void* workspace, std::size_t workspace_bytes) {
  return guarded("run", [&]() -> Status {
    switch (operation_of(call)) {
      case Operation::forward: return run_prepared<ForwardProblem>(call, workspace, workspace_bytes);
      case Operation::backward: return run_prepared<BackwardProblem>(call, workspace, workspace_bytes);
      case Operation::forward_kvcache:
        return run_prepared<KVCacheProblem>(call, workspace, workspace_bytes);
      case Operation::none:
        break;
    }
    return invalid("call", "holds no prepared call (its prepare failed, or never ran on it)");
  });
}

}  // namespace hfa
