// Every check a call goes through before a backend sees it. The order is: each tensor on its
// own (present, rank, dtype, strides, data), then how the tensors relate (device, shapes),
// then varlen offsets, then the scalar options. The first failure is returned.
#include "api/validate.hpp"

#include <cmath>
#include <cstdint>
#include <limits>

#include "api/devices.hpp"
#include "api/options.hpp"
#include "api/overlap.hpp"
#include "api/validate_block_sparse.hpp"
#include "api/validate_options.hpp"
#include "common/dtype_bytes.hpp"
#include "common/head_dims.hpp"
#include "common/errors.hpp"

namespace hfa::detail {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

bool is_known_dtype(hfa_dtype d) { return d >= HFA_F32 && d <= HFA_FP8_MLA; }
const char* name_of(hfa_dtype d) { return dtype_name(static_cast<DType>(d)); }

// The logical axes of an attention operand. Fixed length: (batch, seqlen, heads, headdim);
// varlen: (total_tokens, heads, headdim), where batch comes from cu_seqlens instead.
enum Axis { kBatch = 0, kRows = 1, kHeads = 2, kDim = 3 };

// One q/k/v/out-like tensor after its own checks, with its axes in a fixed order.
struct Operand {
  const char* name = "";
  const Tensor* tensor = nullptr;
  bool varlen = false;
  int64_t extent[4] = {0, 0, 0, 0};  // indexed by Axis; extent[kBatch] = 0 when varlen
  Strides strides;

  const char* axis_name(Axis axis) const {
    switch (axis) {
      case kBatch: return "batch";
      case kRows: return varlen ? "total_tokens" : "seqlen";
      case kHeads: return "heads";
      case kDim: return "headdim";
    }
    return "?";
  }
};

// Whether some extent is 0 (asked before the shapes are known not to overflow a product).
bool has_no_elements(const Tensor& t) {
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] == 0) return true;
  return false;
}

std::string shape_string(const Tensor& t) {
  std::string s = "(";
  for (int d = 0; d < t.rank; ++d) s += cat(d ? ", " : "", t.shape[d]);
  return s + ")";
}

// Checks a tensor on its own: present, the expected rank, a dtype and device hfa knows,
// non-negative shape; unless it is empty (any strides, null data allowed): non-negative strides,
// unit stride in the last dim (unless `last` says any), addressable extent, and data. Outputs
// also may not have a zero stride over a dim with more than one element (two elements would
// share an address and the result would depend on write order).
Status check_form(const char* name, const Tensor* t, int32_t rank, const char* layout,
                  bool is_output, LastStride last = LastStride::unit) {
  if (t == nullptr) return invalid(name, "is null");
  if (t->rank != rank) return invalid(name, "expected rank ", rank, " ", layout, ", got ", t->rank);
  if (!is_known_dtype(t->dtype)) return invalid(name, "unknown dtype ", static_cast<int>(t->dtype));
  if (t->device != HFA_CPU && t->device != HFA_CUDA)
    return invalid(name, "unknown device kind ", static_cast<int>(t->device));
  for (int d = 0; d < rank; ++d)
    if (t->shape[d] < 0) return invalid(name, "negative extent ", t->shape[d], " in dim ", d);
  // A tensor with no elements has no layout: frameworks give such tensors any strides (numpy
  // and torch disagree), and no backend addresses them.
  if (has_no_elements(*t)) return Status::ok();
  for (int d = 0; d < rank; ++d)
    if (t->stride[d] < 0)
      return invalid(name, "negative stride ", t->stride[d], " in dim ", d, " is not supported");
  if (last == LastStride::unit && t->stride[rank - 1] != 1 && t->shape[rank - 1] > 1)
    return invalid(name, "the last dim must have unit stride, got stride ", t->stride[rank - 1]);

  // Every offset a backend computes must fit in int64, and so must the element count.
  int64_t count = 1;
  int64_t last_offset = 0;
  for (int d = 0; d < rank; ++d) {
    int64_t span = 0;
    if (__builtin_mul_overflow(t->shape[d], count, &count) ||
        __builtin_mul_overflow(t->shape[d] - 1, t->stride[d], &span) ||
        __builtin_add_overflow(last_offset, span, &last_offset))
      return invalid(name, "shape ", shape_string(*t), " with its strides overflows int64");
  }
  // So must they in bytes, as backends step: every stride too, a one-element dim's included,
  // which no offset above multiplies (frameworks give those any value, a huge one as well).
  const auto element = static_cast<int64_t>(element_bytes(t->dtype));
  int64_t bytes = 0;
  if (__builtin_mul_overflow(last_offset, element, &bytes))
    return invalid(name, "shape ", shape_string(*t), " with its strides overflows int64 in bytes");
  for (int d = 0; d < rank; ++d)
    if (__builtin_mul_overflow(t->stride[d], element, &bytes))
      return invalid(name, "stride ", t->stride[d], " in dim ", d, " overflows int64 in bytes");

  if (is_output) {
    for (int d = 0; d < rank; ++d)
      if (t->stride[d] == 0 && t->shape[d] > 1)
        return invalid(name, "zero stride in dim ", d, ": output elements would overlap");
  }

  if (t->data == nullptr) return invalid(name, "data is null (allowed only for a tensor with no elements)");
  // Backends load elements as their type (a misaligned float is undefined behaviour on the CPU
  // and a fault on a GPU); a framework's tensor is always aligned to its dtype.
  if (reinterpret_cast<uintptr_t>(t->data) % element != 0)
    return invalid(name, "data ", t->data, " is not aligned to its dtype's size (", element,
                   " bytes)");
  return Status::ok();
}


