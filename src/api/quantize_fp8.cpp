// hfa_quantize_fp8 / hfa_hadamard_signs: the checks (in the order of validate.cpp: each tensor,
// then how they relate, then the values a CPU call can read, then what the device can take) and
// the dispatch.
#include <cstdint>
#include <string>

#include "api/devices.hpp"
#include "api/dispatch.hpp"
#include "api/overlap.hpp"
#include "api/validate.hpp"
#include "common/errors.hpp"
#include "quant/float_bits.hpp"
#include "quant/hadamard.hpp"

namespace hfa {
namespace {

using detail::Fp8QuantizeProblem;
using detail::invalid;

constexpr int64_t kGpuAlignment = 16;  // bytes: a GPU lane loads and stores 16 values of a row
constexpr int64_t kInt32Max = INT32_MAX;

const char* name_of(hfa_dtype d) { return dtype_name(static_cast<DType>(d)); }

const char* layout_of(bool varlen) {
  return varlen ? "(total, heads, headdim) with cu_seqlens" : "(batch, seqlen, heads, headdim)";
}

Status check_granularity(const QuantizeFp8Options& o) {
  switch (o.granularity) {
    case Fp8Granularity::per_tensor:
    case Fp8Granularity::per_head:
      if (o.block_rows == 0) return Status::ok();
      return invalid("block_rows", o.block_rows, ": only per-block scaling takes one (give 0)");
    case Fp8Granularity::per_block:
      if (o.block_rows >= 1) return Status::ok();
      return invalid("block_rows", "must be at least 1 for per-block scaling, got ", o.block_rows);
  }
  return invalid("granularity", static_cast<int>(o.granularity),
                 " is not one (per_tensor 1, per_head 2, per_block 3)");
}

// x on its own: the layout, a float dtype, a usable device, int32 extents.
Status check_x(const Tensor& x, bool varlen) {
  HFA_RETURN_IF_ERROR(detail::check_tensor_form("x", &x, varlen ? 3 : 4, layout_of(varlen), false));
  if (x.dtype != HFA_F32 && x.dtype != HFA_F16 && x.dtype != HFA_BF16)
    return invalid("x", "expected dtype f32, f16 or bf16, got ", name_of(x.dtype));
  HFA_RETURN_IF_ERROR(detail::check_device_usable("x", x));
  for (int d = 0; d < x.rank; ++d)
    if (x.shape[d] > kInt32Max)
      return invalid("x", "extent ", x.shape[d], " in dim ", d, " exceeds int32");
  return Status::ok();
}

Status check_codes(const Tensor& codes, const Tensor& x, bool varlen) {
  HFA_RETURN_IF_ERROR(detail::check_tensor_form("codes", &codes, x.rank, layout_of(varlen), true));
  if (codes.dtype != HFA_E4M3)
    return invalid("codes", "expected dtype e4m3, got ", name_of(codes.dtype));
  HFA_RETURN_IF_ERROR(detail::check_same_device("codes", codes, x, "x"));
  for (int d = 0; d < x.rank; ++d)
    if (codes.shape[d] != x.shape[d])
      return invalid("codes", "expected shape ", detail::tensor_shape_string(x), " (as x), got ",
                     detail::tensor_shape_string(codes));
  return Status::ok();
}

// The scale tensor's shape for each granularity; blocks per sequence (varlen: any, checked
// against the lengths on the CPU) come from it.
Status check_scale(const Tensor& scale, const Tensor& x, const QuantizeFp8Options& o,
                   Fp8QuantizeProblem* p) {
  const bool per_tensor = o.granularity == Fp8Granularity::per_tensor;
  const bool per_block = o.granularity == Fp8Granularity::per_block;
  const char* layout = per_tensor  ? "(1)"
                       : per_block ? "(batch, num_blocks, heads)"
                                   : "(batch, heads)";
  HFA_RETURN_IF_ERROR(detail::check_tensor_form("scale", &scale,
                                                per_tensor  ? 1
                                                : per_block ? 3
                                                            : 2,
                                                layout, true));
  if (scale.dtype != HFA_F32)
    return invalid("scale", "expected dtype f32, got ", name_of(scale.dtype));
  HFA_RETURN_IF_ERROR(detail::check_same_device("scale", scale, x, "x"));
  p->num_blocks = per_block ? scale.shape[1] : 1;
  const int64_t blocks =
      !per_block || p->cu_seqlens ? p->num_blocks : (p->seqlen + o.block_rows - 1) / o.block_rows;
  const bool fits = per_tensor
                        ? scale.shape[0] == 1
                        : scale.shape[0] == p->batch && scale.shape[scale.rank - 1] == p->heads &&
                              (!per_block || scale.shape[1] == blocks);
  if (fits) return detail::check_contiguous("scale", scale, layout);
  if (per_tensor)
    return invalid("scale", "expected shape (1), got ", detail::tensor_shape_string(scale));
  const std::string expected =
      !per_block
          ? detail::cat("(", p->batch, ", ", p->heads, ") (batch, heads)")
          : detail::cat("(", p->batch, ", ", p->cu_seqlens ? "num_blocks" : detail::cat(blocks),
                        ", ", p->heads, ") (batch, blocks of ", o.block_rows, " rows, heads)");
  return invalid("scale", "expected shape ", expected, ", got ",
                 detail::tensor_shape_string(scale));
}

Status check_signs(const Tensor* signs, const Tensor& x, int64_t d) {
  if (signs == nullptr) return Status::ok();
  HFA_RETURN_IF_ERROR(detail::check_tensor_form("signs", signs, 1, "(headdim)", false));
  if (signs->dtype != HFA_F32 || signs->shape[0] != d)
    return invalid("signs", "expected f32 of shape (", d, ") (x's headdim), got ",
                   name_of(signs->dtype), " ", detail::tensor_shape_string(*signs));
  HFA_RETURN_IF_ERROR(detail::check_same_device("signs", *signs, x, "x"));
  if (!quant::hadamard_supports(d))
    return detail::not_supported(
        "signs: the Hadamard rotation takes headdim 64, 128 or 256, "
        "x has ",
        d);
  return Status::ok();
}

// What a CPU call can read: the offsets, every sequence's blocks within scale, the signs ±1.
Status check_host_values(const Fp8QuantizeProblem& p) {
  if (p.cu_seqlens != nullptr)
    HFA_RETURN_IF_ERROR(detail::check_cu_seqlens_values("cu_seqlens", p.cu_seqlens, p.batch,
                                                        p.total, "x", nullptr, 0));
  if (p.granularity == Fp8Granularity::per_block && p.cu_seqlens != nullptr)
    for (int64_t b = 0; b < p.batch; ++b)
      if (p.rows_of(b) > p.num_blocks * p.block_rows)
        return invalid("scale", p.num_blocks, " blocks of ", p.block_rows, " rows hold ",
                       p.num_blocks * p.block_rows, " rows, but sequence ", b, " has ",
                       p.rows_of(b));
  for (int64_t i = 0; p.signs != nullptr && i < p.hdim; ++i)
    if (quant::abs_bits(p.signs[i]) != quant::bits_of(1.0f))
      return invalid("signs", "element ", i, " is ", p.signs[i], ", expected +1 or -1");
  return Status::ok();
}

// Rows that start at `alignment`-byte boundaries: the address and every stride that moves.
bool rows_aligned(const Tensor& t, int64_t element_bytes, int64_t alignment) {
  bool aligned = reinterpret_cast<uintptr_t>(t.data) % alignment == 0;
  for (int d = 0; d + 1 < t.rank; ++d)
    aligned = aligned && (t.shape[d] == 1 || t.stride[d] * element_bytes % alignment == 0);
  return aligned;
}

// What the GPU kernels take: the rotation's head dims, rows their lanes load and store whole.
Status check_gpu_support(const Tensor& x, const Tensor& codes, int64_t d) {
  if (!quant::hadamard_supports(d))
    return detail::not_supported("x: headdim ", d, " on a GPU (64, 128 or 256)");
  if (!rows_aligned(x, static_cast<int64_t>(dtype_size(static_cast<DType>(x.dtype))),
                    kGpuAlignment))
    return detail::not_supported("x: on a GPU its rows must start at ", kGpuAlignment,
                                 "-byte aligned addresses and strides");
  if (!rows_aligned(codes, 1, kGpuAlignment))
    return detail::not_supported("codes: on a GPU its rows must start at ", kGpuAlignment,
                                 "-byte aligned addresses and strides");
  return Status::ok();
}

detail::Strides strides_of(const Tensor& t, bool varlen) {
  if (varlen) return {0, t.stride[0], t.stride[1]};
  return {t.stride[0], t.stride[1], t.stride[2]};
}

Status build(const Tensor& x, const Tensor& codes, const Tensor& scale, const QuantizeFp8Options& o,
             Fp8QuantizeProblem* p) {
  HFA_RETURN_IF_ERROR(check_granularity(o));
  const Tensor* cu = o.cu_seqlens;
  const bool varlen = cu != nullptr;
  HFA_RETURN_IF_ERROR(check_x(x, varlen));
  HFA_RETURN_IF_ERROR(check_codes(codes, x, varlen));
  if (varlen) HFA_RETURN_IF_ERROR(detail::check_cu_seqlens_form("cu_seqlens", cu, x, "x"));
  const int rows = varlen ? 0 : 1;  // x's dim of the rows
  p->granularity = o.granularity;
  p->block_rows = o.granularity == Fp8Granularity::per_block ? o.block_rows : 0;
  p->cu_seqlens = varlen ? static_cast<const int32_t*>(cu->data) : nullptr;
  p->batch = varlen ? cu->shape[0] - 1 : x.shape[0];
  p->seqlen = varlen ? 0 : x.shape[1];
  p->total = varlen ? x.shape[0] : x.shape[0] * x.shape[1];
  p->heads = x.shape[rows + 1];
  p->hdim = static_cast<int32_t>(x.shape[rows + 2]);
  HFA_RETURN_IF_ERROR(check_scale(scale, x, o, p));
  HFA_RETURN_IF_ERROR(check_signs(o.signs, x, p->hdim));
  detail::CallTensors tensors;  // the memory rule (overlap.hpp)
  tensors.add("x", &x);
  tensors.add("codes", &codes, true);
  tensors.add("scale", &scale, true);
  tensors.add("cu_seqlens", cu);
  tensors.add("signs", o.signs);
  HFA_RETURN_IF_ERROR(detail::check_shared_memory(tensors));

  p->x_dtype = static_cast<DType>(x.dtype);
  p->x = x.data;
  p->codes = static_cast<uint8_t*>(codes.data);
  p->x_stride = strides_of(x, varlen);
  p->codes_stride = strides_of(codes, varlen);
  p->scale = static_cast<float*>(scale.data);
  p->signs = o.signs != nullptr ? static_cast<const float*>(o.signs->data) : nullptr;
  p->device = x.device == HFA_CUDA ? Device::cuda(x.device_index) : Device::cpu();
  p->stream = o.stream;
  if (p->device.kind == DeviceKind::cpu) return check_host_values(*p);
  return p->total == 0 ? Status::ok() : check_gpu_support(x, codes, p->hdim);
}

}  // namespace

Status quantize_fp8(const Tensor& x, const Tensor& codes, const Tensor& scale,
                    const QuantizeFp8Options& options) {
  return detail::guarded("quantize_fp8", [&]() -> Status {
    Fp8QuantizeProblem problem;
    HFA_RETURN_IF_ERROR(build(x, codes, scale, options, &problem));
    if (problem.scale_count() == 0) return Status::ok();  // no group, so no row either
    return detail::dispatch_quantize_fp8(problem);
  });
}

Status hadamard_signs(uint64_t seed, const Tensor& signs, void* stream) {
  return detail::guarded("hadamard_signs", [&]() -> Status {
    HFA_RETURN_IF_ERROR(detail::check_tensor_form("signs", &signs, 1, "(d)", true));
    if (signs.dtype != HFA_F32)
      return invalid("signs", "expected dtype f32, got ", name_of(signs.dtype));
    HFA_RETURN_IF_ERROR(detail::check_device_usable("signs", signs));
    detail::HadamardSignsProblem problem;
    problem.seed = seed;
    problem.signs = static_cast<float*>(signs.data);
    problem.count = signs.shape[0];
    problem.device = signs.device == HFA_CUDA ? Device::cuda(signs.device_index) : Device::cpu();
    problem.stream = stream;
    if (problem.count == 0) return Status::ok();
    return detail::dispatch_hadamard_signs(problem);
  });
}

}  // namespace hfa
