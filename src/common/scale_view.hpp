// The scales of FP8 codes (q, k, v in e4m3): the value of a code is code · scale, with one scale
// per (batch, head) or per (batch, block of `block_rows` rows counted from the sequence's first,
// head). The CPU backend and the kernels read them through scale_at, one formula for both.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

namespace hfa::detail {

// Scale of row r of head h of sequence b:
//   data[b·batch_stride + (r / block_rows)·block_stride + (h / head_divisor)·head_stride]
// (block_rows 0: no block term). head_divisor maps a query head to the scale's head: the GQA
// group size for FlashAttention-3's (batch, heads_kv) q_descale, 1 for (batch, heads_q); always 1
// for k and v, whose heads are kv heads. Strides are in elements and may be 0 (a broadcast: a
// per-tensor scale is a (1, 1) view with zero strides). data null: every scale is 1.
struct ScaleView {
  const float* data = nullptr;  // fp32 on the tensors' device
  int64_t batch_stride = 0;
  int64_t block_stride = 0;
  int64_t head_stride = 0;
  int32_t block_rows = 0;
  int32_t head_divisor = 1;
};

HFA_HD inline float scale_at(const ScaleView& view, int batch, int row, int head) {
  if (view.data == nullptr) return 1.0f;
  int64_t index = batch * view.batch_stride + (head / view.head_divisor) * view.head_stride;
  if (view.block_rows > 0) index += (row / view.block_rows) * view.block_stride;
  return view.data[index];
}

}  // namespace hfa::detail
