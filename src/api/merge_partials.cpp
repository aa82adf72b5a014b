// hfa_merge_partials: the checks (in the order of validate.cpp: each tensor on its own, then how
// they relate, then which of them may share memory) and the dispatch.
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "api/devices.hpp"
#include "api/dispatch.hpp"
#include "api/overlap.hpp"
#include "api/validate.hpp"
#include "common/environment.hpp"
#include "common/errors.hpp"

namespace hfa {
namespace {

using detail::invalid;
using detail::MergePartialsProblem;
using detail::Strides;

constexpr int kFixedRank = 4;   // out: (batch, seqlen_q, heads, hdim_v)
constexpr int kVarlenRank = 3;  // out: (total_q, heads, hdim_v)
constexpr int kOutGroup = 1, kLseGroup = 2;  // what may be merged in place into out, into lse

const char* name_of(hfa_dtype d) { return dtype_name(static_cast<DType>(d)); }

bool is_float(hfa_dtype d) { return d == HFA_F32 || d == HFA_BF16 || d == HFA_F16; }

// The two layouts, named as out's rank chooses them.
struct Layout {
  bool varlen;
  int out_rank() const { return varlen ? kVarlenRank : kFixedRank; }
  int lse_rank() const { return out_rank() - 1; }
  const char* out() const {
    return varlen ? "(total_q, heads, hdim_v)" : "(batch, seqlen_q, heads, hdim_v)";
  }
  const char* lse() const { return varlen ? "(heads, total_q)" : "(batch, heads, seqlen_q)"; }
  // The (batch, row, head) strides of an out-like tensor and of an LSE.
  Strides out_strides(const Tensor& t) const {
    if (varlen) return {0, t.stride[0], t.stride[1]};
    return {t.stride[0], t.stride[1], t.stride[2]};
  }
  Strides lse_strides(const Tensor& t) const {
    if (varlen) return {0, t.stride[1], t.stride[0]};
    return {t.stride[0], t.stride[2], t.stride[1]};
  }
};

// An out-like tensor on its own: the layout, a float dtype.
Status check_out_form(const char* name, const Tensor* t, const Layout& layout, bool is_output) {
  HFA_RETURN_IF_ERROR(
      detail::check_tensor_form(name, t, layout.out_rank(), layout.out(), is_output));
  if (!is_float(t->dtype))
    return invalid(name, "expected dtype f32, bf16 or f16, got ", name_of(t->dtype));
  return Status::ok();
}

// An LSE on its own: the layout (any strides), fp32.
Status check_lse_form(const char* name, const Tensor* t, const Layout& layout, bool is_output) {
  HFA_RETURN_IF_ERROR(detail::check_tensor_form(name, t, layout.lse_rank(), layout.lse(), is_output,
                                                detail::LastStride::any));
  if (t->dtype != HFA_F32) return invalid(name, "expected dtype f32, got ", name_of(t->dtype));
  return Status::ok();
}

// t on out's device, with the shape `want` (out's own, or its LSE's).
Status check_relation(const char* name, const Tensor& t, const Tensor& out, const Tensor& want,
                      const char* as) {
  HFA_RETURN_IF_ERROR(detail::check_same_device(name, t, out, "out"));
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] != want.shape[d])
      return invalid(name, "expected shape ", detail::tensor_shape_string(want), " ", as, ", got ",
                     detail::tensor_shape_string(t));
  return Status::ok();
}

