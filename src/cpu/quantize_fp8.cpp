// hfa_quantize_fp8 on the CPU, the GPU's oracle. Two passes over the rows: each group's amax of
// the (rotated) rows, then the codes with the group's scale. Both passes rotate a row the same
// way (quant/hadamard.hpp), so the second encodes the values the first measured.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/kvcache_rows.hpp"
#include "cpu/operations.hpp"
#include "quant/fp8_input.hpp"
#include "quant/hadamard.hpp"

namespace hfa::cpu {
namespace {

using detail::Fp8QuantizeProblem;

// visit(b, i, h, y) for every row (b, i, h) of x, y its hdim values as fp32, rotated when the
// problem has signs.
template <typename Visit>
void for_each_row(const Fp8QuantizeProblem& p, Visit&& visit) {
  // Rows of no values: x and codes have no elements (null data, any strides), and every group's
  // amax stays 0 (scale 1).
  if (p.hdim == 0) return;
  const auto* x = static_cast<const std::byte*>(p.x);
  const int64_t value_bytes = static_cast<int64_t>(dtype_size(p.x_dtype));
  std::vector<float> y(static_cast<std::size_t>(p.hdim));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.rows_of(b); ++i)
      for (int64_t h = 0; h < p.heads; ++h) {
        load_plain_row(p.x_dtype, x + p.offset(p.x_stride, b, i, h) * value_bytes, p.hdim,
                       y.data());
        if (p.signs != nullptr) quant::hadamard_rotate(y.data(), p.hdim, p.signs);
        visit(b, i, h, y.data());
      }
}

}  // namespace

Status quantize_fp8(const Fp8QuantizeProblem& p) {
  std::vector<uint32_t> largest(static_cast<std::size_t>(p.scale_count()), 0);  // abs bits
  for_each_row(p, [&](int64_t b, int64_t i, int64_t h, const float* y) {
    uint32_t& group = largest[static_cast<std::size_t>(p.group(b, i, h))];
    group = std::max(group, quant::abs_bits(quant::amax_abs(y, p.hdim)));
  });
  for (std::size_t g = 0; g < largest.size(); ++g)
    p.scale[g] = quant::fp8_input_scale(quant::amax_from_abs_bits(largest[g]));
  for_each_row(p, [&](int64_t b, int64_t i, int64_t h, const float* y) {
    const float scale = p.scale[p.group(b, i, h)];
    uint8_t* codes = p.codes + p.offset(p.codes_stride, b, i, h);
    for (int c = 0; c < p.hdim; ++c) codes[c] = quant::fp8_input_encode(y[c], scale);
  });
  return Status::ok();
}

// Sign by sign, with the function the GPU's signs kernel runs: the same signs on either device.
Status hadamard_signs(const detail::HadamardSignsProblem& p) {
  for (int64_t i = 0; i < p.count; ++i) p.signs[i] = quant::hadamard_sign(p.seed, i);
  return Status::ok();
}

}  // namespace hfa::cpu
