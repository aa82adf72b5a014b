#include "sm90/tma_descriptor.hpp"

#include "sm90/device.hpp"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <string>

namespace hfa::sm90 {
namespace {

constexpr uint32_t kSlabBytes = 128;  // one swizzle row: 64 16-bit or 128 8-bit elements
constexpr uint64_t kTmaAlignment = 16;

uint32_t element_bytes(CUtensorMapDataType dtype) {
  return dtype == CU_TENSOR_MAP_DATA_TYPE_UINT8 ? 1 : 2;
}

PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static std::atomic<PFN_cuTensorMapEncodeTiled_v12000> cached{nullptr};
  return driver_function(cached, "cuTensorMapEncodeTiled", 12000);
}

}  // namespace

Status make_tile_map(CUtensorMap* map, const TileMapShape& shape, CUtensorMapDataType dtype) {
  if (reinterpret_cast<uintptr_t>(shape.base) % kTmaAlignment != 0) {
    return {Code::not_supported, "sm90: tensor data must be 16-byte aligned for TMA"};
  }
  auto encode = encode_function();
  if (encode == nullptr) return {Code::cuda, "sm90: cuTensorMapEncodeTiled is not available"};

  // Extents of 0 are not encodable, and a tensor with no elements is never copied: its map gets
  // one row (head, batch) where it has none, and packed strides whatever strides it came with
  // (the API gives an empty tensor's strides as 0). The stride of a dim of one element is never
  // used either (frameworks give it any value): packed too where TMA would not take it. A zero
  // stride over several elements is a broadcast, which TMA cannot express.
  cuuint64_t dims[5];
  bool empty = false;
  for (int i = 0; i < 4; ++i) {
    empty = empty || shape.dims[i] == 0;
    dims[i] = shape.dims[i] > 0 ? shape.dims[i] : 1;
  }
  cuuint64_t strides[4] = {shape.strides_bytes[0], shape.strides_bytes[1], shape.strides_bytes[2]};
  for (int i = 0; i < 3; ++i) {
    const cuuint64_t packed = i == 0 ? dims[0] * element_bytes(dtype) : strides[i - 1] * dims[i];
    const bool encodable = strides[i] > 0 && strides[i] % kTmaAlignment == 0;
    if (empty || (dims[i + 1] == 1 && !encodable)) {
      strides[i] = (packed + kTmaAlignment - 1) / kTmaAlignment * kTmaAlignment;
    } else if (strides[i] == 0) {
      return {Code::not_supported, "sm90: a zero stride over " + std::to_string(dims[i + 1]) +
                                       " rows, heads or batches (a broadcast view) is not "
                                       "supported by TMA; pass a materialized copy"};
    } else if (strides[i] % kTmaAlignment != 0) {
      return {Code::not_supported,
              "sm90: row, head and batch strides must be multiples of 16 bytes for TMA (got " +
                  std::to_string(strides[i]) + " bytes)"};
    }
  }
  cuuint32_t box[5] = {kSlabBytes / element_bytes(dtype), shape.box_rows, 1, 1, 1};
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  cuuint32_t rank = 4;
  if (const cuuint32_t group = shape.heads_per_row; group > 0) {
    // (dim, row, head, batch) → (dim, head in group, row, head group, batch).
    const cuuint64_t row_stride = strides[0], head_stride = strides[1], batch_stride = strides[2];
    const cuuint64_t rows = dims[1], heads = dims[2], batches = dims[3];
    const cuuint64_t packed_dims[5] = {dims[0], group, rows, heads / group, batches};
    const cuuint64_t packed_strides[4] = {head_stride, row_stride, head_stride * group,
                                          batch_stride};
    for (int i = 0; i < 5; ++i) dims[i] = packed_dims[i];
    for (int i = 0; i < 4; ++i) strides[i] = packed_strides[i];
    box[1] = group;
    box[2] = shape.box_rows / group;
    rank = 5;
  }
  const CUresult result =
      encode(map, dtype, rank, const_cast<void*>(shape.base), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    return {Code::cuda, "sm90: cuTensorMapEncodeTiled failed with CUresult " +
                            std::to_string(static_cast<int>(result))};
  }
  return Status::ok();
}

}  // namespace hfa::sm90