Status check_operand(const char* name, const Tensor* t, bool varlen, bool is_output,
                     Operand* op) {
  const char* layout = varlen ? "(total_tokens, heads, headdim) with cu_seqlens"
                              : "(batch, seqlen, heads, headdim)";
  HFA_RETURN_IF_ERROR(check_form(name, t, varlen ? 3 : 4, layout, is_output));
  op->name = name;
  op->tensor = t;
  op->varlen = varlen;
  const int first = varlen ? 1 : 0;  // where the tensor's dims start among the logical axes
  for (int axis = first; axis < 4; ++axis) op->extent[axis] = t->shape[axis - first];
  op->strides.batch = varlen ? 0 : t->stride[0];
  op->strides.row = t->stride[1 - first];
  op->strides.head = t->stride[2 - first];
  // Every stride of an empty tensor is anything (check_form): the problem carries 0 there, so
  // that a backend computing the address of a row it never reads multiplies no such value.
  if (has_no_elements(*t)) op->strides = {};
  // Backends index rows, heads and dims with int32; totals of varlen rows are int32 offsets.
  for (int axis = first; axis < 4; ++axis) {
    if (op->extent[axis] > kInt32Max)
      return invalid(name, op->axis_name(Axis(axis)), " ", op->extent[axis], " exceeds int32");
  }
  if (op->extent[kHeads] == 0) return invalid(name, "heads must be at least 1, got 0");
  return Status::ok();
}

[[gnu::cold, gnu::noinline]] Status axis_mismatch(const Operand& op, Axis axis, const Operand& ref,
                                                 Axis ref_axis) {
  return invalid(op.name, "expected ", op.axis_name(axis), " ", ref.extent[ref_axis], " (as ",
                 ref.name, "), got ", op.extent[axis]);
}

// `op`'s axis must equal `ref`'s: "k: expected headdim 128 (as q), got 64". Inline, the message
// apart: a passing check then costs a compare, not a Status made and destroyed (ten a call).
inline Status expect_axis(const Operand& op, Axis axis, const Operand& ref, Axis ref_axis) {
  if (op.extent[axis] == ref.extent[ref_axis]) [[likely]] return Status::ok();
  return axis_mismatch(op, axis, ref, ref_axis);
}

// Same extent on every axis (dq as q, dk as k, ...).
Status expect_same_shape(const Operand& op, const Operand& ref) {
  for (Axis axis : {kBatch, kRows, kHeads, kDim}) {
    if (op.varlen && axis == kBatch) continue;
    HFA_RETURN_IF_ERROR(expect_axis(op, axis, ref, axis));
  }
  return Status::ok();
}

Status expect_dtype(const char* name, const Tensor& t, hfa_dtype want, const char* ref) {
  if (t.dtype == want) return Status::ok();
  return invalid(name, "expected dtype ", name_of(want), " (as ", ref, "), got ", name_of(t.dtype));
}

Status expect_same_device(const char* name, const Tensor& t, const Tensor& ref,
                          const char* ref_name = "q") {
  if (same_device(t, ref)) return Status::ok();
  return invalid(name, "on ", device_name(t), ", expected ", device_name(ref), " (as ", ref_name,
                 ")");
}

// The checked q, k, v (and out when given).
struct Core {
  Operand q, k, v, out;
  bool has_out = false;
};

// FP8 attention takes q, k and v all in e4m3: a mix names the one that differs from the other
// two ("v: expected dtype e4m3 (as q and k), got bf16").
Status check_e4m3_together(const Core& core) {
  const Operand* inputs[] = {&core.q, &core.k, &core.v};
  int e4m3 = 0;
  for (const Operand* op : inputs) e4m3 += op->tensor->dtype == HFA_E4M3;
  if (e4m3 == 0 || e4m3 == 3) return Status::ok();
  const bool odd_is_e4m3 = e4m3 == 1;
  for (int i = 0; i < 3; ++i) {
    const Operand& odd = *inputs[i];
    if ((odd.tensor->dtype == HFA_E4M3) != odd_is_e4m3) continue;
    const char* other_a = inputs[(i + 1) % 3]->name;
    const char* other_b = inputs[(i + 2) % 3]->name;
    if (i == 1) std::swap(other_a, other_b);  // "q and v", in argument order
    if (odd_is_e4m3)
      return invalid(odd.name, "dtype e4m3, but ", other_a, " and ", other_b,
                     " are not (FP8 attention takes q, k and v all in e4m3)");
    return invalid(odd.name, "expected dtype e4m3 (as ", other_a, " and ", other_b, "), got ",
                   name_of(odd.tensor->dtype));
  }
  return Status::ok();
}

