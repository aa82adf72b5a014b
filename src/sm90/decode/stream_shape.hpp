// The stream kernel's shape and the calls it takes: what the host's planning (plan.cpp: the
// split count) and the launch agree on, and what stream_kernel.cuh is compiled for.
#pragma once

#include "common/kvcache_problem.hpp"
#include "sm90/decode/params.hpp"

namespace hfa::sm90::decode::stream {

inline constexpr int kHeadDim = 128;      // the one head dim its fragments are written for
inline constexpr int kKeysPerWarp = 16;   // one mma M tile of keys per warp per stage
inline constexpr int kRowsPerTile = 8;    // query rows: one mma N tile

// CTAs per SM. Quantized: 16 warps per SM, enough independent chains (copy, widen, mma,
// softmax) to keep every scheduler issuing while the codes stream in; 128 registers a thread.
// Plain: the 32 KB stages of 16-bit rows leave room for two CTAs.
constexpr int blocks_per_sm(Storage storage) { return storage == Storage::plain ? 2 : 4; }

// The CTAs per SM the split count aims to fill. FP4 is bound by instruction issue: every CTA the
// SM can hold adds warps that issue. Plain and FP8 stream at the cache's speed with two CTAs an
// SM: more splits would only add partials to write and merge. (H200, batch 4 at 32k, 8 against
// 15 splits: FP8 0.086 against 0.095 ms, NVFP4 0.146 against 0.105 ms.)
constexpr int planned_blocks_per_sm(Storage storage) {
  return storage == Storage::fp4 ? blocks_per_sm(storage) : 2;
}

// The stream kernel takes caches whose kv-head has at most 8 query rows (group · seqlen_q,
// `rows`) and whose pages hold whole 16-key tiles (contiguous caches, page sizes that are
// multiples of 16), at kHeadDim. HFA_SM90_DECODE_STREAM=0 sends every call to the tile kernel
// (to measure one against the other).
bool takes(const detail::KVCacheProblem& problem, int rows);

}  // namespace hfa::sm90::decode::stream

namespace hfa::sm90::decode {

inline Storage storage_of(detail::CacheFormat format) {
  switch (format) {
    case detail::CacheFormat::plain: return Storage::plain;
    case detail::CacheFormat::fp8_per_head:
    case detail::CacheFormat::fp8_per_token: return Storage::fp8;
    default: return Storage::fp4;
  }
}

}  // namespace hfa::sm90::decode
