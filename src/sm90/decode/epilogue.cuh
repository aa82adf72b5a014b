// The end of a decode CTA, the same for every consumer: each warp's partial (its own keys'
// normalized output and LSE, which the consumer writes in its fragment layout) in shared memory,
// merged per query row (combine_splits), then the row's output and LSE to out and lse (one
// split) or to the split's partial, which the combine kernel (combine_kernel.cuh) merges. The
// warp-specialized kernel (MLA's) has each row whole in one CTA: store_piece_row writes it, to
// the partial of either scheduler part (work.cuh's PartialRows).
#pragma once

#include <cstdint>

#include "common/combine_splits.hpp"
#include "sm90/decode/params.hpp"
#include "sm90/decode/sequence.cuh"
#include "sm90/decode/work.cuh"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90::decode {

// The warps' partials in the stage buffers after the main loop: out (warp, row, stored column)
// and lse (row, warp).
template <int kWarps, int kRows, int kHeadDim>
struct WarpPartials {
  float* out;
  float* lse;

  __device__ __forceinline__ explicit WarpPartials(unsigned char* stage_buffers)
      : out(reinterpret_cast<float*>(stage_buffers)), lse(out + kWarps * kRows * kHeadDim) {}
  __device__ __forceinline__ float* row(int warp, int r) const {
    return out + (warp * kRows + r) * kHeadDim;
  }
  __device__ __forceinline__ void set_lse(int warp, int r, float value) const {
    lse[r * kWarps + warp] = value;
  }
};

// Columns first … first + kColumns - 1 of row i of query head h (stored order: column_of maps
// a stored column to the head dim it holds), times v_multiplier (V's per-tensor factor).
template <typename Element, int kHeadDim, int kColumns, typename ColumnOf>
__device__ __forceinline__ void store_row(const Params& p, const DecodeSequence& seq, int b, int h,
                                          int i, int split, int first,
                                          const float (&merged)[kColumns], float lse,
                                          float v_multiplier, ColumnOf column_of) {
  const int64_t token = seq.q_begin + i;
  const int64_t row_id = query_row_id(p, b, h, token);
  if (p.num_splits == 1) {
    Element* out = static_cast<Element*>(p.out) + b * p.out_batch_stride +
                   token * p.out_row_stride + h * p.out_head_stride;
#pragma unroll
    for (int k = 0; k < kColumns; ++k)
      out[column_of(first + k)] = ptx::to_element<Element>(merged[k] * v_multiplier);
    if (p.lse != nullptr && first == 0) p.lse[row_id] = lse;
  } else {
    float* partial = p.partial_out + (int64_t(split) * p.rows_total + row_id) * kHeadDim;
#pragma unroll
    for (int k = 0; k < kColumns; ++k) partial[column_of(first + k)] = merged[k] * v_multiplier;
    if (first == 0) p.partial_lse[row_id * p.num_splits + split] = lse;
  }
}

// Columns first … first + kColumns − 1 of query row r (of the piece's kv-head) of a piece of
// work (work.cuh): to out and lse (the LSE with column 0) when the piece holds all the row's
// keys, else to the piece's partial (PartialRows).
template <typename Element, int kHeadDim, int kColumns>
__device__ __forceinline__ void store_piece_row(const Params& p, const DecodeWork& w,
                                                const PartialRows& partial, int r, int first,
                                                const float (&values)[kColumns], float lse) {
  const int i = r / p.group, h = w.kv_head * p.group + r % p.group;
  if (partial.out == nullptr) {
    const int64_t token = w.seq.q_begin + i;
    Element* out = static_cast<Element*>(p.out) + w.batch * p.out_batch_stride +
                   token * p.out_row_stride + h * p.out_head_stride + first;
#pragma unroll
    for (int k = 0; k < kColumns; ++k) out[k] = ptx::to_element<Element>(values[k]);
    if (p.lse != nullptr && first == 0) p.lse[query_row_id(p, w.batch, h, token)] = lse;
  } else {
    const int64_t row = partial.first_row + h * partial.head_stride + i;
    float* out = partial.out + row * kHeadDim + first;
#pragma unroll
    for (int k = 0; k < kColumns; ++k) out[k] = values[k];
    if (first == 0) partial.lse[row * partial.lse_stride] = lse;
  }
}

// After the warps wrote their partials: thread t merges kHeadDim · kRows / kThreads columns of
// one row and stores them (rows past the sequence's skip). The work's fields come one by one:
// passing the DecodeWork itself changes the stream kernel's SASS (its loop's phi order).
template <typename Element, int kHeadDim, int kRows, int kWarps, int kThreads, typename ColumnOf>
__device__ __forceinline__ void merge_warps_and_store(
    const Params& p, const DecodeSequence& seq, int b, int kv_head, int first_row, int rows,
    int split, const WarpPartials<kWarps, kRows, kHeadDim>& partials, float v_multiplier,
    ColumnOf column_of) {
  constexpr int kColumns = kRows * kHeadDim / kThreads;
  const int row = int(threadIdx.x) / (kHeadDim / kColumns);
  const int first = (int(threadIdx.x) % (kHeadDim / kColumns)) * kColumns;
  const int r = first_row + row;
  if (r >= rows) return;
  float merged[kColumns];
  // lse is in the units of the scores the tile saw; softcap's tanh already used true units.
  const float lse =
      detail::combine_splits(partials.lse + row * kWarps, partials.out + row * kHeadDim + first,
                             kRows * kHeadDim, kWarps, kColumns, merged);
  store_row<Element, kHeadDim>(p, seq, b, kv_head * p.group + r % p.group, r / p.group, split,
                               first, merged, lse, v_multiplier, column_of);
}

}  // namespace hfa::sm90::decode