// The inputs' dtype: f32, f16 or bf16 (q, k and v alike), or e4m3 for all three (FP8).
Status check_input_dtypes(const Core& core) {
  for (const Operand* op : {&core.q, &core.k, &core.v})
    if (op->tensor->dtype == HFA_E5M2)
      return not_supported(op->name, ": e5m2 inputs are not supported (FP8 attention takes e4m3)");
  HFA_RETURN_IF_ERROR(check_e4m3_together(core));
  const Tensor& q = *core.q.tensor;
  if (q.dtype != HFA_F32 && q.dtype != HFA_F16 && q.dtype != HFA_BF16 && q.dtype != HFA_E4M3)
    return invalid("q", "dtype ", name_of(q.dtype),
                   " is not supported (expected f32, f16, bf16 or e4m3)");
  HFA_RETURN_IF_ERROR(expect_dtype("k", *core.k.tensor, q.dtype, "q"));
  return expect_dtype("v", *core.v.tensor, q.dtype, "q");
}

// out has the inputs' dtype, but for e4m3 inputs: bf16 or f16 (the GPU's FP8 kernels write
// those), or f32 on the CPU, whose kernels store any float type. A forward's out may be f32
// after 16-bit inputs too (a partial result, hfa_options.accumulate); the backward's out, an
// input, is what the forward gave in q's dtype.
Status check_out_dtype(const Tensor& out, const Tensor& q, bool out_is_output) {
  if (q.dtype != HFA_E4M3) {
    if (out_is_output && out.dtype == HFA_F32) return Status::ok();
    const char* hint = out_is_output && q.dtype != HFA_F32 ? " or f32" : "";
    if (out.dtype != q.dtype)
      return invalid("out", "expected dtype ", name_of(q.dtype), " (as q)", hint, ", got ",
                     name_of(out.dtype));
    return Status::ok();
  }
  if (out.dtype != HFA_BF16 && out.dtype != HFA_F16 && out.dtype != HFA_F32)
    return invalid("out", "expected dtype bf16 or f16 (or f32 on the CPU) for e4m3 inputs, got ",
                   name_of(out.dtype));
  if (q.device == HFA_CUDA && !is_compiled_fp8_out(static_cast<DType>(out.dtype)))
    return not_supported("out: dtype ", name_of(out.dtype),
                         " with e4m3 inputs runs on the CPU only (a GPU writes bf16 or f16)");
  return Status::ok();
}

// q, k, v (and out when given) agree: batch, lengths, heads, head dims. Checks dtype and
// device agreement too, and that the device can be used at all.
Status check_core(const Tensor* q, const Tensor* k, const Tensor* v, const Tensor* out,
                  bool out_is_output, bool varlen, Core* core) {
  HFA_RETURN_IF_ERROR(check_operand("q", q, varlen, false, &core->q));
  HFA_RETURN_IF_ERROR(check_operand("k", k, varlen, false, &core->k));
  HFA_RETURN_IF_ERROR(check_operand("v", v, varlen, false, &core->v));
  core->has_out = out != nullptr;
  if (core->has_out) HFA_RETURN_IF_ERROR(check_operand("out", out, varlen, out_is_output, &core->out));

  HFA_RETURN_IF_ERROR(check_input_dtypes(*core));
  if (core->has_out) HFA_RETURN_IF_ERROR(check_out_dtype(*out, *q, out_is_output));

  HFA_RETURN_IF_ERROR(expect_same_device("k", *k, *q));
  HFA_RETURN_IF_ERROR(expect_same_device("v", *v, *q));
  if (core->has_out) HFA_RETURN_IF_ERROR(expect_same_device("out", *out, *q));
  HFA_RETURN_IF_ERROR(check_device_usable("q", *q));

  const Operand& Q = core->q;
  const Operand& K = core->k;
  const Operand& V = core->v;
  HFA_RETURN_IF_ERROR(check_supported_head_dim(Q.name, Q.extent[kDim]));
  if (!varlen) HFA_RETURN_IF_ERROR(expect_axis(K, kBatch, Q, kBatch));
  HFA_RETURN_IF_ERROR(expect_axis(K, kDim, Q, kDim));
  if (Q.extent[kHeads] % K.extent[kHeads] != 0)
    return invalid("k", "heads ", K.extent[kHeads], " must divide q's heads ", Q.extent[kHeads],
                   " (GQA/MQA need heads_q % heads_kv == 0)");
  if (!varlen) HFA_RETURN_IF_ERROR(expect_axis(V, kBatch, K, kBatch));
  HFA_RETURN_IF_ERROR(expect_axis(V, kRows, K, kRows));
  HFA_RETURN_IF_ERROR(expect_axis(V, kHeads, K, kHeads));
  HFA_RETURN_IF_ERROR(check_supported_head_dim(V.name, V.extent[kDim]));
  if (core->has_out) {
    const Operand& O = core->out;
    if (!varlen) HFA_RETURN_IF_ERROR(expect_axis(O, kBatch, Q, kBatch));
    HFA_RETURN_IF_ERROR(expect_axis(O, kRows, Q, kRows));
    HFA_RETURN_IF_ERROR(expect_axis(O, kHeads, Q, kHeads));
    HFA_RETURN_IF_ERROR(expect_axis(O, kDim, V, kDim));
  }
  return Status::ok();
}

struct Varlen {
  const Tensor* cu_q = nullptr;
  const Tensor* cu_k = nullptr;
  int32_t batch = 0;
};

