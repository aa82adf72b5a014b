// A strided tensor in host memory for tests: f32, f16, bf16 or e4m3 (or i32 for cu_seqlens),
// filled with fresh random normal values or NaN, read and written by logical (row-major) index.
// An e4m3 element reads as its decoded value and is written by encoding (src/quant).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/half_float.hpp"
#include "hfa/hfa.hpp"
#include "quant/e4m3.hpp"

namespace hfa::test {

// Rounds a value to what `dtype` can hold (f32, f16, bf16), as a double.
inline double round_to(DType dtype, double value) {
  switch (dtype) {
    case DType::f32:
      return static_cast<float>(value);
    case DType::f16:
      return detail::fp16_to_float(detail::float_to_fp16(static_cast<float>(value)));
    case DType::bf16:
      return detail::bf16_to_float(detail::float_to_bf16(static_cast<float>(value)));
    default:
      return value;
  }
}

class HostTensor {
 public:
  HostTensor() = default;

  // Row-major, except that `padding` unused elements follow every innermost row, so a padded
  // tensor is not contiguous (a padded (b, s, h, d) tensor has head stride d + padding). The
  // padding holds NaN: a kernel that reads it poisons its output.
  HostTensor(DType dtype, std::vector<int64_t> shape, int64_t padding = 0)
      : dtype_(dtype), shape_(std::move(shape)), strides_(shape_.size()) {
    int64_t stride = 1;
    for (std::size_t d = shape_.size(); d-- > 0;) {
      strides_[d] = stride;
      stride *= shape_[d] + (d + 1 == shape_.size() ? padding : 0);
    }
    bytes_.resize(static_cast<std::size_t>(stride) * element_size());
    fill_storage_with_nan();
  }

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t stride(std::size_t dim) const { return strides_.at(dim); }
  void* data() { return bytes_.data(); }
  std::size_t storage_bytes() const { return bytes_.size(); }  // padding included
  const void* data() const { return bytes_.data(); }
  std::size_t element_size() const {
    if (dtype_ == DType::e4m3) return 1;
    return dtype_ == DType::f16 || dtype_ == DType::bf16 ? 2 : 4;
  }

  int64_t numel() const {
    int64_t count = 1;
    for (int64_t extent : shape_) count *= extent;
    return count;
  }

  // Storage offset (in elements) of the element at a logical row-major index.
  int64_t offset(int64_t index) const {
    int64_t result = 0;
    for (std::size_t d = shape_.size(); d-- > 0;) {
      result += index % shape_[d] * strides_[d];
      index /= shape_[d];
    }
    return result;
  }

  double get(int64_t index) const {
    const std::byte* at = bytes_.data() + offset(index) * static_cast<int64_t>(element_size());
    switch (dtype_) {
      case DType::f32: return load<float>(at);
      case DType::i32: return load<int32_t>(at);
      case DType::f16: return detail::fp16_to_float(load<uint16_t>(at));
      case DType::bf16: return detail::bf16_to_float(load<uint16_t>(at));
      case DType::e4m3: return quant::e4m3_decode(load<uint8_t>(at));
      default: throw std::invalid_argument("HostTensor: unsupported dtype");
    }
  }

  // Stores value rounded to nearest even in the tensor's dtype.
  void set(int64_t index, double value) {
    std::byte* at = bytes_.data() + offset(index) * static_cast<int64_t>(element_size());
    switch (dtype_) {
      case DType::f32: store(at, static_cast<float>(value)); break;
      case DType::i32: store(at, static_cast<int32_t>(value)); break;
      case DType::f16: store(at, detail::float_to_fp16(static_cast<float>(value))); break;
      case DType::bf16: store(at, detail::float_to_bf16(static_cast<float>(value))); break;
      case DType::e4m3: store(at, quant::e4m3_encode(static_cast<float>(value))); break;
      default: throw std::invalid_argument("HostTensor: unsupported dtype");
    }
  }

  // Fresh normal values N(mean, stddev²) from `seed`, rounded to the dtype. Never all zeros.
  void fill_normal(uint64_t seed, double stddev = 1.0, double mean = 0.0) {
    std::mt19937_64 generator(seed);
    std::normal_distribution<double> normal(mean, stddev);
    for (int64_t i = 0; i < numel(); ++i) set(i, normal(generator));
  }

  void fill_nan() {
    for (int64_t i = 0; i < numel(); ++i) set(i, std::numeric_limits<double>::quiet_NaN());
  }

  // The elements in logical order, as doubles.
  std::vector<double> values() const {
    std::vector<double> result(static_cast<std::size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) result[i] = get(i);
    return result;
  }

  // A view for the public API (hfa::forward and friends).
  Tensor view() const {
    Tensor tensor{};
    tensor.data = const_cast<std::byte*>(bytes_.data());
    tensor.dtype = static_cast<hfa_dtype>(dtype_);
    tensor.rank = static_cast<int32_t>(shape_.size());
    for (std::size_t d = 0; d < shape_.size(); ++d) {
      tensor.shape[d] = shape_[d];
      tensor.stride[d] = strides_[d];
    }
    tensor.device = HFA_CPU;
    return tensor;
  }

 private:
  template <class T>
  static T load(const std::byte* at) {
    T value;
    std::memcpy(&value, at, sizeof value);
    return value;
  }
  template <class T>
  static void store(std::byte* at, T value) {
    std::memcpy(at, &value, sizeof value);
  }

  void fill_storage_with_nan() {
    const std::size_t count = bytes_.size() / element_size();
    for (std::size_t i = 0; i < count; ++i) {
      std::byte* at = bytes_.data() + i * element_size();
      switch (dtype_) {
        case DType::f32: store(at, std::numeric_limits<float>::quiet_NaN()); break;
        case DType::f16: store(at, uint16_t{0x7e00}); break;
        case DType::bf16: store(at, uint16_t{0x7fc0}); break;
        case DType::e4m3: store(at, static_cast<uint8_t>(quant::E4M3::kNanCode)); break;
        default: break;  // i32: zeros
      }
    }
  }

  DType dtype_ = DType::f32;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  std::vector<std::byte> bytes_;
};

}  // namespace hfa::test
