// The MLA decode kernel's tiles, warp roles and shared memory (mla_kernel.cuh), every number
// named once. Absorbed MLA decode is MQA over one latent KV head: a 576-wide key row
// [latent (512) ; rotary (64)] whose first 512 columns are also the value (common/mla.hpp).
#pragma once

#include <cstdint>

#include "sm90/common/swizzled_tile.cuh"
#include "sm90/common/wgmma_shape.hpp"
#include "sm90/decode/mla_shape.hpp"
#include "sm90/ptx/mbarrier.cuh"

namespace hfa::sm90::decode::mla {

static_assert(kRowsPerTile == kRowsPerWarpgroup, "the query rows are one wgmma's M");

// Two consumer warpgroups. Each owns half of O's 512 columns (64 × 256 fp32: 128 registers a
// thread, the most one warpgroup can hold next to its scores) and computes the scores of half of
// each tile's keys, which both then read back as P from shared memory.
inline constexpr int kConsumerWarpgroups = 2;
inline constexpr int kColumnsPerWarpgroup = kHeadDimV / kConsumerWarpgroups;  // 256: one wgmma N
inline constexpr int kKeysPerWarpgroup = kBlockN / kConsumerWarpgroups;       // 32
inline constexpr int kConsumerThreads = kConsumerWarpgroups * kThreadsPerWarpgroup;
inline constexpr int kConsumerWarps = kConsumerThreads / 32;
// One producer warpgroup after the consumers, of which one warp works: its lanes read 32 page
// numbers at a time, lane 0 issues the TMA copies. A whole warpgroup because registers are
// allocated per warpgroup in a wgmma kernel (ptxas gave 288 threads 168 registers a thread, as it
// gives 384): the producer then gives back what the consumers claim (setmaxnreg). 32 and 232,
// not FlashAttention-3's 24 and 240: the producer also walks the CTA's pieces of a balanced
// schedule (a sequence's length and window, its piece of the part's range), which ptxas spills
// from 24 registers, while the consumers use 184 (the SASS's highest register, R183).
inline constexpr int kProducerThreads = kThreadsPerWarpgroup;
inline constexpr int kThreads = kConsumerThreads + kProducerThreads;
inline constexpr int kProducerRegisters = 32;
inline constexpr int kConsumerRegisters = 232;
static_assert(register_split_fits(kThreads, kProducerRegisters, kConsumerRegisters,
                                  kConsumerWarpgroups));

// Two K stages: a 576-wide tile is 72 KB, and Q (72 KB) stays for the whole CTA, so a third
// does not fit in 227 KB. One stage in flight per SM (72 KB) is several times what HBM's
// latency-bandwidth product asks of an SM.
inline constexpr int kStages = 2;
// A tile arrives as 9 TMA copies of 64 columns (one 128-byte swizzled slab each), each on its
// own barrier, so Q·Kᵀ starts on the first slab while the others land.
inline constexpr int kPieces = kHeadDimQK / kSlabColumns;
inline constexpr int kVSlabsPerWarpgroup = kColumnsPerWarpgroup / kSlabColumns;  // 4

// The epilogue stages O one warpgroup's 256 columns at a time, as fp32 rows over Q's tile (the K
// stages may already hold the next piece's tiles). The rows are padded by 8 floats: a half-warp's
// 64-bit fragment stores of 4 rows at one column then fall in different banks.
inline constexpr int kStagedRowFloats = kColumnsPerWarpgroup + 8;
// The epilogue stores each row in runs of 4 columns (one 16-byte read of the staged row): a
// warp's 32 runs are 128 consecutive columns of one row.
inline constexpr int kStoreRun = 4;

static_assert(kHeadDimQK % kSlabColumns == 0 && kHeadDimV % kSlabColumns == 0,
              "V is the first whole slabs of the K tile");
static_assert(kKeysPerWarpgroup % 8 == 0, "a warpgroup's keys are whole 8-column fragment groups");

template <typename Element>
struct SharedStorage {
  using QTile = SwizzledTile<Element, kRowsPerTile, kHeadDimQK>;
  using KTile = SwizzledTile<Element, kBlockN, kHeadDimQK>;
  // P of one tile (64 rows × 64 keys, one slab), each warpgroup writing its 32 keys' columns.
  using PTile = SwizzledTile<Element, kRowsPerTile, kBlockN>;

  QTile q;
  KTile k[kStages];
  PTile p;
  // Each warpgroup's row maxima of its keys (log2 units), then at the end its row sums.
  float row_max[kConsumerWarpgroups][kRowsPerTile];
  float row_sum[kConsumerWarpgroups][kRowsPerTile];
  float row_lse[kRowsPerTile];
  ptx::Mbarrier k_full[kStages][kPieces];  // a slab of the stage's tile landed (TMA bytes)
  ptx::Mbarrier k_empty[kStages];          // every consumer warp is done with the stage
};

// Half of the final rows, fp32 (normalized output, or the piece's partial), staged over Q.
inline constexpr int kStagedOutBytes = kRowsPerTile * kStagedRowFloats * int(sizeof(float));

template <typename Element>
inline constexpr int kSmemBytes = kSharedBytes<SharedStorage<Element>>;

template <typename Element>
inline constexpr bool kFits =
    kSmemBytes<Element> <= kSharedBytesPerCta &&
    kStagedOutBytes <= int(sizeof(typename SharedStorage<Element>::QTile));

}  // namespace hfa::sm90::decode::mla