Status check_varlen(const Options& options, const Core& core, Varlen* varlen) {
  const Tensor& q = *core.q.tensor;
  HFA_RETURN_IF_ERROR(check_cu_seqlens_form("cu_seqlens_q", options.cu_seqlens_q, q));
  HFA_RETURN_IF_ERROR(check_cu_seqlens_form("cu_seqlens_k", options.cu_seqlens_k, q));
  const Tensor& cu_q = *options.cu_seqlens_q;
  const Tensor& cu_k = *options.cu_seqlens_k;
  if (cu_k.shape[0] != cu_q.shape[0])
    return invalid("cu_seqlens_k", "expected ", cu_q.shape[0],
                   " elements (batch + 1, as cu_seqlens_q), got ", cu_k.shape[0]);
  if (options.max_seqlen_q <= 0)
    return invalid("max_seqlen_q", "must be positive with cu_seqlens, got ", options.max_seqlen_q);
  if (options.max_seqlen_k <= 0)
    return invalid("max_seqlen_k", "must be positive with cu_seqlens, got ", options.max_seqlen_k);
  if (q.device == HFA_CPU) {
    HFA_RETURN_IF_ERROR(check_cu_seqlens_values("cu_seqlens_q", static_cast<const int32_t*>(cu_q.data),
                                                cu_q.shape[0] - 1, core.q.extent[kRows], "q",
                                                "max_seqlen_q", options.max_seqlen_q));
    HFA_RETURN_IF_ERROR(check_cu_seqlens_values("cu_seqlens_k", static_cast<const int32_t*>(cu_k.data),
                                                cu_k.shape[0] - 1, core.k.extent[kRows], "k",
                                                "max_seqlen_k", options.max_seqlen_k));
  }
  varlen->cu_q = &cu_q;
  varlen->cu_k = &cu_k;
  varlen->batch = static_cast<int32_t>(cu_q.shape[0] - 1);
  return Status::ok();
}

// lse (or a tensor laid out like it, `name`): fp32, (batch, heads_q, seqlen_q), or
// (heads_q, total_q) for varlen, with a unit last stride (check_form's) and any others: a
// slice of a longer LSE, as a ring's half-steps take.
Status check_lse(const char* name, const Tensor* lse, const Core& core, int64_t batch,
                 bool varlen, bool is_output) {
  const char* layout = varlen ? "(heads, total_tokens)" : "(batch, heads, seqlen_q)";
  HFA_RETURN_IF_ERROR(check_form(name, lse, varlen ? 2 : 3, layout, is_output));
  if (lse->dtype != HFA_F32) return invalid(name, "expected dtype f32, got ", name_of(lse->dtype));
  HFA_RETURN_IF_ERROR(expect_same_device(name, *lse, *core.q.tensor));

  const int64_t heads = core.q.extent[kHeads];
  const int64_t rows = core.q.extent[kRows];
  const int64_t want[3] = {batch, heads, rows};
  const int64_t* expected = varlen ? want + 1 : want;
  for (int d = 0; d < lse->rank; ++d) {
    if (lse->shape[d] != expected[d]) {
      std::string shape = "(";
      for (int e = 0; e < lse->rank; ++e) shape += cat(e ? ", " : "", expected[e]);
      return invalid(name, "expected shape ", shape, ") ", layout, ", got ", shape_string(*lse));
    }
  }
  return Status::ok();
}

// lse's strides in the problem's terms: varlen LSE is (heads, total_q), batch stride 0.
void lse_strides(const Tensor& lse, bool varlen, int64_t* batch_stride, int64_t* head_stride) {
  const bool empty = has_no_elements(lse);  // any strides, as for an operand (check_operand)
  *batch_stride = varlen || empty ? 0 : lse.stride[0];
  *head_stride = empty ? 0 : varlen ? lse.stride[0] : lse.stride[1];
}

// A small per-head or per-sequence vector (sinks, dsinks, seqused_*): rank 1 with `length`
// elements of `dtype`, on q's device; contiguous, as check_form wants unit stride in the last
// (here the only) dim.
Status check_vector(const char* name, const Tensor* t, const char* layout, int64_t length,
                    hfa_dtype dtype, const Tensor& q, bool is_output) {
  HFA_RETURN_IF_ERROR(check_form(name, t, 1, layout, is_output));
  if (t->dtype != dtype)
    return invalid(name, "expected dtype ", name_of(dtype), ", got ", name_of(t->dtype));
  if (t->shape[0] != length)
    return invalid(name, "expected shape (", length, ") ", layout, ", got ", shape_string(*t));
  return expect_same_device(name, *t, q);
}

// seqused_*: each used length in [0, the allocated length of its sequence]. Only on the CPU,
// where the values (and cu_seqlens') can be read without a copy.
Status check_seqused_values(const char* name, const Tensor& used, const Tensor* cu,
                            int64_t fixed_length) {
  const auto* lengths = static_cast<const int32_t*>(used.data);
  const auto* offsets = cu ? static_cast<const int32_t*>(cu->data) : nullptr;
  for (int64_t b = 0; b < used.shape[0]; ++b) {
    const int64_t allocated = offsets ? int64_t{offsets[b + 1]} - offsets[b] : fixed_length;
    if (lengths[b] < 0) return invalid(name, "element ", b, " is negative (", lengths[b], ")");
    if (lengths[b] > allocated)
      return invalid(name, "element ", b, " (", lengths[b], ") exceeds sequence ", b,
                     "'s allocated length ", allocated);
  }
  return Status::ok();
}

