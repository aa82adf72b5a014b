// Host side of TMA: building CUtensorMaps for the tensors a kernel copies.
#pragma once

#include <cstdint>
#include <cuda.h>

#include "hfa/hfa.hpp"

namespace hfa::sm90 {

// A rank-4 view (dim, row, head, batch) of 16-bit or 8-bit elements with a unit stride in dim,
// copied in boxes of 128 bytes of dims (64 or 128) × box_rows rows (one 128-byte swizzled slab)
// of one head of one batch.
struct TileMapShape {
  const void* base;
  uint64_t dims[4];           // extents, innermost first
  uint64_t strides_bytes[3];  // of row, head, batch
  uint32_t box_rows;
  // > 0: PackGQA. A rank-5 map (dim, head in group, row, head group, batch) whose box rows each
  // hold one row of `heads_per_row` consecutive heads (box_rows / heads_per_row rows of them);
  // dims[2] still counts heads.
  uint32_t heads_per_row = 0;
};

// Encodes the map through the driver entry point the runtime exposes (no -lcuda needed).
// Fails with not_supported when the view breaks TMA's rules (16-byte aligned base and strides).
Status make_tile_map(CUtensorMap* map, const TileMapShape& shape, CUtensorMapDataType dtype);

}  // namespace hfa::sm90