Status build(std::span<const Tensor* const> outs, std::span<const Tensor* const> lses,
             const Tensor& out, const Tensor* lse, void* stream, MergePartialsProblem* p) {
  const auto n = static_cast<int64_t>(outs.size());
  if (n < 1 || n > detail::kMaxMergePartials)
    return invalid("outs", "expected 1 to ", detail::kMaxMergePartials,
                   " partial outputs (HFA_MAX_MERGE_PARTIALS), got ", n);
  if (static_cast<int64_t>(lses.size()) != n)
    return invalid("lses", "expected ", n, " LSEs (one per partial output), got ", lses.size());
  if (out.rank != kFixedRank && out.rank != kVarlenRank)
    return invalid("out", "expected rank ", kFixedRank, " ", Layout{false}.out(), " or ",
                   kVarlenRank, " ", Layout{true}.out(), ", got ", out.rank);
  const Layout layout{out.rank == kVarlenRank};

  // Each tensor on its own, outputs first.
  HFA_RETURN_IF_ERROR(check_out_form("out", &out, layout, true));
  HFA_RETURN_IF_ERROR(detail::check_device_usable("out", out));
  if (lse != nullptr) HFA_RETURN_IF_ERROR(check_lse_form("lse", lse, layout, true));
  std::vector<std::string> names;
  for (int64_t k = 0; k < n; ++k) {
    names.push_back(detail::cat("outs[", k, "]"));
    HFA_RETURN_IF_ERROR(check_out_form(names.back().c_str(), outs[k], layout, false));
  }
  for (int64_t k = 0; k < n; ++k) {
    names.push_back(detail::cat("lses[", k, "]"));
    HFA_RETURN_IF_ERROR(check_lse_form(names.back().c_str(), lses[k], layout, false));
  }
  const int dims = layout.varlen ? 0 : 1;  // out's dim of the rows
  if (out.shape[dims + 2] > std::numeric_limits<int32_t>::max())
    return invalid("out", "hdim_v ", out.shape[dims + 2], " exceeds int32");

  // How they relate: one device, one shape (an LSE's: out's without hdim_v, heads before rows).
  Tensor lse_shape = out;
  lse_shape.rank = layout.lse_rank();
  lse_shape.shape[dims] = out.shape[dims + 1];
  lse_shape.shape[dims + 1] = out.shape[dims];
  const std::string as_lse =
      detail::cat(layout.lse(), " of out's ", detail::tensor_shape_string(out));
  if (lse != nullptr)
    HFA_RETURN_IF_ERROR(check_relation("lse", *lse, out, lse_shape, as_lse.c_str()));
  for (int64_t k = 0; k < n; ++k) {
    HFA_RETURN_IF_ERROR(check_relation(names[k].c_str(), *outs[k], out, out, "(as out)"));
    HFA_RETURN_IF_ERROR(
        check_relation(names[n + k].c_str(), *lses[k], out, lse_shape, as_lse.c_str()));
  }
  // Which of them may share memory (overlap.hpp): out may be the very view of a partial output
  // and lse of a partial LSE, a ring's running accumulator merged in place; every element is read
  // before it is written, whatever the backend's order.
  detail::CallTensors tensors;
  for (int64_t k = 0; k < 2 * n; ++k)
    tensors.add(names[k].c_str(), k < n ? outs[k] : lses[k - n], false,
                k < n ? kOutGroup : kLseGroup);
  tensors.add("out", &out, true, kOutGroup);
  tensors.add("lse", lse, true, kLseGroup);
  HFA_RETURN_IF_ERROR(detail::check_shared_memory(tensors));

  p->num_partials = static_cast<int32_t>(n);
  for (int64_t k = 0; k < n; ++k)
    p->partials[k] = {static_cast<DType>(outs[k]->dtype), outs[k]->data,
                      layout.out_strides(*outs[k]), static_cast<const float*>(lses[k]->data),
                      layout.lse_strides(*lses[k])};
  p->batch = layout.varlen ? 1 : out.shape[0];
  p->seqlen = out.shape[dims];
  p->heads = out.shape[dims + 1];
  p->hdim = static_cast<int32_t>(out.shape[dims + 2]);
  p->out_dtype = static_cast<DType>(out.dtype);
  p->out = out.data;
  p->out_stride = layout.out_strides(out);
  if (lse != nullptr) {
    p->lse = static_cast<float*>(lse->data);
    p->lse_stride = layout.lse_strides(*lse);
  }
  p->device = out.device == HFA_CUDA ? Device::cuda(out.device_index) : Device::cpu();
  p->stream = stream;
  return Status::ok();
}

}  // namespace

Status merge_partials(std::span<const Tensor* const> outs, std::span<const Tensor* const> lses,
                      const Tensor& out, const Tensor* lse, void* stream) {
  return detail::guarded("merge_partials", [&]() -> Status {
    HFA_RETURN_IF_ERROR(detail::environment().status);  // HFA_CPU_THREADS sizes the CPU's pool
    MergePartialsProblem problem;
    HFA_RETURN_IF_ERROR(build(outs, lses, out, lse, stream, &problem));
    if (problem.rows() == 0) return Status::ok();  // no row: nothing to write
    return detail::dispatch_merge_partials(problem);
  });
}

}  // namespace hfa
