// Tensor views and dtypes: the small conveniences of hfa.hpp.
#include <stdexcept>
#include <string>

#include "common/dtype_bytes.hpp"
#include "hfa/hfa.hpp"

namespace hfa {

Tensor make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                   std::initializer_list<int64_t> strides, Device device) {
  // Misuse here is a programming error in the caller's code, not a runtime condition the
  // Status path could report (there is no Status to return), so it throws.
  if (shape.size() > HFA_MAX_RANK)
    throw std::invalid_argument("hfa::make_tensor: rank " + std::to_string(shape.size()) +
                                " exceeds HFA_MAX_RANK (" + std::to_string(HFA_MAX_RANK) + ")");
  if (strides.size() != 0 && strides.size() != shape.size())
    throw std::invalid_argument("hfa::make_tensor: " + std::to_string(strides.size()) +
                                " strides for " + std::to_string(shape.size()) + " dims");

  Tensor t{};
  t.data = data;
  t.dtype = static_cast<hfa_dtype>(dtype);
  t.rank = static_cast<int32_t>(shape.size());
  t.device = static_cast<hfa_device_kind>(device.kind);
  t.device_index = device.index;
  int i = 0;
  for (int64_t extent : shape) t.shape[i++] = extent;
  if (strides.size() != 0) {
    i = 0;
    for (int64_t stride : strides) t.stride[i++] = stride;
  } else {
    int64_t running = 1;  // row-major: the last dim is the fastest
    for (int d = t.rank - 1; d >= 0; --d) {
      t.stride[d] = running;
      running *= t.shape[d];
    }
  }
  return t;
}

std::size_t dtype_size(DType dtype) {
  return detail::element_bytes(static_cast<hfa_dtype>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::i32: return "i32";
    case DType::fp4_e2m1x2: return "fp4_e2m1x2";
    case DType::ue8m0: return "ue8m0";
    case DType::fp8_mla: return "fp8_mla";
  }
  return "unknown";
}

}  // namespace hfa
