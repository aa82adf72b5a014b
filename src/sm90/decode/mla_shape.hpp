// The MLA decode kernel's shape as the host's planning (plan.cpp: support, split count) and the
// kernel (mla_config.hpp, mla_kernel.cuh) agree on it. Host-safe: no CUDA headers.
#pragma once

#include <cstdint>

#include "common/mla.hpp"

namespace hfa::sm90::decode::mla {

inline constexpr int kHeadDimQK = detail::kMlaHeadDimQK;  // 576: latent 512 + rotary 64
inline constexpr int kHeadDimV = detail::kMlaHeadDimV;    // 512: the latent columns

// One K tile is exactly one page of 64 tokens (FlashMLA's page size), so a tile's rows are one
// TMA box of one page found through the block table; other page sizes are refused (plan.cpp).
inline constexpr int kPageSize = 64;
inline constexpr int kBlockN = kPageSize;

// The query rows of one kv-head (seqlen_q · group of them, token-major: row = token · group +
// head in group) are the M of one wgmma: 64 rows a CTA, so 16 heads × 4 tokens or 64 heads × 1
// share every K byte; 128 heads take two row tiles.
inline constexpr int kRowsPerTile = 64;

// One CTA an SM: Q and two K stages take 216 KB of shared memory.
inline constexpr int kBlocksPerSm = 1;

constexpr int64_t row_tiles(int64_t rows) { return (rows + kRowsPerTile - 1) / kRowsPerTile; }

}  // namespace hfa::sm90::decode::mla