// sinks (heads_q) and seqused_q/k (batch), when given.
Status check_sinks_and_seqused(const Options& options, const Core& core, const Varlen& varlen) {
  const Tensor& q = *core.q.tensor;
  if (options.sinks != nullptr)
    HFA_RETURN_IF_ERROR(check_vector("sinks", options.sinks, "(heads_q)", core.q.extent[kHeads],
                                     HFA_F32, q, false));
  const int64_t batch = varlen.cu_q ? varlen.batch : core.q.extent[kBatch];
  const struct {
    const char* name;
    const Tensor* used;
    const Tensor* cu;
    int64_t fixed_length;
  } seqused[] = {{"seqused_q", options.seqused_q, varlen.cu_q, core.q.extent[kRows]},
                 {"seqused_k", options.seqused_k, varlen.cu_k, core.k.extent[kRows]}};
  for (const auto& s : seqused) {
    if (s.used == nullptr) continue;
    HFA_RETURN_IF_ERROR(check_vector(s.name, s.used, "(batch)", batch, HFA_I32, q, false));
    if (q.device == HFA_CPU)
      HFA_RETURN_IF_ERROR(check_seqused_values(s.name, *s.used, s.cu, s.fixed_length));
  }
  return Status::ok();
}

// Every ForwardProblem field from checked arguments, set in *p, a default-constructed problem
// (written where it lies: a problem is some 700 bytes, which a returned copy would move again).
void fill_forward_problem(const Core& core, const Varlen& varlen, const Tensor* lse,
                          const Options& options, ForwardProblem* p) {
  const Operand& Q = core.q;
  const Operand& K = core.k;
  const Operand& V = core.v;
  const bool is_varlen = varlen.cu_q != nullptr;
  p->dtype = static_cast<DType>(Q.tensor->dtype);
  // A size query has no out: FP8 inputs default to bf16 out, as the Python front ends do.
  p->out_dtype = core.has_out ? static_cast<DType>(core.out.tensor->dtype)
                 : p->dtype == DType::e4m3 ? DType::bf16
                                           : p->dtype;
  p->batch = is_varlen ? varlen.batch : static_cast<int32_t>(Q.extent[kBatch]);
  p->seqlen_q = is_varlen ? options.max_seqlen_q : static_cast<int32_t>(Q.extent[kRows]);
  p->seqlen_k = is_varlen ? options.max_seqlen_k : static_cast<int32_t>(K.extent[kRows]);
  p->heads_q = static_cast<int32_t>(Q.extent[kHeads]);
  p->heads_kv = static_cast<int32_t>(K.extent[kHeads]);
  p->hdim_qk = static_cast<int32_t>(Q.extent[kDim]);
  p->hdim_v = static_cast<int32_t>(V.extent[kDim]);
  if (is_varlen) {
    p->cu_seqlens_q = static_cast<const int32_t*>(varlen.cu_q->data);
    p->cu_seqlens_k = static_cast<const int32_t*>(varlen.cu_k->data);
    p->total_q = Q.extent[kRows];
    p->total_k = K.extent[kRows];
  }
  p->q = Q.tensor->data;
  p->k = K.tensor->data;
  p->v = V.tensor->data;
  p->q_stride = Q.strides;
  p->k_stride = K.strides;
  p->v_stride = V.strides;
  if (core.has_out) {
    p->out = core.out.tensor->data;
    p->out_stride = core.out.strides;
  }
  if (lse != nullptr) {
    p->lse = static_cast<float*>(lse->data);
    lse_strides(*lse, is_varlen, &p->lse_batch_stride, &p->lse_head_stride);
  }

  if (options.sinks != nullptr) p->sinks = static_cast<const float*>(options.sinks->data);
  if (options.seqused_q != nullptr)
    p->seqused_q = static_cast<const int32_t*>(options.seqused_q->data);
  if (options.seqused_k != nullptr)
    p->seqused_k = static_cast<const int32_t*>(options.seqused_k->data);

  copy_values(options, p);
  p->softmax_scale = options.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(p->hdim_qk)));
  // Causal is the window (left, 0); like FlashAttention, the flag wins over window_right.
  if (options.causal) p->window_right = 0;
  // A left window reaching past the first key of every row is no window: row i's bound
  // i + seqlen_k - seqlen_q - left is <= 0 for all rows when left >= seqlen_k - 1 (seqlen_k is
  // the max length with varlen, so this holds per sequence too). Dropping it lets backends
  // skip mask work; the result is identical.
  if (p->window_left >= 0 && int64_t{p->window_left} >= int64_t{p->seqlen_k} - 1) p->window_left = -1;
  // (-1, 0) is causal whichever way the caller spelled it; backends dispatch on the flag.
  p->causal = p->window_left < 0 && p->window_right == 0;

  p->device = Device{static_cast<DeviceKind>(Q.tensor->device),
                     Q.tensor->device == HFA_CPU ? 0 : Q.tensor->device_index};
}

// The dims a VECTOR option's shapes are written in.
VectorDims vector_dims(const Core& core, const Varlen& varlen) {
  return {varlen.cu_q ? varlen.batch : core.q.extent[kBatch], core.q.extent[kHeads]};
}

