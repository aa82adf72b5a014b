// The VECTOR options of hfa/options.def, checked by one rule from their rows: a row's `low` is
// its dtype and `high` the shapes it may take (hfa_option_shape), in the call's dims. Each given
// vector becomes a view indexed by (sequence, query head) for the backends.
#include "api/validate_options.hpp"

#include <string>

#include "api/validate.hpp"
#include "common/errors.hpp"

namespace hfa::detail {
namespace {

// The shapes a row accepts, in the order they are tried and named.
struct Shape {
  hfa_option_shape bit;
  int rank;
  const char* words;
};
constexpr Shape kShapes[] = {{HFA_SHAPE_HEADS, 1, "(heads_q)"},
                             {HFA_SHAPE_BATCH, 1, "(batch)"},
                             {HFA_SHAPE_BATCH_HEADS, 2, "(batch, heads_q)"}};

// The extents of a shape in this call's dims (rank of them).
void extents_of(const Shape& shape, VectorDims dims, int64_t* extent) {
  switch (shape.bit) {
    case HFA_SHAPE_HEADS: extent[0] = dims.heads_q; break;
    case HFA_SHAPE_BATCH: extent[0] = dims.batch; break;
    case HFA_SHAPE_BATCH_HEADS: extent[0] = dims.batch, extent[1] = dims.heads_q; break;
  }
}

bool matches(const Tensor& t, const Shape& shape, VectorDims dims) {
  int64_t extent[2] = {0, 0};
  extents_of(shape, dims, extent);
  if (t.rank != shape.rank) return false;
  for (int d = 0; d < shape.rank; ++d)
    if (t.shape[d] != extent[d]) return false;
  return true;
}

// "(heads_q) = (8) or (batch, heads_q) = (2, 8)": what the row accepts in this call.
std::string accepted(uint32_t shapes, VectorDims dims) {
  std::string words;
  for (const Shape& shape : kShapes) {
    if (!(shapes & shape.bit)) continue;
    int64_t extent[2] = {0, 0};
    extents_of(shape, dims, extent);
    words += cat(words.empty() ? "" : " or ", shape.words, " = (", extent[0]);
    if (shape.rank == 2) words += cat(", ", extent[1]);
    words += ")";
  }
  return words;
}

}  // namespace

Status attach_vector(const char* name, const Tensor& t, double dtype, double shapes,
                     VectorDims dims, const Tensor& q, OptionVector* view) {
  const auto want_dtype = static_cast<hfa_dtype>(dtype);
  const auto want_shapes = static_cast<uint32_t>(shapes);
  const Shape* shape = nullptr;
  for (const Shape& s : kShapes)
    if ((want_shapes & s.bit) && shape == nullptr && matches(t, s, dims)) shape = &s;
  if (shape == nullptr)
    return invalid(name, "expected shape ", accepted(want_shapes, dims), ", got ",
                   t.rank >= 0 && t.rank <= HFA_MAX_RANK ? tensor_shape_string(t)
                                                         : cat("rank ", t.rank));
  HFA_RETURN_IF_ERROR(check_tensor_form(name, &t, shape->rank, shape->words, false));
  if (t.dtype != want_dtype)
    return invalid(name, "expected dtype ", dtype_name(static_cast<DType>(want_dtype)), ", got ",
                   dtype_name(static_cast<DType>(t.dtype)));
  HFA_RETURN_IF_ERROR(check_same_device(name, t, q));
  view->data = t.data;
  // check_form allows any stride over a dim of one element, and any strides at all with none:
  // those are never stepped over, so 0 keeps every offset a backend computes in range.
  const bool empty = t.data == nullptr;
  auto stride = [&](int d) { return empty || t.shape[d] == 1 ? 0 : t.stride[d]; };
  view->batch_stride = shape->bit == HFA_SHAPE_HEADS ? 0 : stride(0);
  view->head_stride = shape->bit == HFA_SHAPE_HEADS       ? stride(0)
                      : shape->bit == HFA_SHAPE_BATCH_HEADS ? stride(1)
                                                            : 0;
  return Status::ok();
}

}  // namespace hfa::detail
