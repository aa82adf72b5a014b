// Argument checks: turn what the user passed into a ForwardProblem / BackwardProblem, or reject
// it with a Status naming the argument at fault. Nothing here touches an output tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/problem.hpp"

namespace hfa::detail {

struct ForwardArgs {
  const Tensor* q = nullptr;
  const Tensor* k = nullptr;
  const Tensor* v = nullptr;
  const Tensor* out = nullptr;  // null only for a workspace-size query
  const Tensor* lse = nullptr;  // optional
  const Options* options = nullptr;
};

struct BackwardArgs {
  const Tensor* dout = nullptr;  // dout, out, lse, dq, dk, dv: null only for a size query
  const Tensor* q = nullptr;
  const Tensor* k = nullptr;
  const Tensor* v = nullptr;
  const Tensor* out = nullptr;
  const Tensor* lse = nullptr;
  const Tensor* dq = nullptr;
  const Tensor* dk = nullptr;
  const Tensor* dv = nullptr;
  const Options* options = nullptr;
};

// What the call is for: a size query has only q, k, v and the options.
enum class Purpose { run, workspace_query };

// `problem` is default-constructed (a fresh PreparedCall's, a local): it is filled where it lies,
// with no copy of a whole problem (several hundred bytes) per call. On failure it is partly
// filled, and nothing runs it.
Status build_forward_problem(const ForwardArgs& args, Purpose purpose, ForwardProblem* problem);
Status build_backward_problem(const BackwardArgs& args, Purpose purpose,
                              BackwardProblem* problem);

// Every build_*_problem counts itself on its thread, whatever its outcome: the validations a call
// makes, which the tests count (one per call). A thread_local increment.
void count_validation();
uint64_t validations_on_this_thread();

// FP8 descales (validate_descales.cpp): checks them against a problem built from the other
// arguments and fills its q_descale, k_descale and v_descale.
Status attach_descales(const Options& options, const Tensor& q, ForwardProblem* problem);

// Whether a tensor's last dim must have unit stride (q, k, v...) or may have any (descales).
enum class LastStride { unit, any };

// Single-tensor checks shared with the KV-cache validation (validate_kvcache.cpp) and the
// descales'; see validate.cpp for what each checks.
Status check_tensor_form(const char* name, const Tensor* t, int32_t rank, const char* layout,
                         bool is_output, LastStride last = LastStride::unit);
// Row-major contiguous, ignoring the strides of dims with one element (frameworks leave those
// arbitrary) and every stride of a tensor with no elements.
Status check_contiguous(const char* name, const Tensor& t, const char* layout);
// On the device of ref (named ref_name in the message).
Status check_same_device(const char* name, const Tensor& t, const Tensor& ref,
                         const char* ref_name = "q");
Status check_supported_head_dim(const char* name, int64_t headdim);
std::string tensor_shape_string(const Tensor& t);
// Varlen offsets (cu_seqlens): the form (int32, contiguous (batch + 1), on ref's device), and the
// values where they can be read (host memory): start at 0, never decrease, end at total (the
// token count of total_owner); then each length at most max_len (named max_name; null: no bound).
Status check_cu_seqlens_form(const char* name, const Tensor* cu, const Tensor& ref,
                             const char* ref_name = "q");
Status check_cu_seqlens_values(const char* name, const int32_t* offsets, int64_t batch,
                               int64_t total, const char* total_owner, const char* max_name,
                               int32_t max_len);

// The caller's workspace (workspace_bytes at workspace) must hold `needed` bytes.
Status check_workspace(std::size_t needed, const void* workspace, std::size_t workspace_bytes);

// True when a problem has no output element to write (batch 0, or every sequence empty in the
// dimension that sizes the outputs): the API returns success without calling a backend.
bool forward_is_empty(const ForwardProblem& problem);
bool backward_is_empty(const BackwardProblem& problem);

}  // namespace hfa::detail
