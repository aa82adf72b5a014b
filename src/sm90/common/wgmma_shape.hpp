// The shape facts of 16-bit wgmma and of the register file that every tile and tile
// configuration is built from.
#pragma once

namespace hfa::sm90 {

inline constexpr int kRowsPerWarpgroup = 64;  // the M of one wgmma
inline constexpr int kThreadsPerWarpgroup = 128;
inline constexpr int kSlabColumns = 64;       // 16-bit columns per 128-byte swizzled slab
inline constexpr int kMmaK = 16;              // the K of one 16-bit wgmma

// Registers a thread gets at launch from __launch_bounds__(threads, 1): the register file's 64K
// split evenly, in the allocation's steps of 8.
constexpr int launch_registers(int threads) { return 65536 / threads / 8 * 8; }

// Whether a setmaxnreg split of one producer and `consumers` consumer warpgroups fits: .inc
// only hands out what the CTA's warps gave back with .dec, so a split that claims more leaves
// the consumers waiting in setmaxnreg forever. Counts are multiples of 8.
constexpr bool register_split_fits(int threads, int producer, int consumer, int consumers) {
  const int launch = launch_registers(threads);
  return producer % 8 == 0 && consumer % 8 == 0 &&
         (launch - producer) * kThreadsPerWarpgroup >= (consumer - launch) * kThreadsPerWarpgroup * consumers;
}

}  // namespace hfa::sm90
