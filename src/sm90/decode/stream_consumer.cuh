// The stream kernel's consumer (stream_kernel.cuh): Sᵀ = K·Qᵀ and Oᵀ = Vᵀ·Pᵀ with mma.sync
// m16n8k16, 16 keys as the mma's M and the ≤ 8 query rows as its N, so that a GQA group of 4-8
// heads pays for no padding rows. Each lane reads whole chunks of its own cache rows from the
// staged codes and widens them straight into A fragments, or ldmatrix reads them for a plain
// cache (stream_fragments.cuh); Pᵀ comes from the score accumulators by an 8x8 transpose
// (movmatrix). The online softmax is RowSoftmax<4, 32>: a row's scores lie in lanes c, c + 4, …
// c + 28.
//
// FP8 runs the mma in fp16 whatever q's dtype: E4M3 widens to f16 exactly in one instruction per
// pair, where bf16 would take four. A bf16 q is scaled by a power of two so that its largest
// value sits in [2^14, 2^15) (exact for every value above 2^-28 of the largest; the scores get
// the power back in fp32). The per-token V scale multiplies P instead of V, relative to the
// largest scale exponent seen so far (rescaled like the running max), so P · scale stays in
// fp16's range whatever the scales. FP4 widens into q's dtype as the tile kernel does.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/score_policy.hpp"
#include "sm90/common/math.hpp"
#include "sm90/decode/config.hpp"
#include "sm90/decode/dequant.cuh"
#include "sm90/decode/epilogue.cuh"
#include "sm90/decode/params.hpp"
#include "sm90/decode/softmax.cuh"
#include "sm90/decode/stream_fragments.cuh"
#include "sm90/decode/stream_producer.cuh"
#include "sm90/decode/work.cuh"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/matrix_move.cuh"
#include "sm90/ptx/mma_sync.cuh"

namespace hfa::sm90::decode {

template <typename ElementType, Storage kStorage>
struct StreamConsumer {
  using C = StreamConfig<kStorage>;
  using Element = ElementType;
  // FP8's mma runs in fp16 (see above); the others in q's dtype.
  using Mma = std::conditional_t<kStorage == Storage::fp8, __half, Element>;
  static constexpr bool kFp8 = kStorage == Storage::fp8;
  static constexpr bool kPlain = kStorage == Storage::plain;
  static constexpr int kN = C::kBlockN;
  static constexpr int kWarpRows = C::kWarpKeys;
  static constexpr int kTileKeys = stream::kKeysPerWarp;
  // q's exponent shift for FP8: the largest |q| lands in [2^14, 2^15), within ±126.
  static constexpr int kTargetExponent = 14;
  static constexpr int kShiftLimit = 126;
  // Per-token V scales may exceed the reference by this much before it moves: P · scale ·
  // v_relative then stays under 2^14, far inside fp16's 65504.
  static constexpr float kScaleHeadroom = 16384.0f;

  const Params& p;
  const StreamBuffers<kStorage> buffers;
  const LanePosition at;  // the thread's warp, lane and fragment coordinates
  const int first_tile;
  float k_multiplier, v_multiplier;  // the sides' per-tensor factors (dequant.cuh)
  // Qᵀ as the B operand, at the dims the K fragments hold: lane (g, c) holds row g's values.
  uint32_t q_frag[stream::kKSteps][2];
  bool softcapped;
  // Score multiplier: log2 domain unless softcapped (the cap's tanh takes true units).
  float score_multiplier;
  policy::SoftcapLog2 softcap;  // the score policy's, applied in scale_and_mask
  bool biased;                  // ALiBi (p.alibi), after the cap
  RowBias bias[2];              // fragment columns 2c and 2c + 1, where biased
  int key_lo[2], key_hi[2];     // fragment columns 2c and 2c + 1: query rows
  // Oᵀ: o[mt] = {(dim 16g+2mt, row 2c), (same dim, row 2c+1), (dim +1, row 2c), (dim +1, row 2c+1)}.
  float o[stream::kDimTiles][4];
  RowSoftmax<4, kWarpSize> softmax;  // a row's scores lie in lanes c, c + 4, … c + 28
  bool per_token;
  // Per-token V: o is in units of 2^(v_exponent - 127) (a biased exponent, only ever raised)
  // and each tile's weights are P · scale · v_relative, v_relative = 2^(127 - v_exponent). The
  // first reference (0, relative 2^127) makes the first tile with a normal scale raise it.
  int v_exponent;
  float v_relative;

