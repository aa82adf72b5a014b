// The descales of FP8 inputs (hfa_options.q_descale, k_descale, v_descale and the block
// options): checked against the problem the other arguments describe, then handed to the
// backends as ScaleViews (common/problem.hpp). See hfa.h for the forms a descale takes.
#include <string>

#include "api/validate.hpp"
#include "common/errors.hpp"
#include "common/head_dims.hpp"

namespace hfa::detail {
namespace {

// One descale argument, with what its shape is checked against.
struct Descale {
  const char* name;
  const Tensor* tensor;  // null: not given
  const char* block_name;
  int32_t block_rows;
  const char* seqlen_name;
  int64_t seqlen;     // the longest sequence's rows (max_seqlen_* for varlen)
  bool of_queries;    // q's may have heads_q or heads_kv heads; k's and v's have heads_kv

  bool per_block() const { return tensor != nullptr && tensor->rank == 3; }
};

int64_t blocks_needed(const Descale& d) { return (d.seqlen + d.block_rows - 1) / d.block_rows; }

// The shapes a descale of its rank may have, for messages: "(2, 4) (batch, heads_q) or ...".
std::string accepted_shapes(const Descale& d, const ForwardProblem& p) {
  const bool per_block = d.per_block();
  auto shape = [&](int64_t heads, const char* heads_name) {
    const std::string blocks = per_block ? cat(">= ", blocks_needed(d), ", ") : "";
    return cat("(", p.batch, ", ", blocks, heads, ") (batch, ", per_block ? "num_blocks, " : "",
               heads_name, ")");
  };
  std::string shapes = shape(p.heads_kv, "heads_kv");
  if (d.of_queries && p.heads_q != p.heads_kv)
    shapes = shape(p.heads_q, "heads_q") + " or " + shapes;
  return shapes;
}

Status check_shape(const Descale& d, const ForwardProblem& p) {
  const Tensor& t = *d.tensor;
  if (t.rank == 1) {
    if (t.shape[0] == 1) return Status::ok();
    return invalid(d.name, "expected shape (1) (one scale for the tensor), got ",
                   tensor_shape_string(t));
  }
  if (d.per_block() && d.block_rows <= 0)
    return invalid(d.block_name, "must be > 0 with a rank-3 (per-block) ", d.name, ", got ",
                   d.block_rows);
  const int64_t heads = t.shape[t.rank - 1];
  const bool fits = t.shape[0] == p.batch &&
                    (heads == p.heads_kv || (d.of_queries && heads == p.heads_q)) &&
                    (!d.per_block() || t.shape[1] >= blocks_needed(d));
  if (fits) return Status::ok();
  std::string why;
  if (d.per_block())
    why = cat("; num_blocks >= ceil(", d.seqlen_name, " ", d.seqlen, " / ", d.block_name, " ",
              d.block_rows, ")");
  return invalid(d.name, "expected shape ", accepted_shapes(d, p), ", got ",
                 tensor_shape_string(t), why);
}

Status check_descale(const Descale& d, const ForwardProblem& p, const Tensor& q) {
  if (p.dtype != DType::e4m3)
    return invalid(d.name, "is given, but the inputs are ", dtype_name(p.dtype),
                   " (descales are for e4m3 inputs)");
  const Tensor* t = d.tensor;
  if (t->rank < 1 || t->rank > 3)
    return invalid(d.name, "expected rank 1 (one scale), 2 (batch, heads) or 3 (batch, ",
                   "num_blocks, heads), got ", t->rank);
  HFA_RETURN_IF_ERROR(check_tensor_form(d.name, t, t->rank, "", false, LastStride::any));
  if (t->dtype != HFA_F32)
    return invalid(d.name, "expected dtype f32, got ", dtype_name(static_cast<DType>(t->dtype)));
  HFA_RETURN_IF_ERROR(check_same_device(d.name, *t, q));
  return check_shape(d, p);
}

// A block option > 0 is the rows per block of some rank-3 descale, and on a GPU a block of
// keys is a whole number of the FP8 kernels' key tiles (one scale per tile).
Status check_block_options(const Descale& q, const Descale& k, const Descale& v,
                           const ForwardProblem& p) {
  if (q.block_rows > 0 && !q.per_block())
    return invalid(q.block_name, "is ", q.block_rows, ", but q_descale is not rank 3 (batch, ",
                   "num_blocks, heads): per-block scales need one");
  if (k.block_rows > 0 && !k.per_block() && !v.per_block())
    return invalid(k.block_name, "is ", k.block_rows, ", but neither k_descale nor v_descale ",
                   "is rank 3 (batch, num_blocks, heads_kv): per-block scales need one");
  if (k.block_rows > 0 && p.device.kind == DeviceKind::cuda && k.block_rows % kFp8KeyBlock != 0)
    return not_supported(k.block_name, ": ", k.block_rows, " is not a multiple of ",
                         kFp8KeyBlock, ", as a GPU needs (one scale per tile of ", kFp8KeyBlock,
                         " keys)");
  return Status::ok();
}

// A checked descale as the backends read it: strides in elements, none for a per-tensor scale.
ScaleView scale_view(const Descale& d, int32_t head_divisor) {
  ScaleView view;
  if (d.tensor == nullptr) return view;
  const Tensor& t = *d.tensor;
  view.data = static_cast<const float*>(t.data);
  view.head_divisor = head_divisor;
  if (t.rank == 1) return view;
  view.batch_stride = t.stride[0];
  view.head_stride = t.stride[t.rank - 1];
  if (d.per_block()) {
    view.block_stride = t.stride[1];
    view.block_rows = d.block_rows;
  }
  return view;
}

}  // namespace

Status attach_descales(const Options& options, const Tensor& q, ForwardProblem* p) {
  const bool varlen = p->is_varlen();
  const Descale dq{"q_descale", options.q_descale, "descale_block_q", options.descale_block_q,
                   varlen ? "max_seqlen_q" : "seqlen_q", p->seqlen_q, true};
  const Descale dk{"k_descale", options.k_descale, "descale_block_kv", options.descale_block_kv,
                   varlen ? "max_seqlen_k" : "seqlen_k", p->seqlen_k, false};
  const Descale dv{"v_descale", options.v_descale, dk.block_name, dk.block_rows, dk.seqlen_name,
                   dk.seqlen, false};
  for (const Descale* d : {&dq, &dk, &dv})
    if (d->tensor != nullptr) HFA_RETURN_IF_ERROR(check_descale(*d, *p, q));
  HFA_RETURN_IF_ERROR(check_block_options(dq, dk, dv, *p));

  // A q scale per kv-head (or per tensor) serves the whole GQA group of query heads.
  const int32_t group = p->heads_q / p->heads_kv;
  const bool per_query_head = dq.tensor && dq.tensor->rank > 1 &&
                              dq.tensor->shape[dq.tensor->rank - 1] == p->heads_q;
  p->q_descale = scale_view(dq, per_query_head ? 1 : group);
  p->k_descale = scale_view(dk, 1);
  p->v_descale = scale_view(dv, 1);
  return Status::ok();
}

}  // namespace hfa::detail
