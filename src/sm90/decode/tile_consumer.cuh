// The tile kernel's consumer (kernel.cuh): its warp's 16 keys of every stage against the CTA's
// 16 query rows with mma.sync m16n8k16 (rows are the mma's M), its own online softmax
// (RowSoftmax<1, 4>: a row's scores lie in lanes 4g … 4g+3), and its partial for the epilogue.
// It reads K and V as swizzled bf16/fp16 tiles: the codes of a plain cache, the producer's
// widened tiles of a quantized one (tile_producer.cuh), so every format shares this math.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/score_policy.hpp"
#include "sm90/common/math.hpp"
#include "sm90/decode/config.hpp"
#include "sm90/decode/dequant.cuh"
#include "sm90/decode/epilogue.cuh"
#include "sm90/decode/params.hpp"
#include "sm90/decode/sequence.cuh"
#include "sm90/decode/softmax.cuh"
#include "sm90/decode/tile_producer.cuh"
#include "sm90/decode/work.cuh"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/matrix_move.cuh"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/mma_sync.cuh"

namespace hfa::sm90::decode {

// mma.sync m16n8k16 and ldmatrix's 8x8 tiles: the 8s and 16s of the fragment index math.
inline constexpr int kMmaN = 8;
inline constexpr int kMmaK = 16;

// The stored column order of a tile: identity, or FP4's pair order (dequant.cuh).
template <Storage kStorage>
__device__ __forceinline__ int stored_to_column(int stored) {
  if constexpr (kStorage == Storage::fp4) return fp4_stored_to_column(stored);
  else return stored;
}

// The consumer's Q tile: the CTA's query rows (row r = query i · group + head in group, zeros
// past the last row) in the swizzled layout the K tiles have.
template <typename Element, Storage kStorage, int kHeadDim>
__device__ __forceinline__ void load_query_tile(const Params& p, const DecodeSequence& seq,
                                                int first_row, int rows, int kv_head, int b,
                                                int tid, unsigned char* q_tile) {
  using C = Config<kStorage, kHeadDim>;
  constexpr int kD = C::kHeadDim;
  constexpr int kRowBytes = C::kTileRowBytes;
  const auto* q = static_cast<const Element*>(p.q);
  for (int idx = tid; idx < C::kRowsPerTile * kD; idx += C::kThreads) {
    const int local = idx / kD, stored = idx % kD, r = first_row + local;
    Element value = ptx::to_element<Element>(0.0f);
    if (r < rows) {
      const int i = r / p.group, h = kv_head * p.group + r % p.group;
      value = q[b * p.q_batch_stride + (seq.q_begin + i) * p.q_row_stride +
                h * p.q_head_stride + stored_to_column<kStorage>(stored)];
    }
    *reinterpret_cast<Element*>(q_tile + swizzled<kRowBytes>(local, stored / 8) +
                                (stored % 8) * 2) = value;
  }
}

template <typename ElementType, Storage kStorage, int kHeadDim>
struct TileConsumer {
  using C = Config<kStorage, kHeadDim>;
  using Element = ElementType;
  using Buffers = TileBuffers<C>;
  static constexpr int kD = C::kHeadDim;
  static constexpr int kRowBytes = C::kTileRowBytes;
  static constexpr int kN = C::kBlockN;
  // Q fragments for the whole head dim, kept in registers (C::kQInRegisters), else re-read from
  // the Q tile at every k step.
  static constexpr bool kQInRegisters = C::kQInRegisters;

  const Params& p;
  const Buffers buffers;
  const LanePosition at;  // the thread's warp, lane and fragment coordinates
  const int first_tile;
  uint32_t q_frag[kQInRegisters ? kD / kMmaK : 1][4];
  float k_multiplier, v_multiplier;  // the sides' per-tensor factors (dequant.cuh)
  bool softcapped;
  // Score multiplier: log2 domain unless softcapped (the cap's tanh takes true units).
  float score_multiplier;
  policy::SoftcapLog2 softcap;  // the score policy's, applied in scale_and_mask
  bool biased;                  // ALiBi (p.alibi), after the cap
  RowBias bias[2];              // each fragment row's, where biased
  int key_lo[2], key_hi[2];     // each fragment row's visible keys (RowKeys)
  float o[kD / kMmaN][4];
  RowSoftmax<1, 4> softmax;  // a row's scores lie in lanes 4g … 4g+3
  const bool per_token;      // FP8 with a scale per token: K's multiplies the scores