  __device__ __forceinline__ StreamConsumer(const Params& params, const DecodeWork& work,
                                            unsigned char* smem)
      : p(params),
        buffers(smem),
        at(work.lane_position()),
        first_tile(work.first_tile) {
    k_multiplier = side_multiplier<Element>(p, p.k, work.kv_head);
    v_multiplier = side_multiplier<Element>(p, p.v, work.kv_head);
    const int q_shift = load_query(work);  // q was multiplied by 2^q_shift (FP8's fp16 range)
    softcapped = p.softcap > 0.0f;
    const float unshift = exp2f(float(-q_shift));
    score_multiplier = softcapped ? p.softmax_scale * k_multiplier / p.softcap * unshift
                                  : p.softmax_scale * k_multiplier * kLog2e * unshift;
    softcap = policy::SoftcapLog2{p.softcap * kLog2e};
    biased = p.alibi.slopes != nullptr;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = work.first_row + 2 * at.c + h;
      const RowKeys k = work.row_keys(p, row);
      key_lo[h] = k.lo;
      key_hi[h] = k.hi;
      bias[h] = biased ? work.row_bias(p, row) : RowBias{};
    }
#pragma unroll
    for (int mt = 0; mt < stream::kDimTiles; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
    per_token = kFp8 && p.scale_kind == ScaleKind::fp8_per_token;
    v_exponent = 0;
    v_relative = exp2f(127.0f);
  }

  // Stage t of the warp: Sᵀ, scale, cap, mask, the online softmax (with the per-token V
  // reference), and Oᵀ += Vᵀ Pᵀ.
  __device__ __forceinline__ void consume(int t, const StreamStage& tiles) {
    const bool nvfp4 = p.scale_kind == ScaleKind::nvfp4;
    const int key_m_lo = stream::key_of_m(at.g), key_m_hi = stream::key_of_m(at.g + 8);  // tile-local
    const int warp_key0 = (first_tile + t) * kN + at.warp * kWarpRows;
    float s[C::kKeyTiles][4];
    scores(tiles, nvfp4, key_m_lo, key_m_hi, s);

    // Scale, cap, mask: s[kt][e] is key (e < 2 ? lo : hi) of tile kt, query row 2c + e % 2.
    float key_scale[C::kKeyTiles][2], value_scale[C::kKeyTiles][2];  // per-token FP8 K and V
    token_scales(tiles.stage, key_m_lo, key_m_hi, key_scale, value_scale);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int kt = 0; kt < C::kKeyTiles; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = warp_key0 + kt * kTileKeys + (e < 2 ? key_m_lo : key_m_hi);
        const int h = e % 2;
        float x = s[kt][e] * score_multiplier * key_scale[kt][e / 2];
        if (key < key_lo[h] || key > key_hi[h]) x = -INFINITY;
        if (softcapped && x != -INFINITY) x = softcap.score(x);
        if (biased && x != -INFINITY) x = bias[h].score(x, key);
        s[kt][e] = x;
        tile_max[h] = fmaxf(tile_max[h], x);
      }
    rescale(tile_max, value_scale);
    accumulate_output(tiles, nvfp4, s, value_scale);
  }

