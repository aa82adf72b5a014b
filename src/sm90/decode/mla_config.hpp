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
// gives 384): the producer then gives back what the consumers claim (setmaxnreg), 24 and 240,
// the split FlashAttention-3 uses for two consumer warpgroups.
inline constexpr int kProducerThreads = kThreadsPerWarpgroup;
inline constexpr int kThreads = kConsumerThreads + kProducerThreads;
inline constexpr int kProducerRegisters = 24;
inline constexpr int kConsumerRegisters = 240;
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

// The staged fp32 output rows (the epilogue's, over the idle K stages) are padded by 8 floats:
// the fragment's stores of 8 rows at one column then fall in different banks.
inline constexpr int kStagedRowFloats = kHeadDimV + 8;
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

// The final rows, fp32 (normalized output, or the split's partial), staged over the K stages.
inline constexpr int kStagedOutBytes = kRowsPerTile * kStagedRowFloats * int(sizeof(float));

template <typename Element>
inline constexpr int kSmemBytes = kSharedBytes<SharedStorage<Element>>;

template <typename Element>
inline constexpr bool kFits =
    kSmemBytes<Element> <= kSharedBytesPerCta &&
    kStagedOutBytes <= int(sizeof(typename SharedStorage<Element>::KTile)) * kStages;

}  // namespace hfa::sm90::decode::mla
