// The shape facts of wgmma and of the register file that every tile and tile configuration is
// built from. A swizzled row is 128 bytes and one wgmma consumes 32 bytes of K, whatever the
// element: 64 16-bit or 128 8-bit columns a slab, k16 or k32 an instruction.
#pragma once

#include <cstdint>

namespace hfa::sm90 {

inline constexpr int kRowsPerWarpgroup = 64;  // the M of one wgmma
inline constexpr int kThreadsPerWarpgroup = 128;
inline constexpr int kSlabRowBytes = 128;
inline constexpr int kMmaKBytes = 32;
template <typename Element>
inline constexpr int kSlabColumnsOf = kSlabRowBytes / int(sizeof(Element));
template <typename Element>
inline constexpr int kMmaKOf = kMmaKBytes / int(sizeof(Element));
inline constexpr int kSlabColumns = kSlabColumnsOf<uint16_t>;  // 16-bit columns per slab
inline constexpr int kMmaK = kMmaKOf<uint16_t>;               // the K of one 16-bit wgmma

// Registers a thread gets at launch from __launch_bounds__(threads, 1): the register file's
// 64K, in the allocation's steps of 8.
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
