// The one place where a problem's dtype and head dims become template arguments: the compiled
// configuration (common/kernel_list.def) that holds them, or not_supported naming what is.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "common/head_dims.hpp"
#include "hfa/hfa.hpp"

namespace hfa::sm90 {

// Whether some compiled element type is `dtype`.
inline bool is_compiled_dtype(DType dtype) {
#define HFA_KERNEL_ELEMENT(name, type) \
  if (dtype == DType::name) return true;
#include "common/kernel_list.def"
#undef HFA_KERNEL_ELEMENT
  return false;
}

// The compiled types, for messages ("bf16, f16").
inline std::string compiled_dtype_list() {
  std::string list;
#define HFA_KERNEL_ELEMENT(name, type) list += (list.empty() ? "" : ", ") + std::string(#name);
#include "common/kernel_list.def"
#undef HFA_KERNEL_ELEMENT
  return list;
}

// Whether the forward and backward of head dims (qk, v), a compiled pair, are compiled for
// block-sparse masks too (kernel_list.def's HFA_KERNEL_BLOCK_SPARSE_HEAD_DIMS).
constexpr bool has_block_sparse_kernel(int qk, int v) {
#define HFA_KERNEL_BLOCK_SPARSE_HEAD_DIMS(QK, V) \
  if (qk == QK && v == V) return true;
#include "common/kernel_list.def"
#undef HFA_KERNEL_BLOCK_SPARSE_HEAD_DIMS
  return false;
}

// The same list for messages ("64/64, 128/128").
inline std::string block_sparse_head_dims_list() {
  std::string list;
#define HFA_KERNEL_BLOCK_SPARSE_HEAD_DIMS(QK, V) \
  list += (list.empty() ? "" : ", ") + std::string(#QK "/" #V);
#include "common/kernel_list.def"
#undef HFA_KERNEL_BLOCK_SPARSE_HEAD_DIMS
  return list;
}

// run.template operator()<kHeadDimQK, kHeadDimV, Element>() for the compiled configuration of
// (dtype, hdim_qk, hdim_v). The caller checks support first (is_compiled_dtype; the head dims,
// the API's validation): anything else is an internal error, never a kernel of the wrong size.
template <typename Run>
Status with_compiled_kernel(DType dtype, int hdim_qk, int hdim_v, Run&& run) {
  const Status missing{Code::internal, "sm90: no kernel compiled for dtype " +
                                           std::string(dtype_name(dtype)) + ", head dims " +
                                           std::to_string(hdim_qk) + "/" + std::to_string(hdim_v)};
  const detail::HeadDims* dims = detail::compiled_head_dims_for(hdim_qk, hdim_v);
  if (dims == nullptr) return missing;
  auto with_element = [&]<typename Element>() -> Status {
#define HFA_KERNEL_HEAD_DIMS(QK, V) \
  if (dims->qk == QK && dims->v == V) return run.template operator()<QK, V, Element>();
#include "common/kernel_list.def"
#undef HFA_KERNEL_HEAD_DIMS
    return missing;
  };
#define HFA_KERNEL_ELEMENT(name, type) \
  if (dtype == DType::name) return with_element.template operator()<type>();
#include "common/kernel_list.def"
#undef HFA_KERNEL_ELEMENT
  return missing;
}

// The FP8 forward's run.template operator()<kHeadDimQK, kHeadDimV, Out>() for the compiled
// configuration of (out dtype, hdim_qk, hdim_v), checked first (head_dims.hpp's
// is_compiled_fp8_out; the head dims, the API's validation).
template <typename Run>
Status with_compiled_fp8_kernel(DType out_dtype, int hdim_qk, int hdim_v, Run&& run) {
  const Status missing{Code::internal, "sm90: no FP8 kernel compiled for out dtype " +
                                           std::string(dtype_name(out_dtype)) + ", head dims " +
                                           std::to_string(hdim_qk) + "/" + std::to_string(hdim_v)};
  const detail::HeadDims* dims = detail::compiled_fp8_head_dims_for(hdim_qk, hdim_v);
  if (dims == nullptr) return missing;
  auto with_out = [&]<typename Out>() -> Status {
#define HFA_KERNEL_FP8_HEAD_DIMS(QK, V) \
  if (dims->qk == QK && dims->v == V) return run.template operator()<QK, V, Out>();
#include "common/kernel_list.def"
#undef HFA_KERNEL_FP8_HEAD_DIMS
    return missing;
  };
#define HFA_KERNEL_FP8_OUT(name, type) \
  if (out_dtype == DType::name) return with_out.template operator()<type>();
#include "common/kernel_list.def"
#undef HFA_KERNEL_FP8_OUT
  return missing;
}

// run.template operator()<Out>() for the compiled partial out type `out_dtype` of the 16-bit
// forward (HFA_KERNEL_PARTIAL_OUT), checked first (head_dims.hpp's is_compiled_partial_out).
template <typename Run>
Status with_partial_out_type(DType out_dtype, Run&& run) {
#define HFA_KERNEL_PARTIAL_OUT(name, type) \
  if (out_dtype == DType::name) return run.template operator()<type>();
#include "common/kernel_list.def"
#undef HFA_KERNEL_PARTIAL_OUT
  return {Code::internal, "sm90: no forward compiled for a partial out of dtype " +
                              std::string(dtype_name(out_dtype))};
}

}  // namespace hfa::sm90
