// The end of a decode CTA for one query row: its merged output columns and LSE go to out and lse
// (one split), or to the split's partial for the combine kernel. Shared by both decode kernels.
#pragma once

#include <cstdint>

#include "sm90/decode/params.hpp"
#include "sm90/decode/sequence.cuh"
#include "sm90/decode/warp_mma.cuh"

namespace hfa::sm90::decode {

// Columns first … first + kColumns - 1 of row i of query head h (stored order: column_of maps
// a stored column to the head dim it holds), times v_multiplier (V's per-tensor factor).
template <typename Element, int kHeadDim, int kColumns, typename ColumnOf>
__device__ __forceinline__ void store_row(const Params& p, const DecodeSequence& seq, int b, int h,
                                          int i, int split, int first, const float (&merged)[kColumns],
                                          float lse, float v_multiplier, ColumnOf column_of) {
  const int64_t token = seq.q_begin + i;
  const int64_t row_id = query_row_id(p, b, h, token);
  if (p.num_splits == 1) {
    Element* out = static_cast<Element*>(p.out) + b * p.out_batch_stride + token * p.out_row_stride +
                   h * p.out_head_stride;
#pragma unroll
    for (int k = 0; k < kColumns; ++k) out[column_of(first + k)] = float_to_element<Element>(merged[k] * v_multiplier);
    if (p.lse != nullptr && first == 0) p.lse[row_id] = lse;
  } else {
    float* partial = p.partial_out + (int64_t(split) * p.rows_total + row_id) * kHeadDim;
#pragma unroll
    for (int k = 0; k < kColumns; ++k) partial[column_of(first + k)] = merged[k] * v_multiplier;
    if (first == 0) p.partial_lse[row_id * p.num_splits + split] = lse;
  }
}

}  // namespace hfa::sm90::decode
