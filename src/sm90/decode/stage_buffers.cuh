// The pipeline stages in a decode kernel's shared memory, the same for every producer: stage s
// holds K's codes, V's codes, K's scales and V's scales of its keys, in that order, at
// C::kStagesOffset + s · C::kStageBytes (config.hpp sizes each part per storage format).
#pragma once

namespace hfa::sm90::decode {

template <typename C>
struct StageBuffers {
  unsigned char* const base;  // the dynamic shared memory

  __device__ __forceinline__ explicit StageBuffers(unsigned char* smem) : base(smem) {}

  __device__ __forceinline__ unsigned char* stage(int s) const {
    return base + C::kStagesOffset + s * C::kStageBytes;
  }
  __device__ __forceinline__ unsigned char* k_codes(int s) const { return stage(s); }
  __device__ __forceinline__ unsigned char* v_codes(int s) const {
    return stage(s) + C::kCodeTileBytes;
  }
  __device__ __forceinline__ unsigned char* k_scales(int s) const {
    return stage(s) + 2 * C::kCodeTileBytes;
  }
  __device__ __forceinline__ unsigned char* v_scales(int s) const {
    return stage(s) + 2 * C::kCodeTileBytes + C::kScaleTileBytes;
  }
};

}  // namespace hfa::sm90::decode