bool wants_varlen(const Options& options) {
  return options.cu_seqlens_q != nullptr || options.cu_seqlens_k != nullptr;
}

Status check_varlen_pairing(const Options& options) {
  if (options.cu_seqlens_q != nullptr && options.cu_seqlens_k == nullptr)
    return invalid("cu_seqlens_k", "is null but cu_seqlens_q is given (varlen needs both)");
  if (options.cu_seqlens_k != nullptr && options.cu_seqlens_q == nullptr)
    return invalid("cu_seqlens_q", "is null but cu_seqlens_k is given (varlen needs both)");
  return Status::ok();
}

// The checks forward and backward share: q/k/v(/out), varlen, the options' values. On success
// `problem` describes the forward; lse is attached by the caller's own check.
Status check_forward_part(const Tensor* q, const Tensor* k, const Tensor* v, const Tensor* out,
                          bool out_is_output, const Options& options, Core* core,
                          Varlen* varlen) {
  HFA_RETURN_IF_ERROR(check_varlen_pairing(options));
  const bool is_varlen = wants_varlen(options);
  HFA_RETURN_IF_ERROR(check_core(q, k, v, out, out_is_output, is_varlen, core));
  if (is_varlen) HFA_RETURN_IF_ERROR(check_varlen(options, *core, varlen));
  HFA_RETURN_IF_ERROR(check_sinks_and_seqused(options, *core, *varlen));
  return check_option_values(options);
}

// The options' tensors both calls read, in their argument order: the sequence bounds and sinks
// after the call's own tensors, then (after what only one call takes) the vectors and the
// block-sparse lists.
void add_sequence_tensors(const Options& o, CallTensors* tensors) {
  tensors->add("cu_seqlens_q", o.cu_seqlens_q);
  tensors->add("cu_seqlens_k", o.cu_seqlens_k);
  tensors->add("sinks", o.sinks);
  tensors->add("seqused_q", o.seqused_q);
  tensors->add("seqused_k", o.seqused_k);
}

void add_listed_tensors(const Options& o, CallTensors* tensors) {
#define HFA_ATTENTION_OPTION(kind, name, ...) HFA_IF_VECTOR_##kind(tensors->add(#name, o.name);)
#include "hfa/options.def"
  tensors->add("kv_num_blocks", o.kv_num_blocks);
  tensors->add("kv_indices", o.kv_indices);
  tensors->add("full_kv_num_blocks", o.full_kv_num_blocks);
  tensors->add("full_kv_indices", o.full_kv_indices);
  tensors->add("kv_mask_bits", o.kv_mask_bits);
}

// The memory rule (overlap.hpp) over every tensor a forward reads or writes, in argument order.
Status check_forward_memory(const ForwardArgs& args) {
  const Options& o = *args.options;
  CallTensors tensors;
  tensors.add("q", args.q);
  tensors.add("k", args.k);
  tensors.add("v", args.v);
  tensors.add("out", args.out, true);
  tensors.add("lse", args.lse, true);
  add_sequence_tensors(o, &tensors);
  tensors.add("q_descale", o.q_descale);
  tensors.add("k_descale", o.k_descale);
  tensors.add("v_descale", o.v_descale);
  add_listed_tensors(o, &tensors);
  return check_shared_memory(tensors);
}

// The same for a backward (which takes no descales).
Status check_backward_memory(const BackwardArgs& args) {
  const Options& o = *args.options;
  CallTensors tensors;
  tensors.add("dout", args.dout);
  tensors.add("q", args.q);
  tensors.add("k", args.k);
  tensors.add("v", args.v);
  tensors.add("out", args.out);
  tensors.add("lse", args.lse);
  tensors.add("dq", args.dq, true);
  tensors.add("dk", args.dk, true);
  tensors.add("dv", args.dv, true);
  add_sequence_tensors(o, &tensors);
  tensors.add("dsinks", o.dsinks, true);
  tensors.add("softmax_d", o.softmax_d);
  add_listed_tensors(o, &tensors);
  return check_shared_memory(tensors);
}

// accumulate merges into out and lse: both must be there, out in fp32 (the running result
// keeps no rounding between calls). A size query has neither and needs nothing more.
Status check_accumulate(const ForwardArgs& args, const Core& core, Purpose purpose) {
  if (purpose != Purpose::run) return Status::ok();
  if (core.out.tensor->dtype != HFA_F32)
    return invalid("out", "accumulate needs an f32 out (the running result), got ",
                   name_of(core.out.tensor->dtype));
  if (args.lse == nullptr)
    return invalid("lse", "is null, but accumulate merges into it (the running LSE)");
  return Status::ok();
}

}  // namespace

Status check_tensor_form(const char* name, const Tensor* t, int32_t rank, const char* layout,
                         bool is_output, LastStride last) {
  return check_form(name, t, rank, layout, is_output, last);
}

Status check_same_device(const char* name, const Tensor& t, const Tensor& ref,
                         const char* ref_name) {
  return expect_same_device(name, t, ref, ref_name);
}

Status check_supported_head_dim(const char* name, int64_t headdim) {
  if (is_supported_head_dim(headdim)) return Status::ok();
  return invalid(name, "headdim ", headdim, " is not supported (supported: ", supported_head_dim_list(), ")");
}

std::string tensor_shape_string(const Tensor& t) { return shape_string(t); }

