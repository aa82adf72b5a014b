// Tile sizes and the shared-memory layout of the decode kernels, per cache storage format and
// head dim: Config for the tile kernel (kernel.cuh), StreamConfig for the stream kernel
// (stream_kernel.cuh).
#pragma once

#include <cstddef>

#include "quant/mxfp4.hpp"
#include "quant/nvfp4.hpp"
#include "sm90/decode/head_dim.hpp"
#include "sm90/decode/params.hpp"
#include "sm90/decode/stream_shape.hpp"

namespace hfa::sm90::decode {

// Scale rows are copied in 4-byte cp.async words: their addresses and strides must be
// multiples of this, and a row shorter than a word (MXFP4 at hdim 64: 2 bytes) reads only its
// own bytes of the word.
inline constexpr int kScaleWordBytes = 4;

// Codes are copied in 16-byte chunks: one cp.async, one ldmatrix row.
inline constexpr int kChunkBytes = 16;

// Hopper's shared memory: 228 KB per SM, of which one CTA may take 227 KB, and 1 KB of every
// CTA's share is reserved by the system.
inline constexpr int kSmemPerSM = 228 * 1024;
inline constexpr int kMaxSmemPerBlock = 227 * 1024;
inline constexpr int kSmemReservedPerBlock = 1024;

// A stage row's entry in the tile kernel's row table: four 64-bit byte offsets (RowOffsets,
// tile_producer.cuh).
inline constexpr int kRowOffsetsBytes = 32;

// The tile shape, the same at every head dim and storage: 16 query rows (one mma.sync M) and a
// stage of 64 keys. The grid's row tiles and the splits' stages (plan.cpp) follow from it.
inline constexpr int kQueryRowsPerTile = 16;
inline constexpr int kKeysPerStage = 64;

// The head dim the kernel was tuned at (docs/decisions/028): the others scale from it.
inline constexpr int kTunedHeadDim = 128;

// CTAs per SM: two up to hdim 128 (8 warps an SM, up to 255 registers a thread). At hdim 256
// one: a bf16 stage of K and V is 64 KB and the widened FP8/FP4 tiles another 64 KB, so two
// CTAs would keep at most one stage each in flight; one CTA with the stages below keeps the
// bytes in flight per SM of hdim 128 (and its registers, twice the O accumulators, fit).
constexpr int min_blocks_per_sm(int head_dim) { return head_dim <= kTunedHeadDim ? 2 : 1; }

template <Storage kStorage, int kHeadDimension>
struct Config {
  static constexpr int kHeadDim = kHeadDimension;
  static constexpr int kRowsPerTile = kQueryRowsPerTile;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockN = kKeysPerStage;
  static constexpr int kKeysPerWarp = kBlockN / kWarps;  // each warp its own keys, own softmax state
  static constexpr int kMinBlocksPerSM = min_blocks_per_sm(kHeadDim);

  static constexpr int kElementBytes = 2;
  static constexpr int kTileRowBytes = kHeadDim * kElementBytes;  // a swizzled bf16/fp16 row
  static constexpr int kCodeRowBytes = kStorage == Storage::plain ? kTileRowBytes
                                       : kStorage == Storage::fp8 ? kHeadDim
                                                                  : kHeadDim / 2;
  // FP4 block scales per row, one byte each: NVFP4 one per 16 values, MXFP4 one per 32.
  static constexpr int kNvfp4ScaleBytes = kHeadDim / quant::kNvfp4BlockSize;
  static constexpr int kMxfp4ScaleBytes = kHeadDim / quant::kMxfp4BlockSize;
  // A row's scale bytes in shared memory, whole words: an fp32 (FP8 per token), or room for the
  // larger of the FP4 kinds (NVFP4's).
  static constexpr int kScaleRowBytes =
      kStorage == Storage::plain ? 0
      : kStorage == Storage::fp8 ? int(sizeof(float))
                                 : (kNvfp4ScaleBytes + kScaleWordBytes - 1) / kScaleWordBytes * kScaleWordBytes;

  // The stages follow from the bytes in flight: the tuned hdim 128 kernel keeps, per SM, 2 CTAs
  // × (stages − 1) stages of 64 keys: 4 stages of bf16 codes, 6 of FP8, 10 of FP4 (the smaller
  // codes need more keys in flight to keep HBM busy). Every head dim keeps the same number of
  // cache values in flight per SM: hdim 64 with twice the stages (5, 7, 11), hdim 256 with one
  // CTA and the same stages (3, 4, 6).
  static constexpr int kTunedStagesInFlightPerSM = kStorage == Storage::plain ? 4
                                                   : kStorage == Storage::fp8 ? 6
                                                                              : 10;
  static constexpr int kValuesInFlightPerSM = kTunedStagesInFlightPerSM * kBlockN * kTunedHeadDim;
  static constexpr int kStages = 1 + kValuesInFlightPerSM / (kMinBlocksPerSM * kBlockN * kHeadDim);
  static constexpr bool kDequantizes = kStorage != Storage::plain;
  // Q's mma fragments stay in registers for the whole loop up to the tuned head dim. At 256 they
  // would take 64 registers next to O's 128 and spill (255 a thread at most): each k step
  // re-reads its fragment from the Q tile instead, one more ldmatrix per K ldmatrix (ptxas: 254
  // registers, no spill, where keeping them spilled 80-148 bytes).
  static constexpr bool kQInRegisters = kHeadDim <= kTunedHeadDim;