  // Q's tile (every thread a share, then the CTA's barrier), its fragments, the rows' keys.
  __device__ __forceinline__ TileConsumer(const Params& params, const DecodeWork& work,
                                          unsigned char* smem)
      : p(params),
        buffers(smem),
        at(work.lane_position()),
        first_tile(work.first_tile),
        per_token(params.scale_kind == ScaleKind::fp8_per_token) {
    load_query_tile<Element, kStorage, kHeadDim>(p, work.seq, work.first_row, work.rows,
                                                 work.kv_head, work.batch, int(threadIdx.x),
                                                 buffers.q_tile);
    __syncthreads();
    if constexpr (kQInRegisters) {
#pragma unroll
      for (int ks = 0; ks < kD / kMmaK; ++ks) load_q(ks, q_frag[ks]);
    }
    k_multiplier = side_multiplier<Element>(p, p.k, work.kv_head);
    v_multiplier = side_multiplier<Element>(p, p.v, work.kv_head);
    softcapped = p.softcap > 0.0f;
    score_multiplier = softcapped ? p.softmax_scale * k_multiplier / p.softcap
                                  : p.softmax_scale * k_multiplier * kLog2e;
    softcap = policy::SoftcapLog2{p.softcap * kLog2e};
    biased = p.alibi.slopes != nullptr;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = work.first_row + at.g + 8 * half;
      const RowKeys k = work.row_keys(p, row);
      key_lo[half] = k.lo;
      key_hi[half] = k.hi;
      bias[half] = biased ? work.row_bias(p, row) : RowBias{};
    }
#pragma unroll
    for (int n = 0; n < kD / kMmaN; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  }

  // Tile t's keys, the warp's 16 of them: S = Q Kᵀ, scale, cap, mask, the online softmax, and
  // O += P V.
  __device__ __forceinline__ void consume(int t, const StageTiles& tiles) {
    const int key_base = at.warp * C::kKeysPerWarp;
    float s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
    scores(tiles.k, key_base, s);
    float tile_max[2] = {-INFINITY, -INFINITY};
    scale_and_mask(t, tiles.stage, key_base, s, tile_max);
    const bool grew = softmax.reduce_tile_max(tile_max);
    // Rescale only when some row's max grew: after the first tiles it rarely does.
    if (__any_sync(kFullWarp, grew)) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float rescale = softmax.raise_max(half, tile_max[half]);
#pragma unroll
        for (int n = 0; n < kD / kMmaN; ++n) {
          o[n][2 * half] *= rescale;
          o[n][2 * half + 1] *= rescale;
        }
      }
    }
    float p_values[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) p_values[nt][e] = softmax.probability(e / 2, s[nt][e]);
    const uint32_t p_frag[4] = {ptx::pack_pair<Element>(p_values[0][0], p_values[0][1]),
                                ptx::pack_pair<Element>(p_values[0][2], p_values[0][3]),
                                ptx::pack_pair<Element>(p_values[1][0], p_values[1][1]),
                                ptx::pack_pair<Element>(p_values[1][2], p_values[1][3])};
    accumulate_output(tiles.v, key_base, p_frag);
  }

  // The warp's normalized output and LSE per query row into the epilogue's partials.
  template <int kWarps>
  __device__ __forceinline__ void write_partial(
      const WarpPartials<kWarps, C::kRowsPerTile, kD>& partials) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      softmax.sum_lanes(half);
      const int row = at.g + 8 * half;
      const float inverse = softmax.normalizer(half);
