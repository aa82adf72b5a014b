// The MLA decode kernels' tiles, warp roles and shared memory (mla_kernel.cuh), every number
// named once. Absorbed MLA decode is MQA over one latent KV head: a 576-wide key row
// [latent (512) ; rotary (64)] whose first 512 columns are also the value (common/mla.hpp).
// The cache is rows of q's dtype (Cache::plain), or FlashMLA's 656-byte FP8 records
// (Cache::fp8_record, quant/mla_fp8.hpp), which the producer warpgroup dequantizes into the
// same K tile; the consumers are the same for both.
#pragma once

#include <cstdint>

#include "quant/mla_fp8.hpp"
#include "sm90/common/swizzled_tile.cuh"
#include "sm90/common/wgmma_shape.hpp"
#include "sm90/decode/mla_shape.hpp"
#include "sm90/decode/work.cuh"
#include "sm90/ptx/mbarrier.cuh"

namespace hfa::sm90::decode::mla {

static_assert(kRowsPerTile == kRowsPerWarpgroup, "the query rows are one wgmma's M");

// Two consumer warpgroups, each owning half of O's 512 columns (64 × 256 fp32: 128 registers a
// thread, the most one warpgroup can hold next to its scores). They take the tiles in pairs
// (FlashMLA's seesaw, mla_kernel.cuh): warpgroup 0 the scores of the first tile (stage 0),
// warpgroup 1 those of the second (stage 1), each a whole 64-key tile (N = 64: a wgmma reads
// Q's 2 KB and K's 2 KB in 32 tensor cycles, the shared-memory rate, where halves of 32 keys
// read 3 KB in 16), and each hands the other its P through shared memory.
inline constexpr int kConsumerWarpgroups = 2;
inline constexpr int kColumnsPerWarpgroup = kHeadDimV / kConsumerWarpgroups;  // 256: one wgmma N
inline constexpr int kTilesPerStep = kConsumerWarpgroups;
inline constexpr int kConsumerThreads = kConsumerWarpgroups * kThreadsPerWarpgroup;
inline constexpr int kConsumerWarps = kConsumerThreads / kWarpSize;
inline constexpr int kWarpsPerWarpgroup = kThreadsPerWarpgroup / kWarpSize;

// How a tile reaches its stage: as rows of q's dtype, copied by TMA, or as FlashMLA's FP8
// records, dequantized by the producer warpgroup into the same swizzled K tile.
enum class Cache { plain, fp8_record };

// One producer warpgroup after the consumers. A whole warpgroup because registers are allocated
// per warpgroup in a wgmma kernel (ptxas gave 288 threads 168 registers a thread, as it gives
// 384): the producer gives back what the consumers claim (setmaxnreg). Each kernel's split is
// its own, since its producer's work is.
inline constexpr int kProducerThreads = kThreadsPerWarpgroup;
inline constexpr int kProducerWarps = kProducerThreads / kWarpSize;
inline constexpr int kThreads = kConsumerThreads + kProducerThreads;
// Cache::plain: one warp of the producer works (its lanes read 32 page numbers at a time, lane 0
// issues the TMA copies). 56 and 224, not FlashAttention-3's 24 and 240: the producer also walks
// the CTA's pieces of a balanced schedule (a sequence's length and window, its piece of the
// part's range) and waits for a stage's two halves, which ptxas spilled at 40 registers (8 bytes
// a tile), while the consumers use 208 (the SASS's highest register, R207: O's 128, a tile's
// scores and P's operand). 56 + 2 · 224 = 3 · 168: the launch's whole file.
inline constexpr int kCopyProducerRegisters = 56;
inline constexpr int kCopyConsumerRegisters = 224;
// Cache::fp8_record: all 4 producer warps load and dequantize (below) as they walk the pieces.
// A thread holds two passes of records (36 registers) and converts one (16 values in fp32 a
// chunk, 4 chunks): ptxas spills it at 64 and 72 registers (8 bytes at 72, with the two
// halves' waits), none at 88. The consumers' wgmmas are serialized at 200 (C7512: too few
// registers beside a tile's scores and P's operand), not at 208. 88 + 2 · 208 = 3 · 168.
inline constexpr int kDequantProducerRegisters = 88;
inline constexpr int kDequantConsumerRegisters = 208;
template <Cache kCache>
inline constexpr int kProducerRegisters =
    kCache == Cache::plain ? kCopyProducerRegisters : kDequantProducerRegisters;
template <Cache kCache>
inline constexpr int kConsumerRegisters =
    kCache == Cache::plain ? kCopyConsumerRegisters : kDequantConsumerRegisters;
static_assert(register_split_fits(kThreads, kCopyProducerRegisters, kCopyConsumerRegisters,
                                  kConsumerWarpgroups));
static_assert(register_split_fits(kThreads, kDequantProducerRegisters, kDequantConsumerRegisters,
                                  kConsumerWarpgroups));

// Two K stages, one for each tile of a pair: a 576-wide tile is 72 KB, and Q (72 KB) stays for
// the whole piece, so a third does not fit in 227 KB. A piece's tile t goes to stage t % 2 (an
// odd last tile leaves stage 1 unused), so each stage counts its own uses (PairRing).
inline constexpr int kStages = kTilesPerStep;
// A tile arrives in 9 slabs of 64 columns (128-byte swizzled rows: one TMA copy each, or one
// dequantizing pass's writes), each on its own barrier, so Q·Kᵀ starts on the first slab while
// the others land.
inline constexpr int kSlabsPerTile = kHeadDimQK / kSlabColumns;
inline constexpr int kVSlabsPerWarpgroup = kColumnsPerWarpgroup / kSlabColumns;  // 4
// The rotary slab (columns 512-575) is read only by its tile's Q·Kᵀ; then it takes the tile's P
// (64 rows × 64 keys: the same 128-byte swizzled slab), for the other warpgroup's P·V.
inline constexpr int kRotarySlab = kSlabsPerTile - 1;
// A stage is given back in two halves, so that the next pair's first slabs load while this
// pair's last P·V still reads the others: the left half (V's left columns, slabs 0-3), and the
// right half (V's right columns and the rotary slab with P, slabs 4-8).
enum class StageHalf : int { left = 0, right = 1 };
inline constexpr int kStageHalves = 2;
__host__ __device__ constexpr StageHalf stage_half(int slab) {
  return slab < kVSlabsPerWarpgroup ? StageHalf::left : StageHalf::right;
}
// Whether a slab is its half's first: the producers wait for the half's release before it.
__host__ __device__ constexpr bool starts_half(int slab) {
  return slab == 0 || stage_half(slab) != stage_half(slab - 1);
}
// Who reads each half (mla_kernel.cuh) and so arrives on its empty barrier, one arrival a warp:
// stage 0's left half only warpgroup 0 (its scores and its P·V); every other half both.
__host__ __device__ constexpr uint32_t half_readers(int stage, StageHalf half) {
  return stage == 0 && half == StageHalf::left ? kWarpsPerWarpgroup : kConsumerWarps;
}

// Where a CTA's walk stands in the two stages: the parity of each stage's current use.
struct PairRing {
  uint32_t phases = 0;  // bit s: stage s
  __device__ __forceinline__ uint32_t phase(int stage) const { return phases >> stage & 1; }
  __device__ __forceinline__ void advance(int stage) { phases ^= 1u << stage; }
};

// FP8 records (Cache::fp8_record). Per token 512 e4m3 latent codes, 4 fp32 scales (one per 128
// codes) and 64 bf16 rotary values: 656 bytes, a page of 64 tokens 41,984 contiguous bytes. The
// consumers' wgmma reads 16-bit operands, so a page becomes the same bf16 K tile as a bf16
// cache's, each latent value e4m3 · scale rounded to bf16 (dequant.cuh's rule for FP8 caches;
// exact for the power-of-two scales FlashMLA's quantizer and hfa's write), the rotary copied.
//
// Where the raw page waits. Shared memory is 227 KB = 232,448 bytes; Q (73,728) + two K stages
// (147,456) + the row statistics and barriers (1,456) + the swizzle's alignment (1,024) leave
// 8,784 bytes. A raw ring fits only in place of one K stage: Q + one stage + one raw page
// (41,984) leave 40,528 bytes, too few for a second page, and a pair's two tiles would take
// turns in the one stage.
// So the consumers keep both stages, unchanged, and the raw ring is the producer warpgroup's
// registers: each of its 128 threads loads 16-byte chunks of the records (a pass: 4 chunks and
// 2 scales), dequantizes them and stores them swizzled, loading the next pass before it
// converts the current one. That is 128 · 64 bytes = 8 KB in flight per SM, which at the 13
// bytes a clock a 50-clock token needs (below) covers 630 clocks of latency: L2's, not HBM's.
// So one lane also prefetches each page into L2 kPrefetchTiles tiles ahead (one bulk prefetch
// of 41,984 bytes; 132 SMs · 3 pages = 17 MB of L2's 50).
//
// Throughput per token of a 64-row tile (one SM: 4,096 bf16 wgmma FLOP a clock; HBM's 4.3 TB/s
// over 132 SMs at 1.83 GHz: 17.8 bytes a clock): the MMAs take 64 · (576 + 512) · 2 / 4,096 =
// 34 clocks; the record's 656 bytes 37 clocks of HBM (a bf16 row's 1,152: 65); its
// dequantization (512 conversions e4m3 → f16 → f32, 512 multiplies, 256 packs to bf16x2) about
// 50 clocks of the SM's conversion throughput (FlashMLA's count for Hopper). So FP8 is
// dequantization-bound: against the bf16 cache's 65 clocks of HBM when the query rows fit one
// tile (up to 64 heads at s_q 1) it may gain up to 1.3×; with 128 heads two row tiles (two
// CTAs) dequantize each page, against bf16's 34 clocks of MMA, so it is slower (about 0.7×)
// until the two share one dequantization (FlashMLA's crossover: a cluster of two, each writing
// its half into both CTAs' shared memory).
inline constexpr int kRecordBytes = quant::kMlaRecordBytes;
inline constexpr int kPageBytes = kBlockN * kRecordBytes;  // 41,984: one L2 prefetch
inline constexpr int kPrefetchTiles = 2;
// A chunk is 16 codes of a record (one 16-byte load) and 16 bf16 values of the tile (two 16-byte
// stores). A slab row holds 64 codes: 4 lanes a row, 8 rows a warp, 32 rows a warpgroup, so a
// thread takes 2 rows of each tile (32 apart). A warp's load reads 64 contiguous bytes of each
// of 8 records; a warp's store spreads over all 32 banks (4 wavefronts for 512 bytes, the least:
// the swizzle's XOR sends the 8 rows' chunks to 8 different 16-byte places, 4 lanes each).
inline constexpr int kChunkBytes = 16;
inline constexpr int kCodesPerChunk = kChunkBytes;  // e4m3: a byte a code
inline constexpr int kLanesPerSlabRow = kSlabColumns / kCodesPerChunk;                // 4
inline constexpr int kRowsPerWarpPass = kWarpSize / kLanesPerSlabRow;                 // 8
inline constexpr int kRowsPerThread = kBlockN / (kProducerWarps * kRowsPerWarpPass);  // 2
// A pass: the latent columns of one scale (128: two slabs) of the thread's 2 rows, or the
// rotary slab of those rows (128 bytes a row: 8 chunks, 2 a lane); 4 latent passes and the
// rotary pass a tile.
inline constexpr int kSlabsPerScale = quant::kMlaTile / kSlabColumns;  // 2
inline constexpr int kLatentPasses = quant::kMlaTiles;                 // 4
inline constexpr int kPasses = kLatentPasses + 1;
static_assert(kSlabsPerScale * kLanesPerSlabRow * kChunkBytes == quant::kMlaRopeDim * 2,
              "a rotary row is as many chunks a lane as a latent pass's row");
static_assert(kLatentPasses * kSlabsPerScale + 1 == kSlabsPerTile,
              "4 latent passes of 2 slabs, then the rotary slab");
static_assert(kRecordBytes % kChunkBytes == 0 && quant::kMlaScaleOffset % kChunkBytes == 0 &&
                  quant::kMlaRopeOffset % kChunkBytes == 0,
              "a record's chunks are 16-byte aligned in a 16-byte aligned page");


// The epilogue stages O one warpgroup's 256 columns at a time, as fp32 rows over Q's tile (the K
// stages may already hold the next piece's tiles). The rows are padded by 8 floats: a half-warp's
// 64-bit fragment stores of 4 rows at one column then fall in different banks.
inline constexpr int kStagedRowFloats = kColumnsPerWarpgroup + 8;
// The epilogue stores each row in runs of 4 columns (one 16-byte read of the staged row): a
// warp's 32 runs are 128 consecutive columns of one row.
inline constexpr int kStoreRun = 4;

static_assert(kHeadDimQK % kSlabColumns == 0 && kHeadDimV % kSlabColumns == 0,
              "V is the first whole slabs of the K tile");

template <typename Element>
struct SharedStorage {
  using QTile = SwizzledTile<Element, kRowsPerTile, kHeadDimQK>;
  using KTile = SwizzledTile<Element, kBlockN, kHeadDimQK>;
  // P of a tile (64 rows × 64 keys), written over its stage's rotary slab.
  using PTile = SwizzledTile<Element, kRowsPerTile, kBlockN>;
  static_assert(PTile::kBytes == KTile::kSlabBytes, "P is one slab of its K tile");

  QTile q;
  KTile k[kStages];
  // Warpgroup w's running row maxima (log2 units) after its tile of a pair; at the end each
  // warpgroup's row sums.
  float row_max[kConsumerWarpgroups][kRowsPerTile];
  float row_sum[kConsumerWarpgroups][kRowsPerTile];
  float row_lse[kRowsPerTile];
  // A slab of the stage's tile landed (TMA bytes, or every dequantizing warp's arrival).
  ptx::Mbarrier k_full[kStages][kSlabsPerTile];
  // A half of the stage is no longer read (half_readers: one arrival a reading warp).
  ptx::Mbarrier k_empty[kStages][kStageHalves];
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