  static constexpr int kQBytes = kRowsPerTile * kTileRowBytes;
  static constexpr int kCodeTileBytes = kBlockN * kCodeRowBytes;
  static constexpr int kScaleTileBytes = kBlockN * kScaleRowBytes;
  static constexpr int kStageBytes = 2 * (kCodeTileBytes + kScaleTileBytes);  // K then V
  static constexpr int kTileBytes = kBlockN * kTileRowBytes;
  // Per key row of each stage: byte offsets of its K and V codes and scales (RowOffsets).
  static constexpr int kRowTableBytes = kStages * kBlockN * kRowOffsetsBytes;

  static constexpr int kQOffset = 0;
  static constexpr int kStagesOffset = kQOffset + kQBytes;
  static constexpr int kDequantOffset = kStagesOffset + kStages * kStageBytes;
  static constexpr int kRowTableOffset = kDequantOffset + (kDequantizes ? 2 * kTileBytes : 0);
  static constexpr int kSmemBytes = kRowTableOffset + kRowTableBytes;

  // After the main loop the stage buffers hold each warp's partial output and LSE for the merge.
  static constexpr int kMergeOutBytes = kWarps * kRowsPerTile * kHeadDim * 4;
  static constexpr int kMergeLseBytes = kRowsPerTile * kWarps * 4;
  static_assert(kMergeOutBytes + kMergeLseBytes <= kStages * kStageBytes);
  static_assert(kSmemBytes <= kMaxSmemPerBlock);
  static_assert((kSmemBytes + kSmemReservedPerBlock) * kMinBlocksPerSM <= kSmemPerSM);
  static_assert(kStages >= 2, "one stage in flight while another is read");
};

template <Storage kStorage>
struct StreamConfig {
  static constexpr int kHeadDim = stream::kHeadDim;
  static constexpr int kRowsPerTile = stream::kRowsPerTile;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  // 16-key mma tiles a warp takes per stage: FP4 takes two, which spreads the stage's fixed
  // work (block-table reads, the softmax's shuffles, the loop) over twice the keys; FP8 keeps
  // one (its V fragments of a second tile would not fit the 128 registers).
  static constexpr int kKeyTiles = kStorage == Storage::fp4 ? 2 : 1;
  static constexpr int kWarpKeys = kKeyTiles * stream::kKeysPerWarp;
  static constexpr int kBlockN = kWarps * kWarpKeys;  // keys per pipeline stage
  static constexpr int kMinBlocksPerSM = stream::blocks_per_sm(kStorage);

  static constexpr int kCodeRowBytes = kStorage == Storage::plain ? 2 * kHeadDim
                                       : kStorage == Storage::fp8 ? kHeadDim
                                                                  : kHeadDim / 2;
  // Per row: an fp32 (FP8 per token), 8 E4M3 bytes (NVFP4) or 4 UE8M0 bytes (MXFP4).
  static constexpr int kScaleRowBytes = kStorage == Storage::plain ? 0
                                        : kStorage == Storage::fp8 ? 4
                                                                   : 8;
  // (stages - 1) stages in flight per CTA, four CTAs per SM: 100-140 KB of codes in flight.
  static constexpr int kStages = 3;

  static constexpr int kCodeTileBytes = kBlockN * kCodeRowBytes;
  static constexpr int kScaleTileBytes = kBlockN * kScaleRowBytes;
  static constexpr int kStageBytes = 2 * (kCodeTileBytes + kScaleTileBytes);  // K then V
  static constexpr int kStagesOffset = 0;  // the stages are all of its shared memory
  static constexpr int kSmemBytes = kStages * kStageBytes;

  // After the main loop the stage buffers hold each warp's partial output and LSE.
  static constexpr int kMergeOutBytes = kWarps * kRowsPerTile * kHeadDim * 4;
  static constexpr int kMergeLseBytes = kRowsPerTile * kWarps * 4;
  static_assert(kMergeOutBytes + kMergeLseBytes <= kSmemBytes);
  static_assert((kSmemBytes + kSmemReservedPerBlock) * kMinBlocksPerSM <= kSmemPerSM);
};

}  // namespace hfa::sm90::decode
