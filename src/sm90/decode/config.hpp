// Tile sizes and the shared-memory layout of the decode kernel, per cache storage format.
#pragma once

#include <cstddef>

#include "sm90/decode/params.hpp"

// A lever, off by default and never run on a GPU yet (a build switch, as the forward's): the row
// table holds each key row's global addresses (a row past the keys flagged in bit 0) instead of
// offsets, about 11 instead of 26 instructions per two 16-byte copies (a third of the bf16 loop);
// warp tiles that every row sees whole skip the mask; NVFP4 converts its two scale bytes at once.
#ifndef HFA_SM90_DECODE_LEAN_COPY
#define HFA_SM90_DECODE_LEAN_COPY 0
#endif

namespace hfa::sm90::decode {

inline constexpr bool kLeanCopy = HFA_SM90_DECODE_LEAN_COPY != 0;

template <Storage kStorage>
struct Config {
  static constexpr int kHeadDim = 128;
  static constexpr int kRowsPerTile = 16;   // query rows: one mma.sync M
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kKeysPerWarp = 16;   // each warp its own keys, own softmax state
  static constexpr int kBlockN = kWarps * kKeysPerWarp;  // keys per pipeline stage
  static constexpr int kMinBlocksPerSM = 2;  // 8 warps and 2·(stages-1) tiles in flight per SM

  static constexpr int kElementBytes = 2;
  static constexpr int kTileRowBytes = kHeadDim * kElementBytes;  // 256: a swizzled bf16/fp16 row
  static constexpr int kCodeRowBytes = kStorage == Storage::plain ? kTileRowBytes
                                       : kStorage == Storage::fp8 ? kHeadDim
                                                                  : kHeadDim / 2;
  // Per row: an fp32 (FP8 per token), 8 E4M3 bytes (NVFP4), 4 UE8M0 bytes (MXFP4).
  static constexpr int kScaleRowBytes = kStorage == Storage::plain ? 0
                                        : kStorage == Storage::fp8 ? 4
                                                                   : 8;
  // Enough stages that (stages - 1) tiles of codes are in flight: ~64 KB per SM for bf16,
  // more tiles for the smaller codes.
  static constexpr int kStages = kStorage == Storage::plain ? 3 : kStorage == Storage::fp8 ? 4 : 6;
  static constexpr bool kDequantizes = kStorage != Storage::plain;

  static constexpr int kQBytes = kRowsPerTile * kTileRowBytes;
  static constexpr int kCodeTileBytes = kBlockN * kCodeRowBytes;
  static constexpr int kScaleTileBytes = kBlockN * kScaleRowBytes;
  static constexpr int kStageBytes = 2 * (kCodeTileBytes + kScaleTileBytes);  // K then V
  static constexpr int kTileBytes = kBlockN * kTileRowBytes;
  // Per key row of each stage: byte offsets of its K and V codes and scales (RowOffsets).
  static constexpr int kRowTableBytes = kStages * kBlockN * 32;

  static constexpr int kQOffset = 0;
  static constexpr int kStagesOffset = kQOffset + kQBytes;
  static constexpr int kDequantOffset = kStagesOffset + kStages * kStageBytes;
  static constexpr int kRowTableOffset = kDequantOffset + (kDequantizes ? 2 * kTileBytes : 0);
  static constexpr int kSmemBytes = kRowTableOffset + kRowTableBytes;

  // After the main loop the stage buffers hold each warp's partial output and LSE for the merge.
  static constexpr int kMergeOutBytes = kWarps * kRowsPerTile * kHeadDim * 4;
  static constexpr int kMergeLseBytes = kRowsPerTile * kWarps * 4;
  static_assert(kMergeOutBytes + kMergeLseBytes <= kStages * kStageBytes);
  static_assert(kSmemBytes * kMinBlocksPerSM <= 227 * 1024);
};

}  // namespace hfa::sm90::decode
