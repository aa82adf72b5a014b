// The shape facts of 16-bit wgmma that every tile and tile configuration is built from.
#pragma once

namespace hfa::sm90 {

inline constexpr int kRowsPerWarpgroup = 64;  // the M of one wgmma
inline constexpr int kThreadsPerWarpgroup = 128;
inline constexpr int kSlabColumns = 64;       // 16-bit columns per 128-byte swizzled slab
inline constexpr int kMmaK = 16;              // the K of one 16-bit wgmma

}  // namespace hfa::sm90