  // The warp's normalized output and LSE per query row into the epilogue's partials.
  template <int kWarps>
  __device__ __forceinline__ void write_partial(
      const WarpPartials<kWarps, C::kRowsPerTile, C::kHeadDim>& partials) {
    const float value_unit = per_token ? exp2f(float(v_exponent - 127)) : 1.0f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      softmax.sum_lanes(h);
      const int row = 2 * at.c + h;
      const float inverse = softmax.template normalizer<kFp8>(h, value_unit);
#pragma unroll
      for (int mt = 0; mt < stream::kDimTiles; ++mt) {
        float* dst = partials.row(at.warp, row);
        dst[stream::output_dim<kStorage>(at.g, mt, 0)] = o[mt][h] * inverse;
        dst[stream::output_dim<kStorage>(at.g, mt, 1)] = o[mt][h + 2] * inverse;
      }
      if (at.g == 0) partials.set_lse(at.warp, row, softmax.lse(h));
    }
  }

  // The partials hold the head dims in order: no un-permutation.
  __device__ __forceinline__ static int column_of(int column) { return column; }

 private:
  // Qᵀ's B fragments at the dims the K fragments hold (FP8: times 2^q_shift, fp16); q_shift.
  __device__ __forceinline__ int load_query(const DecodeWork& work) {
    int q_shift = 0;
    float values[stream::kKSteps][2][2];
    const int r = work.first_row + at.g;
    const auto* q = static_cast<const Element*>(p.q);
    const Element* q_row = q + work.batch * p.q_batch_stride +
                           (work.seq.q_begin + r / p.group) * p.q_row_stride +
                           (work.kv_head * p.group + r % p.group) * p.q_head_stride;
    float largest = 0.0f;
#pragma unroll
    for (int ks = 0; ks < stream::kKSteps; ++ks)
#pragma unroll
      for (int slot = 0; slot < 2; ++slot)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int dim = kPlain ? stream::plain_q_dim(at.c, ks, slot, e)
                          : kFp8 ? stream::fp8_q_dim(at.c, ks, slot, e)
                                 : stream::fp4_q_dim(at.c, ks, slot, e);
          const float x = r < work.rows ? static_cast<float>(q_row[dim]) : 0.0f;
          values[ks][slot][e] = x;
          largest = fmaxf(largest, fabsf(x));
        }
    if constexpr (kFp8) {
      // Non-negative floats order as their bit patterns; inf and NaN keep the shift at 0.
      const uint32_t bits = __reduce_max_sync(kFullWarp, __float_as_uint(largest));
      if (bits != 0 && bits < 0x7f800000u)
        q_shift = max(-kShiftLimit, min(kShiftLimit, kTargetExponent - (int(bits >> 23) - 127)));
    }
    const float q_multiplier = exp2f(float(q_shift));
#pragma unroll
    for (int ks = 0; ks < stream::kKSteps; ++ks)