#pragma unroll
      for (int n = 0; n < kD / kMmaN; ++n) {
        // One pointer expression: partials.row(warp, row) + n * 8 + 2 * c changes the SASS.
        float* dst = partials.out + (at.warp * C::kRowsPerTile + row) * kD + n * 8 + 2 * at.c;
        dst[0] = o[n][2 * half] * inverse;
        dst[1] = o[n][2 * half + 1] * inverse;
      }
      if (at.c == 0) partials.set_lse(at.warp, row, softmax.lse(half));
    }
  }

  // The head dim a stored column holds (the epilogue's un-permutation).
  __device__ __forceinline__ static int column_of(int stored) {
    return stored_to_column<kStorage>(stored);
  }

 private:
  // Q's A fragment of k step ks, from the Q tile.
  __device__ __forceinline__ void load_q(int ks, uint32_t (&frag)[4]) const {
    const int m = at.lane / 8;
    const int row = at.lane % 8 + (m % 2) * 8;
    ptx::ldmatrix_x4(ptx::smem_address(buffers.q_tile + swizzled<kRowBytes>(row, 2 * ks + m / 2)),
                     frag);
  }
  // S = Q Kᵀ for the warp's 16 keys: two 16x8 tiles.
  __device__ __forceinline__ void scores(const unsigned char* k_tile, int key_base,
                                         float (&s)[2][4]) const {
#pragma unroll
    for (int ks = 0; ks < kD / kMmaK; ++ks) {
      const int m = at.lane / 8;
      uint32_t kf[4];
      ptx::ldmatrix_x4(ptx::smem_address(k_tile + swizzled<kRowBytes>(
                                                      key_base + (m / 2) * 8 + at.lane % 8,
                                                      2 * ks + m % 2)),
                       kf);
      uint32_t qf[4];
      if constexpr (kQInRegisters) {
#pragma unroll
        for (int r = 0; r < 4; ++r) qf[r] = q_frag[ks][r];
      } else {
        load_q(ks, qf);
      }
      ptx::mma_16816<Element>(s[0], qf, kf[0], kf[1]);
      ptx::mma_16816<Element>(s[1], qf, kf[2], kf[3]);
    }
  }

  // Scale, cap, mask; the tile's max per fragment row.
  __device__ __forceinline__ void scale_and_mask(int t, int stage, int key_base, float (&s)[2][4],
                                                 float (&tile_max)[2]) const {
    const int key0 = (first_tile + t) * kN + key_base;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int local = nt * 8 + 2 * at.c + (e % 2);
        const int key = key0 + local;
        const int half = e / 2;
        float x = s[nt][e] * score_multiplier;
        if (kStorage == Storage::fp8 && per_token)
          x *= reinterpret_cast<const float*>(buffers.k_scales(stage))[key_base + local];
        if (key < key_lo[half] || key > key_hi[half]) x = -INFINITY;
        s[nt][e] = x;
        tile_max[half] = fmaxf(tile_max[half], x);
      }
    }
    if (softcapped || biased) {  // uniform: the common path issues no tanh and no bias
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (s[nt][e] == -INFINITY) continue;  // masked scores stay -inf
          if (softcapped) s[nt][e] = softcap.score(s[nt][e]);
          if (biased) s[nt][e] = bias[e / 2].score(s[nt][e], key0 + nt * 8 + 2 * at.c + e % 2);
        }
      tile_max[0] = tile_max[1] = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
    }
  }

  // O += P V for the warp's 16 keys, 16 columns per ldmatrix.
  __device__ __forceinline__ void accumulate_output(const unsigned char* v_tile, int key_base,
                                                    const uint32_t (&p_frag)[4]) {
#pragma unroll
    for (int np = 0; np < kD / kMmaK; ++np) {
      const int m = at.lane / 8;
      uint32_t vf[4];
      ptx::ldmatrix_x4_trans(ptx::smem_address(v_tile + swizzled<kRowBytes>(
                                                            key_base + (m % 2) * 8 + at.lane % 8,
                                                            2 * np + m / 2)),
                             vf);
      ptx::mma_16816<Element>(o[2 * np], p_frag, vf[0], vf[1]);
      ptx::mma_16816<Element>(o[2 * np + 1], p_frag, vf[2], vf[3]);
    }
  }
};

}  // namespace hfa::sm90::decode