Status check_contiguous(const char* name, const Tensor& t, const char* layout) {
  if (has_no_elements(t)) return Status::ok();  // no layout to check, as in check_form
  int64_t running = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    if (t.shape[d] > 1 && t.stride[d] != running)
      return invalid(name, "must be contiguous ", layout, ", got stride ", t.stride[d], " in dim ",
                     d, " (expected ", running, ")");
    running *= t.shape[d];
  }
  return Status::ok();
}

// Varlen offsets: int32, (batch + 1), contiguous, on q's device. On the CPU the values are
// read and checked too; on a GPU they would need a copy and a sync, so CUDA callers are
// trusted with the values (the shape, dtype and device are still checked).
Status check_cu_seqlens_form(const char* name, const Tensor* cu, const Tensor& ref,
                             const char* ref_name) {
  if (cu == nullptr) return invalid(name, "is null");
  HFA_RETURN_IF_ERROR(check_form(name, cu, 1, "(batch + 1)", false));
  if (cu->dtype != HFA_I32) return invalid(name, "expected dtype i32, got ", name_of(cu->dtype));
  if (cu->shape[0] < 1) return invalid(name, "expected batch + 1 >= 1 elements, got 0");
  if (cu->shape[0] - 1 > kInt32Max) return invalid(name, "batch ", cu->shape[0] - 1, " exceeds int32");
  return check_same_device(name, *cu, ref, ref_name);
}

Status check_cu_seqlens_values(const char* name, const int32_t* offsets, int64_t batch,
                               int64_t total, const char* total_owner, const char* max_name,
                               int32_t max_len) {
  // The offsets' own structure first: a bad offset also makes a bad length, and the fault is
  // the offset's, not the bound's.
  if (offsets[0] != 0) return invalid(name, "must start at 0, got ", offsets[0]);
  for (int64_t b = 0; b < batch; ++b)
    if (offsets[b + 1] < offsets[b])
      return invalid(name, "must not decrease, but element ", b + 1, " (", offsets[b + 1],
                     ") < element ", b, " (", offsets[b], ")");
  if (offsets[batch] != total)
    return invalid(name, "last element ", offsets[batch], " must equal ", total_owner,
                   "'s total_tokens ", total);
  for (int64_t b = 0; max_name != nullptr && b < batch; ++b) {
    const int64_t length = int64_t{offsets[b + 1]} - offsets[b];
    if (length > max_len)
      return invalid(max_name, max_len, " is smaller than sequence ", b, " (length ", length, ")");
  }
  return Status::ok();
}

namespace {
thread_local uint64_t validations = 0;
}  // namespace

void count_validation() { ++validations; }
uint64_t validations_on_this_thread() { return validations; }

Status build_forward_problem(const ForwardArgs& args, Purpose purpose, ForwardProblem* problem) {
  count_validation();
  if (args.options == nullptr) return invalid("options", "is null");
  HFA_RETURN_IF_ERROR(check_struct_size(args.options->struct_size, sizeof(Options)));
  const Options& options = *args.options;
  if (purpose == Purpose::run && args.out == nullptr) return invalid("out", "is null");
  Core core;
  Varlen varlen;
  HFA_RETURN_IF_ERROR(
      check_forward_part(args.q, args.k, args.v, args.out, true, options, &core, &varlen));
  const int64_t batch = varlen.cu_q ? varlen.batch : core.q.extent[kBatch];
  if (args.lse != nullptr)
    HFA_RETURN_IF_ERROR(check_lse("lse", args.lse, core, batch, varlen.cu_q != nullptr, true));
  if (options.accumulate) HFA_RETURN_IF_ERROR(check_accumulate(args, core, purpose));
  fill_forward_problem(core, varlen, args.lse, options, problem);
  HFA_RETURN_IF_ERROR(attach_vectors(options, HFA_CALL_FORWARD, vector_dims(core, varlen),
                                     *args.q, &problem->vectors));
  HFA_RETURN_IF_ERROR(attach_block_sparse(options, *args.q, problem));
  HFA_RETURN_IF_ERROR(attach_descales(options, *args.q, problem));
  // A call with no query rows writes no byte (out and lse have none), so no memory of its can
  // overlap: the rule holds without its pairs (an empty batch's call).
  if (purpose != Purpose::run || forward_is_empty(*problem)) return Status::ok();
  return check_forward_memory(args);
}

