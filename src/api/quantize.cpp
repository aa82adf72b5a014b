// hfa_quantize_kv / hfa_dequantize_kv: the checks (in the order of validate.cpp: each tensor,
// then how they relate, then what the device can take) and the dispatch.
#include <cstdint>
#include <string>

#include "api/devices.hpp"
#include "api/dispatch.hpp"
#include "api/overlap.hpp"
#include "api/validate.hpp"
#include "common/errors.hpp"
#include "common/mla.hpp"

namespace hfa {
namespace {

using detail::CacheFormat;
using detail::invalid;
using detail::PagedStrides;
using detail::QuantizeProblem;

constexpr int kNvfp4Block = 16;  // values per scale (src/quant/nvfp4.hpp)
constexpr int kMxfp4Block = 32;  // (src/quant/mxfp4.hpp)
constexpr int64_t kGpuRowAlignment = 16;  // bytes: the lanes' stores (as the decode's cache rows)

const char* name_of(hfa_dtype d) { return dtype_name(static_cast<DType>(d)); }

Status format_of(const QuantizeOptions& o, CacheFormat* format) {
  switch (o.format) {
    case KVFormat::fp8_per_head: *format = CacheFormat::fp8_per_head; return Status::ok();
    case KVFormat::fp8_per_token: *format = CacheFormat::fp8_per_token; return Status::ok();
    case KVFormat::nvfp4: *format = CacheFormat::nvfp4; return Status::ok();
    case KVFormat::mxfp4: *format = CacheFormat::mxfp4; return Status::ok();
    case KVFormat::fp8_mla: *format = CacheFormat::mla_fp8; return Status::ok();
  }
  return invalid("format", static_cast<int>(o.format), " is not a KV format (fp8_per_head 1, "
                 "fp8_per_token 2, nvfp4 3, mxfp4 4, fp8_mla 5)");
}

// The (page, slot, head) strides of the first `rows` dims of t (1 to 3; missing leading dims
// have extent 1 and stride 0).
PagedStrides row_strides(const Tensor& t, int rows) {
  const int64_t* s = t.stride;
  return {rows >= 3 ? s[rows - 3] : 0, rows >= 2 ? s[rows - 2] : 0, s[rows - 1]};
}

// t's first `dims` extents equal values'; `what` says which dims, for the message.
Status same_rows(const char* name, const Tensor& t, const Tensor& values, const char* values_name,
                 int dims) {
  for (int d = 0; d < dims; ++d)
    if (t.shape[d] != values.shape[d])
      return invalid(name, "expected extent ", values.shape[d], " in dim ", d, " (as ", values_name,
                     "), got shape ", detail::tensor_shape_string(t));
  return Status::ok();
}

// FlashMLA's FP8 records (one a row of 576 values, their scales inside): values and codes into
// a problem with no scale tensor.
Status build_mla(const Tensor& values, const Tensor& codes, const char* values_name,
                 bool dequantize, QuantizeProblem* p) {
  const int rank = values.rank, rows = rank - 1;
  const int64_t d = values.shape[rank - 1];
  if (d != detail::kMlaHeadDimQK)
    return invalid(values_name, "headdim ", d, " must be ", detail::kMlaHeadDimQK,
                   " for fp8_mla (MLA's [latent 512 ; rotary 64] rows)");
  const char* layout = "([pages,] [page_size,] heads_kv, 656)";
  HFA_RETURN_IF_ERROR(detail::check_tensor_form("codes", &codes, rank, layout, !dequantize));
  if (codes.dtype != HFA_FP8_MLA)
    return invalid("codes", "expected dtype fp8_mla for this format, got ", name_of(codes.dtype));
  HFA_RETURN_IF_ERROR(detail::check_same_device("codes", codes, values, values_name));
  HFA_RETURN_IF_ERROR(same_rows("codes", codes, values, values_name, rows));
  if (codes.shape[rank - 1] != quant::kMlaRecordBytes)
    return invalid("codes", "expected last extent ", quant::kMlaRecordBytes,
                   " (bytes of an fp8_mla record), got ", codes.shape[rank - 1]);
  detail::CallTensors tensors;
  tensors.add(values_name, &values, dequantize);
  tensors.add("codes", &codes, !dequantize);
  HFA_RETURN_IF_ERROR(detail::check_shared_memory(tensors));
  p->side.data = codes.data;
  p->side.stride = row_strides(codes, rows);
  return Status::ok();
}

// The formats with a scale tensor: codes, scale and the global scale into p->side.
Status build_scaled(const Tensor& values, const Tensor& codes, const Tensor& scale,
                    const QuantizeOptions& o, const char* values_name, bool dequantize,
                    QuantizeProblem* p) {
  const int rank = values.rank, rows = rank - 1;
  const char* layout = "([pages,] [page_size,] heads_kv, headdim)";
  const bool fp4 = p->format == CacheFormat::nvfp4 || p->format == CacheFormat::mxfp4;
  const int64_t d = values.shape[rank - 1];
  const int block = p->format == CacheFormat::nvfp4 ? kNvfp4Block : kMxfp4Block;
  if (d < 1 || d > INT32_MAX) return invalid(values_name, "headdim ", d, " must be in [1, 2^31)");
  if (fp4 && d % block != 0)
    return invalid(values_name, "headdim ", d, " must be a multiple of ", block, " for ",
                   p->format == CacheFormat::nvfp4 ? "NVFP4" : "MXFP4");

  HFA_RETURN_IF_ERROR(detail::check_tensor_form("codes", &codes, rank, layout, !dequantize));
  const hfa_dtype code_dtype = fp4 ? HFA_FP4_E2M1X2 : HFA_E4M3;
  if (codes.dtype != code_dtype)
    return invalid("codes", "expected dtype ", name_of(code_dtype), " for this format, got ",
                   name_of(codes.dtype));
  HFA_RETURN_IF_ERROR(detail::check_same_device("codes", codes, values, values_name));
  HFA_RETURN_IF_ERROR(same_rows("codes", codes, values, values_name, rows));
  const int64_t code_bytes = fp4 ? d / 2 : d;
  if (codes.shape[rank - 1] != code_bytes)
    return invalid("codes", "expected last extent ", code_bytes, fp4 ? " (headdim / 2)" : " (headdim)",
                   ", got ", codes.shape[rank - 1]);

  // The scales: an input per kv-head; else one per row (FP8) or per block of a row (FP4).
  const bool per_head = p->format == CacheFormat::fp8_per_head;
  const int scale_rank = per_head ? 1 : fp4 ? rank : rows;
  const hfa_dtype scale_dtype = !fp4 ? HFA_F32 : p->format == CacheFormat::nvfp4 ? HFA_E4M3 : HFA_UE8M0;
  const bool scale_written = !dequantize && !per_head;
  HFA_RETURN_IF_ERROR(detail::check_tensor_form(
      "scale", &scale, scale_rank,
      per_head ? "(heads_kv)" : fp4 ? "(x's dims but headdim, blocks per row)" : "(x's dims but headdim)",
      scale_written));
  if (scale.dtype != scale_dtype)
    return invalid("scale", "expected dtype ", name_of(scale_dtype), " for this format, got ",
                   name_of(scale.dtype));
  HFA_RETURN_IF_ERROR(detail::check_same_device("scale", scale, values, values_name));
  if (per_head) {
    if (scale.shape[0] != values.shape[rows - 1])
      return invalid("scale", "expected shape (", values.shape[rows - 1], ") (heads_kv, as ",
                     values_name, "), got ", detail::tensor_shape_string(scale));
  } else {
    HFA_RETURN_IF_ERROR(same_rows("scale", scale, values, values_name, rows));
    if (fp4 && scale.shape[rank - 1] != d / block)
      return invalid("scale", "expected ", d / block, " scales per row (headdim / ", block, "), got ",
                     scale.shape[rank - 1]);
  }

  if (p->format == CacheFormat::nvfp4) {
    const Tensor* g = o.global_scale;
    if (g == nullptr) return invalid("global_scale", "is null, but NVFP4 needs it (fp32 (1))");
    HFA_RETURN_IF_ERROR(detail::check_tensor_form("global_scale", g, 1, "(1)", false));
    if (g->dtype != HFA_F32 || g->shape[0] != 1)
      return invalid("global_scale", "expected f32 of shape (1), got ", name_of(g->dtype), " ",
                     detail::tensor_shape_string(*g));
    HFA_RETURN_IF_ERROR(detail::check_same_device("global_scale", *g, values, values_name));
    p->side.global_scale = static_cast<const float*>(g->data);
  } else if (o.global_scale != nullptr) {
    return invalid("global_scale", "is only used by NVFP4");
  }
  // The memory rule (overlap.hpp). Of two written tensors (codes and scale when quantizing) a
  // message names the later: the order of the call's arguments.
  detail::CallTensors tensors;
  tensors.add(values_name, &values, dequantize);
  tensors.add("codes", &codes, !dequantize);
  tensors.add("scale", &scale, scale_written);
  tensors.add("global_scale", o.global_scale);
  HFA_RETURN_IF_ERROR(detail::check_shared_memory(tensors));
  p->side.data = codes.data;
  p->side.stride = row_strides(codes, rows);
  p->side.scale = scale.data;
  p->side.scale_stride = per_head ? PagedStrides{0, 0, scale.stride[0]} : row_strides(scale, rows);
  return Status::ok();
}

// values, codes, scale (and the global scale) into a problem, or the first error. scale is null
// for fp8_mla alone.
Status build(const Tensor& values, const Tensor& codes, const Tensor* scale_given,
             const QuantizeOptions& o, bool dequantize, QuantizeProblem* p) {
  const char* values_name = dequantize ? "out" : "x";
  HFA_RETURN_IF_ERROR(format_of(o, &p->format));
  const bool mla = p->format == CacheFormat::mla_fp8;
  if (mla && scale_given != nullptr)
    return invalid("scale", "must be null for fp8_mla (its scales are inside its records)");
  if (!mla && scale_given == nullptr)
    return invalid("scale", "is null, but this format needs one (only fp8_mla has none)");
  if (mla && o.global_scale != nullptr) return invalid("global_scale", "is only used by NVFP4");
  if (values.rank < 2 || values.rank > 4)
    return invalid(values_name, "expected rank 2 to 4 ([pages,] [page_size,] heads_kv, headdim), "
                   "got rank ", values.rank);
  const int rank = values.rank, rows = rank - 1;
  const char* layout = "([pages,] [page_size,] heads_kv, headdim)";
  HFA_RETURN_IF_ERROR(detail::check_tensor_form(values_name, &values, rank, layout, dequantize));
  if (values.dtype != HFA_F32 && values.dtype != HFA_F16 && values.dtype != HFA_BF16)
    return invalid(values_name, "expected dtype f32, f16 or bf16, got ", name_of(values.dtype));
  HFA_RETURN_IF_ERROR(detail::check_device_usable(values_name, values));
  if (mla) {
    HFA_RETURN_IF_ERROR(build_mla(values, codes, values_name, dequantize, p));
  } else {
    HFA_RETURN_IF_ERROR(build_scaled(values, codes, *scale_given, o, values_name, dequantize, p));
  }
  const int64_t d = values.shape[rank - 1];
  p->dequantize = dequantize;
  p->values_dtype = static_cast<DType>(values.dtype);
  p->values = values.data;
  p->values_stride = row_strides(values, rows);
  p->pages = rows >= 3 ? values.shape[rows - 3] : 1;
  p->slots = rows >= 2 ? values.shape[rows - 2] : 1;
  p->heads = values.shape[rows - 1];
  p->side.hdim = static_cast<int32_t>(d);
  p->device = values.device == HFA_CUDA ? Device::cuda(values.device_index) : Device::cpu();
  p->stream = o.stream;
  if (p->device.kind != DeviceKind::cuda || p->rows() == 0) return Status::ok();
  // What the GPU kernel takes: no MLA record (refused by its backend, by name), the decode's
  // head dims, and code rows its lanes store whole.
  if (mla) return Status::ok();
  if (d != 64 && d != 128 && d != 256)
    return detail::not_supported(values_name, ": headdim ", d, " on a GPU (64, 128 or 256, as the "
                                 "KV-cache decode)");
  const auto address = reinterpret_cast<uintptr_t>(codes.data);
  bool aligned = address % kGpuRowAlignment == 0;
  for (int dim = 0; dim < rows; ++dim)
    aligned = aligned && (codes.shape[dim] == 1 || codes.stride[dim] % kGpuRowAlignment == 0);
  if (!aligned)
    return detail::not_supported("codes: on a GPU its rows must start at ", kGpuRowAlignment,
                                 "-byte aligned addresses and strides");
  return Status::ok();
}

template <typename Check>
Status run(const char* what, Check&& build_problem) {
  return detail::guarded(what, [&]() -> Status {
    QuantizeProblem problem;
    HFA_RETURN_IF_ERROR(build_problem(&problem));
    if (problem.rows() == 0) return Status::ok();
    return detail::dispatch_quantize_kv(problem);
  });
}

}  // namespace

Status quantize_kv(const Tensor& x, const Tensor& codes, const Tensor& scale,
                   const QuantizeOptions& options) {
  return run("quantize_kv",
             [&](QuantizeProblem* p) { return build(x, codes, &scale, options, false, p); });
}

Status dequantize_kv(const Tensor& codes, const Tensor& scale, const Tensor& out,
                     const QuantizeOptions& options) {
  return run("dequantize_kv",
             [&](QuantizeProblem* p) { return build(out, codes, &scale, options, true, p); });
}

Status quantize_kv(const Tensor& x, const Tensor& codes, const QuantizeOptions& options) {
  return run("quantize_kv",
             [&](QuantizeProblem* p) { return build(x, codes, nullptr, options, false, p); });
}

Status dequantize_kv(const Tensor& codes, const Tensor& out, const QuantizeOptions& options) {
  return run("dequantize_kv",
             [&](QuantizeProblem* p) { return build(out, codes, nullptr, options, true, p); });
}

}  // namespace hfa