#pragma unroll
      for (int slot = 0; slot < 2; ++slot)
        q_frag[ks][slot] = ptx::pack_pair<Mma>(values[ks][slot][0] * q_multiplier,
                                               values[ks][slot][1] * q_multiplier);
    return q_shift;
  }

  // Sᵀ = K Qᵀ for each of the warp's 16-key tiles, widened a k step at a time. Two accumulators
  // a tile (even and odd k steps) halve its chain of dependent mma: that latency, not the mma
  // count, is what the rest of the stage waits for.
  __device__ __forceinline__ void scores(const StreamStage& tiles, bool nvfp4, int key_m_lo,
                                         int key_m_hi, float (&s)[C::kKeyTiles][4]) const {
#pragma unroll
    for (int kt = 0; kt < C::kKeyTiles; ++kt) {
      const int row_lo = at.warp * kWarpRows + kt * kTileKeys + key_m_lo;
      const int row_hi = at.warp * kWarpRows + kt * kTileKeys + key_m_hi;
      float even[4] = {0.0f, 0.0f, 0.0f, 0.0f}, odd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if constexpr (kPlain) {
        const int row = at.warp * kWarpRows + kt * kTileKeys + stream::key_of_m(stream::plain_k_m(at.lane));
#pragma unroll
        for (int ks = 0; ks < stream::kKSteps; ++ks) {
          uint32_t a[4];
          ptx::ldmatrix_x4(ptx::smem_address(tiles.k + buffers.k_chunk_offset(row, 2 * ks + stream::plain_k_chunk(at.lane))), a);
          ptx::mma_16816<Mma>(ks % 2 == 0 ? even : odd, a, q_frag[ks][0], q_frag[ks][1]);
        }
      } else if constexpr (kFp8) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint4 lo = *reinterpret_cast<const uint4*>(tiles.k + buffers.k_chunk_offset(row_lo, at.c + 4 * h));
          const uint4 hi = *reinterpret_cast<const uint4*>(tiles.k + buffers.k_chunk_offset(row_hi, at.c + 4 * h));
          const uint32_t lo_words[4] = {lo.x, lo.y, lo.z, lo.w}, hi_words[4] = {hi.x, hi.y, hi.z, hi.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int ks = 4 * h + j;
            uint32_t a[4];
            stream::fp8_k_step(lo_words[j], hi_words[j], a);
            ptx::mma_16816<Mma>(ks % 2 == 0 ? even : odd, a, q_frag[ks][0], q_frag[ks][1]);
          }
        }
      } else {
        const uint4 lo = *reinterpret_cast<const uint4*>(tiles.k + buffers.k_chunk_offset(row_lo, at.c));
        const uint4 hi = *reinterpret_cast<const uint4*>(tiles.k + buffers.k_chunk_offset(row_hi, at.c));
        const uint32_t lo_words[4] = {lo.x, lo.y, lo.z, lo.w}, hi_words[4] = {hi.x, hi.y, hi.z, hi.w};
        const unsigned char* scales = buffers.k_scales(tiles.stage);
        uint32_t lo_multiplier[2], hi_multiplier[2];  // per 16 dims (NVFP4) or 32 (MXFP4)
        if (nvfp4) {
          nvfp4_block_multipliers<Element>(*reinterpret_cast<const uint16_t*>(scales + row_lo * C::kScaleRowBytes + 2 * at.c),
                                           lo_multiplier[0], lo_multiplier[1]);
          nvfp4_block_multipliers<Element>(*reinterpret_cast<const uint16_t*>(scales + row_hi * C::kScaleRowBytes + 2 * at.c),
                                           hi_multiplier[0], hi_multiplier[1]);
        } else {
          lo_multiplier[0] = lo_multiplier[1] = mxfp4_block_multiplier<Element>(scales[row_lo * C::kScaleRowBytes + at.c]);
          hi_multiplier[0] = hi_multiplier[1] = mxfp4_block_multiplier<Element>(scales[row_hi * C::kScaleRowBytes + at.c]);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t a[2][4];
          stream::fp4_k_steps<Element>(lo_words[j], hi_words[j], lo_multiplier[j / 2], hi_multiplier[j / 2], a);
          ptx::mma_16816<Mma>(even, a[0], q_frag[2 * j][0], q_frag[2 * j][1]);
          ptx::mma_16816<Mma>(odd, a[1], q_frag[2 * j + 1][0], q_frag[2 * j + 1][1]);
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) s[kt][e] = even[e] + odd[e];
    }
  }

  // FP8 per-token scales of the lane's keys (1 otherwise).
  __device__ __forceinline__ void token_scales(int stage, int key_m_lo, int key_m_hi,
                                               float (&key_scale)[C::kKeyTiles][2],
                                               float (&value_scale)[C::kKeyTiles][2]) const {
#pragma unroll
    for (int kt = 0; kt < C::kKeyTiles; ++kt) {
      const int row_lo = at.warp * kWarpRows + kt * kTileKeys + key_m_lo;
      const int row_hi = at.warp * kWarpRows + kt * kTileKeys + key_m_hi;
      key_scale[kt][0] = key_scale[kt][1] = value_scale[kt][0] = value_scale[kt][1] = 1.0f;
      if (per_token) {
        const float* k_token = reinterpret_cast<const float*>(buffers.k_scales(stage));
        const float* v_token = reinterpret_cast<const float*>(buffers.v_scales(stage));
        key_scale[kt][0] = k_token[row_lo];
        key_scale[kt][1] = k_token[row_hi];
        value_scale[kt][0] = v_token[row_lo];
        value_scale[kt][1] = v_token[row_hi];
      }
    }
  }

  // The running max of the rows, and the per-token V reference: O and the sums rescaled when
  // either grew; the stage's V scales then taken relative to the reference.
  __device__ __forceinline__ void rescale(float (&tile_max)[2],
                                          float (&value_scale)[C::kKeyTiles][2]) {
    bool grew = softmax.reduce_tile_max(tile_max);
    // Per-token V: each scale times 2^(127 - v_exponent) must stay below kScaleHeadroom (P · that
    // then fits fp16 with room to spare). Only when one does not (the first tile, and a scale
    // far above all before it) is the reference moved up to the warp's largest exponent, o
    // rescaled with it; the common tile pays one compare per scale.
    float exponent_rescale = 1.0f;
    bool exponent_grew = false;
    if (per_token) {
#pragma unroll
      for (int kt = 0; kt < C::kKeyTiles; ++kt)
#pragma unroll
        for (int k = 0; k < 2; ++k) exponent_grew |= !(value_scale[kt][k] * v_relative < kScaleHeadroom);
      grew |= exponent_grew;
    }
    // Rescale only when some row's max (or the V reference) grew: after the first tiles it rarely does.
    if (__any_sync(kFullWarp, grew)) {
      if (__any_sync(kFullWarp, exponent_grew)) {
        constexpr int kExponentShift = 23;
        constexpr uint32_t kExponentMask = 0xff;
        uint32_t largest = 0;
#pragma unroll
        for (int kt = 0; kt < C::kKeyTiles; ++kt)
#pragma unroll
          for (int k = 0; k < 2; ++k)
            largest = max(largest, (__float_as_uint(value_scale[kt][k]) >> kExponentShift) & kExponentMask);
        const int stage_exponent = int(__reduce_max_sync(kFullWarp, largest));
        if (stage_exponent > v_exponent) {
          exponent_rescale = exp2f(float(v_exponent - stage_exponent));
          v_exponent = stage_exponent;
          v_relative = exp2f(float(127 - v_exponent));  // each scale of the tile · this ≤ 2
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float rescale = softmax.raise_max(h, tile_max[h]);
#pragma unroll
        for (int mt = 0; mt < stream::kDimTiles; ++mt) {
          o[mt][h] *= rescale * exponent_rescale;
          o[mt][h + 2] *= rescale * exponent_rescale;
        }
      }
    }
    if (per_token) {
#pragma unroll
      for (int kt = 0; kt < C::kKeyTiles; ++kt) {
        value_scale[kt][0] *= v_relative;
        value_scale[kt][1] *= v_relative;
      }
    }
  }

  // Oᵀ += Vᵀ Pᵀ for each of the warp's tiles.
  __device__ __forceinline__ void accumulate_output(const StreamStage& tiles, bool nvfp4,
                                                    const float (&s)[C::kKeyTiles][4],
                                                    const float (&value_scale)[C::kKeyTiles][2]) {
#pragma unroll
    for (int kt = 0; kt < C::kKeyTiles; ++kt) {
      float weight[4];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        weight[e] = softmax.probability(e % 2, s[kt][e]) * value_scale[kt][e / 2];
      // Pᵀ as the B operand: the accumulator's 8x8 halves transposed (keys become its k).
      const uint32_t p_lo = ptx::movmatrix_trans(ptx::pack_pair<Mma>(weight[0], weight[1]));
      const uint32_t p_hi = ptx::movmatrix_trans(ptx::pack_pair<Mma>(weight[2], weight[3]));

      // Oᵀ += Vᵀ Pᵀ over the 8 dim tiles, the lane's V keys 4c … 4c+3 of tile kt.
      const int v_row0 = at.warp * kWarpRows + kt * kTileKeys + 4 * at.c;
      uint32_t a[stream::kDimTiles][4];
      if constexpr (kPlain) {
        const int row = at.warp * kWarpRows + kt * kTileKeys + stream::key_of_m(stream::plain_v_m(at.lane));
#pragma unroll
        for (int mt = 0; mt < stream::kDimTiles; ++mt)
          ptx::ldmatrix_x4_trans(ptx::smem_address(tiles.v + buffers.v_chunk_offset(row, 2 * mt + stream::plain_v_chunk(at.lane))), a[mt]);
      } else if constexpr (kFp8) {
        uint4 words[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
          words[j] = *reinterpret_cast<const uint4*>(tiles.v + buffers.v_chunk_offset(v_row0 + j, at.g));
        stream::fp8_v_fragments(words, a);
      } else {
        uint2 words[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
          words[j] = *reinterpret_cast<const uint2*>(tiles.v + buffers.v_chunk_offset(v_row0 + j, at.g / 2) + (at.g % 2) * 8);
        const unsigned char* scales = buffers.v_scales(tiles.stage);
        uint32_t multiplier[2];
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) {
          const unsigned char* first = scales + (v_row0 + 2 * pair) * C::kScaleRowBytes;
          const unsigned char* second = first + C::kScaleRowBytes;
          multiplier[pair] = nvfp4 ? stream::nvfp4_pair_multiplier<Element>(first[at.g], second[at.g])
                                   : stream::mxfp4_pair_multiplier<Element>(first[at.g / 2], second[at.g / 2]);
        }
        stream::fp4_v_fragments<Element>(words, multiplier, a);
      }
#pragma unroll
      for (int mt = 0; mt < stream::kDimTiles; ++mt) ptx::mma_16816<Mma>(o[mt], a[mt], p_lo, p_hi);
    }
  }
};

}  // namespace hfa::sm90::decode