Status build_backward_problem(const BackwardArgs& args, Purpose purpose,
                              BackwardProblem* problem) {
  count_validation();
  if (args.options == nullptr) return invalid("options", "is null");
  HFA_RETURN_IF_ERROR(check_struct_size(args.options->struct_size, sizeof(Options)));
  const Options& options = *args.options;
  const bool run = purpose == Purpose::run;
  if (run) {
    // Named in argument order, so the first missing one is reported.
    if (args.dout == nullptr) return invalid("dout", "is null");
    if (args.out == nullptr) return invalid("out", "is null");
    if (args.lse == nullptr) return invalid("lse", "is null (the backward needs the forward's lse)");
    if (args.dq == nullptr) return invalid("dq", "is null");
    if (args.dk == nullptr) return invalid("dk", "is null");
    if (args.dv == nullptr) return invalid("dv", "is null");
  }
  Core core;
  Varlen varlen;
  HFA_RETURN_IF_ERROR(
      check_forward_part(args.q, args.k, args.v, args.out, false, options, &core, &varlen));
  if (args.q->dtype == HFA_E4M3)
    return not_supported("q: FP8 backward is not supported (e4m3 inputs are forward only)");
  const bool is_varlen = varlen.cu_q != nullptr;

  if (run) {
    const int64_t batch = is_varlen ? varlen.batch : core.q.extent[kBatch];
    HFA_RETURN_IF_ERROR(check_lse("lse", args.lse, core, batch, is_varlen, false));
    if (options.softmax_d != nullptr) {
      HFA_RETURN_IF_ERROR(
          check_lse("softmax_d", options.softmax_d, core, batch, is_varlen, false));
      problem->softmax_d = static_cast<const float*>(options.softmax_d->data);
      lse_strides(*options.softmax_d, is_varlen, &problem->softmax_d_batch_stride,
                  &problem->softmax_d_head_stride);
    }

    // dout is shaped like out; the gradients like what they differentiate.
    Operand dout, dq, dk, dv;
    HFA_RETURN_IF_ERROR(check_operand("dout", args.dout, is_varlen, false, &dout));
    HFA_RETURN_IF_ERROR(check_operand("dq", args.dq, is_varlen, true, &dq));
    HFA_RETURN_IF_ERROR(check_operand("dk", args.dk, is_varlen, true, &dk));
    HFA_RETURN_IF_ERROR(check_operand("dv", args.dv, is_varlen, true, &dv));
    const hfa_dtype dtype = args.q->dtype;
    const std::pair<const char*, const Tensor*> extra[] = {
        {"dout", args.dout}, {"dq", args.dq}, {"dk", args.dk}, {"dv", args.dv}};
    for (const auto& [name, tensor] : extra) {
      HFA_RETURN_IF_ERROR(expect_dtype(name, *tensor, dtype, "q"));
      HFA_RETURN_IF_ERROR(expect_same_device(name, *tensor, *args.q));
    }
    HFA_RETURN_IF_ERROR(expect_same_shape(dout, core.out));
    HFA_RETURN_IF_ERROR(expect_same_shape(dq, core.q));
    HFA_RETURN_IF_ERROR(expect_same_shape(dk, core.k));
    HFA_RETURN_IF_ERROR(expect_same_shape(dv, core.v));

    problem->dout = args.dout->data;
    problem->dq = args.dq->data;
    problem->dk = args.dk->data;
    problem->dv = args.dv->data;
    problem->dout_stride = dout.strides;
    problem->dq_stride = dq.strides;
    problem->dk_stride = dk.strides;
    problem->dv_stride = dv.strides;

    if (options.dsinks != nullptr) {
      if (options.sinks == nullptr) return invalid("dsinks", "is given but sinks is null");
      HFA_RETURN_IF_ERROR(check_vector("dsinks", options.dsinks, "(heads_q)",
                                       core.q.extent[kHeads], HFA_F32, *args.q, true));
      problem->dsinks = static_cast<float*>(options.dsinks->data);
    }
  }
  fill_forward_problem(core, varlen, run ? args.lse : nullptr, options, &problem->fwd);
  HFA_RETURN_IF_ERROR(attach_vectors(options, HFA_CALL_BACKWARD, vector_dims(core, varlen),
                                     *args.q, &problem->fwd.vectors));
  HFA_RETURN_IF_ERROR(attach_block_sparse(options, *args.q, &problem->fwd));
  // Rejects any descale: the inputs are not e4m3.
  HFA_RETURN_IF_ERROR(attach_descales(options, *args.q, &problem->fwd));
  // Nothing written (no query or key rows, no dsinks: backward_is_empty): no overlap to find.
  if (!run || backward_is_empty(*problem)) return Status::ok();
  return check_backward_memory(args);
}

Status check_workspace(std::size_t needed, const void* workspace, std::size_t workspace_bytes) {
  if (needed == 0) return Status::ok();
  if (workspace_bytes < needed)
    return invalid("workspace", "this call needs ", needed, " bytes, got ", workspace_bytes,
                   " (hfa_prepare_* and the *_workspace_size queries say how many)");
  if (workspace == nullptr)
    return invalid("workspace", "is null, but this call needs ", needed, " bytes");
  if (const auto past = reinterpret_cast<std::uintptr_t>(workspace) % HFA_WORKSPACE_ALIGNMENT)
    return invalid("workspace", "must be aligned to ", HFA_WORKSPACE_ALIGNMENT,
                   " bytes (cudaMalloc's and torch's allocations are), got an address ", past,
                   " bytes past a multiple");
  return Status::ok();
}

namespace {
int64_t rows_of(const ForwardProblem& p, bool queries) {
  if (p.is_varlen()) return queries ? p.total_q : p.total_k;
  return int64_t{p.batch} * (queries ? p.seqlen_q : p.seqlen_k);
}
}  // namespace

bool forward_is_empty(const ForwardProblem& p) { return rows_of(p, true) == 0; }

bool backward_is_empty(const BackwardProblem& p) {
  // dsinks is an output over heads, not rows: it is written (as zeros) even then.
  return rows_of(p.fwd, true) == 0 && rows_of(p.fwd, false) == 0 && p.dsinks == nullptr;
}

}  // namespace hfa::detail
