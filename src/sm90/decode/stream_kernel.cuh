// The stream decode kernel: up to 8 query rows per kv-head over a cache whose pages hold whole
// 16-key tiles, in every storage format. The serving hot path: a GQA group of 4-8 heads reads
// one token's keys.
//
// The tile kernel (kernel.cuh) multiplies a 16-row query tile by keys widened into a bf16/fp16
// tile in shared memory; with 4 real rows three quarters of its mma and fragment work is padding,
// and the widening pass (code → registers → shared → ldmatrix) costs more instructions per key
// than the copy of the codes. This kernel turns the products around: Sᵀ = K·Qᵀ and Oᵀ = Vᵀ·Pᵀ,
// 16 keys as the mma's M and the ≤ 8 query rows as its N. Each lane reads whole chunks of its
// own cache rows from the staged codes and widens them straight into A fragments, or ldmatrix
// reads them for a plain cache (stream_fragments.cuh); Pᵀ comes from the score accumulators by
// an 8x8 transpose (movmatrix). Per 16 keys a warp issues 16 mma (the tile kernel 32) and no
// shared-memory stores.
//
// FP8 runs the mma in fp16 whatever q's dtype: E4M3 widens to f16 exactly in one instruction per
// pair, where bf16 would take four. A bf16 q is scaled by a power of two so that its largest
// value sits in [2^14, 2^15) (exact for every value above 2^-28 of the largest; the scores get
// the power back in fp32). The per-token V scale multiplies P instead of V, relative to the
// largest scale exponent seen so far (rescaled like the running max), so P · scale stays in
// fp16's range whatever the scales. FP4 widens into q's dtype as the tile kernel does.
//
// Copies: cp.async of 16-key tiles, one block-table read per tile; each of the 4 warps copies
// and consumes its own tiles of a stage, so warps meet only at the final merge.
//
// The skeleton's parts (src/sm90/README.md): scheduler (work.cuh), producer, consumer
// (with softmax.cuh, stream_fragments.cuh), epilogue (epilogue.cuh); kernel.cuh says why the
// producer and the math stay written out in the body.
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
#include "sm90/decode/work.cuh"
#include "sm90/ptx/cp_async.cuh"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/matrix_move.cuh"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/mma_sync.cuh"

namespace hfa::sm90::decode {

template <typename Element, Storage kStorage>
__global__ void __launch_bounds__(StreamConfig<kStorage>::kThreads, StreamConfig<kStorage>::kMinBlocksPerSM)
    stream_kernel(const __grid_constant__ Params p) {
  using C = StreamConfig<kStorage>;
  using Mma = std::conditional_t<kStorage == Storage::fp8, __half, Element>;
  constexpr bool kFp8 = kStorage == Storage::fp8;
  constexpr bool kPlain = kStorage == Storage::plain;
  constexpr int kD = C::kHeadDim;
  constexpr int kN = C::kBlockN;
  constexpr int kS = C::kStages;
  constexpr int kWarpRows = C::kWarpKeys;
  constexpr int kTileKeys = stream::kKeysPerWarp;
  extern __shared__ __align__(128) unsigned char smem[];

  // ---- scheduler (work.cuh): the CTA's sequence, kv-head, query rows and split of keys.
  const DecodeWork work = decode_work<C::kRowsPerTile, kN>(p);
  // A tile past the sequence's rows has no row: no output, and no partial the combine reads.
  if (!work.has_rows()) return;
  const int split = work.split, kv_head = work.kv_head, b = work.batch;
  const int warp = work.warp, lane = work.lane, g = work.g, c = work.c;
  const DecodeSequence& seq = work.seq;
  const int first_row = work.first_row, rows = work.rows;
  const int key_end = work.key_end, first_tile = work.first_tile, n_tiles = work.n_tiles;

  auto stage_base = [&](int stage) { return smem + stage * C::kStageBytes; };
  auto k_codes = [&](int stage) { return stage_base(stage); };
  auto v_codes = [&](int stage) { return stage_base(stage) + C::kCodeTileBytes; };
  auto k_scales = [&](int stage) { return stage_base(stage) + 2 * C::kCodeTileBytes; };
  auto v_scales = [&](int stage) {
    return stage_base(stage) + 2 * C::kCodeTileBytes + C::kScaleTileBytes;
  };
  // Where chunk `chunk` of stage row `row` of K / V lives (stream_fragments.cuh's swizzles).
  auto k_chunk_offset = [](int row, int chunk) {
    if constexpr (kPlain) return row * C::kCodeRowBytes + stream::plain_chunk(row, chunk) * kChunkBytes;
    else if constexpr (kFp8) return row * C::kCodeRowBytes + stream::fp8_k_chunk(row, chunk) * kChunkBytes;
    else return row * C::kCodeRowBytes + chunk * kChunkBytes;
  };
  auto v_chunk_offset = [](int row, int chunk) {
    if constexpr (kPlain) return row * C::kCodeRowBytes + stream::plain_chunk(row, chunk) * kChunkBytes;
    else if constexpr (kFp8) return row * C::kCodeRowBytes + stream::fp8_v_chunk(row, chunk) * kChunkBytes;
    else return stream::fp4_v_row(row) * C::kCodeRowBytes + stream::fp4_v_chunk(row, chunk) * kChunkBytes;
  };

  // ---- consumer: Q, the score multiplier, the fragment rows' keys, O.
  // Qᵀ as the B operand, at the dims the K fragments hold: lane (g, c) holds row g's values.
  const float k_multiplier = side_multiplier<Element>(p, p.k, kv_head);
  const float v_multiplier = side_multiplier<Element>(p, p.v, kv_head);
  uint32_t q_frag[stream::kKSteps][2];
  int q_shift = 0;  // q was multiplied by 2^q_shift (FP8's fp16 range)
  {
    float values[stream::kKSteps][2][2];
    const int r = first_row + g;
    const auto* q = static_cast<const Element*>(p.q);
    const Element* q_row = q + b * p.q_batch_stride + (seq.q_begin + r / p.group) * p.q_row_stride +
                           (kv_head * p.group + r % p.group) * p.q_head_stride;
    float largest = 0.0f;
#pragma unroll
    for (int ks = 0; ks < stream::kKSteps; ++ks)
#pragma unroll
      for (int slot = 0; slot < 2; ++slot)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int dim = kPlain ? stream::plain_q_dim(c, ks, slot, e)
                          : kFp8 ? stream::fp8_q_dim(c, ks, slot, e)
                                 : stream::fp4_q_dim(c, ks, slot, e);
          const float x = r < rows ? static_cast<float>(q_row[dim]) : 0.0f;
          values[ks][slot][e] = x;
          largest = fmaxf(largest, fabsf(x));
        }
    if constexpr (kFp8) {
      // Non-negative floats order as their bit patterns; inf and NaN keep the shift at 0.
      constexpr int kTargetExponent = 14;  // the largest |q| lands in [2^14, 2^15)
      constexpr int kShiftLimit = 126;
      const uint32_t bits = __reduce_max_sync(kFullWarp, __float_as_uint(largest));
      if (bits != 0 && bits < 0x7f800000u)
        q_shift = max(-kShiftLimit, min(kShiftLimit, kTargetExponent - (int(bits >> 23) - 127)));
    }
    const float q_multiplier = exp2f(float(q_shift));
#pragma unroll
    for (int ks = 0; ks < stream::kKSteps; ++ks)
#pragma unroll
      for (int slot = 0; slot < 2; ++slot)
        q_frag[ks][slot] = ptx::pack_pair<Mma>(values[ks][slot][0] * q_multiplier, values[ks][slot][1] * q_multiplier);
  }

  // Score multiplier (log2 domain unless softcapped) and each fragment row's visible keys.
  const bool softcapped = p.softcap > 0.0f;
  const float unshift = exp2f(float(-q_shift));
  const float score_multiplier = softcapped ? p.softmax_scale * k_multiplier / p.softcap * unshift
                                            : p.softmax_scale * k_multiplier * kLog2e * unshift;
  const policy::SoftcapLog2 softcap{p.softcap * kLog2e};  // the score policy's, applied below
  int key_lo[2], key_hi[2];  // fragment columns 2c and 2c + 1: query rows
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const RowKeys k = work.row_keys(p, first_row + 2 * c + h);
    key_lo[h] = k.lo;
    key_hi[h] = k.hi;
  }

  // Oᵀ: o[mt] = {(dim 16g+2mt, row 2c), (same dim, row 2c+1), (dim +1, row 2c), (dim +1, row 2c+1)}.
  float o[stream::kDimTiles][4];
#pragma unroll
  for (int mt = 0; mt < stream::kDimTiles; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
  RowSoftmax<4, kWarpSize> softmax;  // a row's scores lie in lanes c, c + 4, … c + 28
  const bool per_token = kFp8 && p.scale_kind == ScaleKind::fp8_per_token;
  // Per-token V: o is in units of 2^(v_exponent - 127) (a biased exponent, only ever raised)
  // and each tile's weights are P · scale · v_relative, v_relative = 2^(127 - v_exponent). The
  // first reference (0, relative 2^127) makes the first tile with a normal scale raise it.
  int v_exponent = 0;
  float v_relative = exp2f(127.0f);
  // Scales may exceed the reference by this much before it moves: P · scale · v_relative then
  // stays under 2^14, far inside fp16's 65504.
  constexpr float kScaleHeadroom = 16384.0f;

  // ---- producer: pages and copies. Each 16-key tile of a warp's stage lies in one page (the dispatch sends
  // only page sizes that are multiples of 16 here), so a tile costs one block-table read (one
  // stage ahead of its copies, which hides its latency behind a stage of compute) and each copy
  // one 64-bit add: row r of the tile is r slot strides from its first.
  struct TilePage {
    int page;  // -1: no keys (zero-filled)
    int slot;  // of the tile's first key
  };
  using StagePages = TilePage[C::kKeyTiles];
  auto fetch_pages = [&](int u, StagePages& pages) {
#pragma unroll
    for (int kt = 0; kt < C::kKeyTiles; ++kt) {
      const int key = (first_tile + u) * kN + warp * kWarpRows + kt * kTileKeys;
      if (u >= n_tiles || key >= key_end) pages[kt] = {-1, 0};
      else if (p.page_shift >= 0)
        pages[kt] = {p.block_table ? p.block_table[b * p.block_table_stride + (key >> p.page_shift)] : b,
                     key & ((1 << p.page_shift) - 1)};
      else
        pages[kt] = {p.block_table ? p.block_table[b * p.block_table_stride + key / p.page_size] : b,
                     key % p.page_size};
    }
  };
  constexpr int kChunksPerRow = C::kCodeRowBytes / kChunkBytes;
  constexpr int kRowsPerPass = kWarpSize / kChunksPerRow;
  constexpr int kPassesPerTile = kTileKeys / kRowsPerPass;
  const int copy_row = lane / kChunksPerRow, copy_chunk = lane % kChunksPerRow;
  const bool row_scales = kStorage == Storage::fp4 || per_token;
  const int scale_words = p.scale_kind == ScaleKind::nvfp4 ? 2 : 1;
  auto issue = [&](int u, const StagePages& pages) {
    if (u < n_tiles) {
      const int stage = u % kS;
      const int key0 = (first_tile + u) * kN + warp * kWarpRows;
#pragma unroll
      for (int kt = 0; kt < C::kKeyTiles; ++kt) {
        const TilePage at = pages[kt];
        const unsigned char* k_row = p.k.data + at.page * p.k.page_stride + kv_head * p.k.head_stride +
                                     (at.slot + copy_row) * p.k.slot_stride + copy_chunk * kChunkBytes;
        const unsigned char* v_row = p.v.data + at.page * p.v.page_stride + kv_head * p.v.head_stride +
                                     (at.slot + copy_row) * p.v.slot_stride + copy_chunk * kChunkBytes;
#pragma unroll
        for (int pass = 0; pass < kPassesPerTile; ++pass) {
          const int r = kt * kTileKeys + copy_row + pass * kRowsPerPass;
          const int row = warp * kWarpRows + r;
          const bool valid = at.page >= 0 && key0 + r < key_end;
          const int bytes = valid ? kChunkBytes : 0;
          ptx::cp_async_16(ptx::smem_address(k_codes(stage) + k_chunk_offset(row, copy_chunk)), valid ? k_row : p.k.data, bytes);
          ptx::cp_async_16(ptx::smem_address(v_codes(stage) + v_chunk_offset(row, copy_chunk)), valid ? v_row : p.v.data, bytes);
          k_row += kRowsPerPass * p.k.slot_stride;
          v_row += kRowsPerPass * p.v.slot_stride;
        }
      }
      if (row_scales) {  // one lane per scale row: K's, then V's
#pragma unroll
        for (int job = lane; job < 2 * kWarpRows; job += kWarpSize) {
          const bool is_v = job >= kWarpRows;
          const int r = job % kWarpRows;
          TilePage at = pages[0];  // pages[r / kTileKeys], without indexing registers at run time
#pragma unroll
          for (int kt = 1; kt < C::kKeyTiles; ++kt)
            if (r >= kt * kTileKeys) at = pages[kt];
          const CacheView& side = is_v ? p.v : p.k;
          const bool valid = at.page >= 0 && key0 + r < key_end;
          const unsigned char* src =
              valid ? side.scale + at.page * side.scale_page_stride + kv_head * side.scale_head_stride +
                          (at.slot + r % kTileKeys) * side.scale_slot_stride
                    : side.scale;
          unsigned char* dst = (is_v ? v_scales(stage) : k_scales(stage)) + (warp * kWarpRows + r) * C::kScaleRowBytes;
          for (int w = 0; w < scale_words; ++w)
            ptx::cp_async_4(ptx::smem_address(dst + 4 * w), src + (valid ? 4 * w : 0), valid ? 4 : 0);
        }
      }
    }
    ptx::cp_async_commit();
  };

  // ---- the pipeline: the first stages' copies, then a stage a step.
  for (int u = 0; u < kS - 1; ++u) {
    StagePages pages;
    fetch_pages(u, pages);
    issue(u, pages);
  }
  StagePages pending;
  fetch_pages(kS - 1, pending);

  const bool nvfp4 = p.scale_kind == ScaleKind::nvfp4;
  const int key_m_lo = stream::key_of_m(g), key_m_hi = stream::key_of_m(g + 8);  // tile-local

  for (int t = 0; t < n_tiles; ++t) {
    StagePages next;
#pragma unroll
    for (int kt = 0; kt < C::kKeyTiles; ++kt) next[kt] = pending[kt];
    fetch_pages(t + kS, pending);
    ptx::cp_async_wait<kS - 2>();
    __syncwarp();  // the warp's rows of stage t landed; its reads of stage t-1 are done
    issue(t + kS - 1, next);
    const int stage = t % kS;
    const unsigned char* k_tile = k_codes(stage);
    const unsigned char* v_tile = v_codes(stage);
    const int warp_key0 = (first_tile + t) * kN + warp * kWarpRows;

    // ---- consumer: the stage's math.
    // Sᵀ = K Qᵀ for each of the warp's 16-key tiles, widened a k step at a time. Two accumulators
    // a tile (even and odd k steps) halve its chain of dependent mma: that latency, not the mma
    // count, is what the rest of the stage waits for.
    float s[C::kKeyTiles][4];
#pragma unroll
    for (int kt = 0; kt < C::kKeyTiles; ++kt) {
      const int row_lo = warp * kWarpRows + kt * kTileKeys + key_m_lo;
      const int row_hi = warp * kWarpRows + kt * kTileKeys + key_m_hi;
      float even[4] = {0.0f, 0.0f, 0.0f, 0.0f}, odd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if constexpr (kPlain) {
        const int row = warp * kWarpRows + kt * kTileKeys + stream::key_of_m(stream::plain_k_m(lane));
#pragma unroll
        for (int ks = 0; ks < stream::kKSteps; ++ks) {
          uint32_t a[4];
          ptx::ldmatrix_x4(ptx::smem_address(k_tile + k_chunk_offset(row, 2 * ks + stream::plain_k_chunk(lane))), a);
          ptx::mma_16816<Mma>(ks % 2 == 0 ? even : odd, a, q_frag[ks][0], q_frag[ks][1]);
        }
      } else if constexpr (kFp8) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint4 lo = *reinterpret_cast<const uint4*>(k_tile + k_chunk_offset(row_lo, c + 4 * h));
          const uint4 hi = *reinterpret_cast<const uint4*>(k_tile + k_chunk_offset(row_hi, c + 4 * h));
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
        const uint4 lo = *reinterpret_cast<const uint4*>(k_tile + k_chunk_offset(row_lo, c));
        const uint4 hi = *reinterpret_cast<const uint4*>(k_tile + k_chunk_offset(row_hi, c));
        const uint32_t lo_words[4] = {lo.x, lo.y, lo.z, lo.w}, hi_words[4] = {hi.x, hi.y, hi.z, hi.w};
        const unsigned char* scales = k_scales(stage);
        uint32_t lo_multiplier[2], hi_multiplier[2];  // per 16 dims (NVFP4) or 32 (MXFP4)
        if (nvfp4) {
          nvfp4_block_multipliers<Element>(*reinterpret_cast<const uint16_t*>(scales + row_lo * C::kScaleRowBytes + 2 * c),
                                           lo_multiplier[0], lo_multiplier[1]);
          nvfp4_block_multipliers<Element>(*reinterpret_cast<const uint16_t*>(scales + row_hi * C::kScaleRowBytes + 2 * c),
                                           hi_multiplier[0], hi_multiplier[1]);
        } else {
          lo_multiplier[0] = lo_multiplier[1] = mxfp4_block_multiplier<Element>(scales[row_lo * C::kScaleRowBytes + c]);
          hi_multiplier[0] = hi_multiplier[1] = mxfp4_block_multiplier<Element>(scales[row_hi * C::kScaleRowBytes + c]);
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

    // Scale, cap, mask: s[kt][e] is key (e < 2 ? lo : hi) of tile kt, query row 2c + e % 2.
    float key_scale[C::kKeyTiles][2], value_scale[C::kKeyTiles][2];  // per-token FP8 K and V
#pragma unroll
    for (int kt = 0; kt < C::kKeyTiles; ++kt) {
      const int row_lo = warp * kWarpRows + kt * kTileKeys + key_m_lo;
      const int row_hi = warp * kWarpRows + kt * kTileKeys + key_m_hi;
      key_scale[kt][0] = key_scale[kt][1] = value_scale[kt][0] = value_scale[kt][1] = 1.0f;
      if (per_token) {
        const float* k_token = reinterpret_cast<const float*>(k_scales(stage));
        const float* v_token = reinterpret_cast<const float*>(v_scales(stage));
        key_scale[kt][0] = k_token[row_lo];
        key_scale[kt][1] = k_token[row_hi];
        value_scale[kt][0] = v_token[row_lo];
        value_scale[kt][1] = v_token[row_hi];
      }
    }
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
        s[kt][e] = x;
        tile_max[h] = fmaxf(tile_max[h], x);
      }
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
      const int v_row0 = warp * kWarpRows + kt * kTileKeys + 4 * c;
      uint32_t a[stream::kDimTiles][4];
      if constexpr (kPlain) {
        const int row = warp * kWarpRows + kt * kTileKeys + stream::key_of_m(stream::plain_v_m(lane));
#pragma unroll
        for (int mt = 0; mt < stream::kDimTiles; ++mt)
          ptx::ldmatrix_x4_trans(ptx::smem_address(v_tile + v_chunk_offset(row, 2 * mt + stream::plain_v_chunk(lane))), a[mt]);
      } else if constexpr (kFp8) {
        uint4 words[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
          words[j] = *reinterpret_cast<const uint4*>(v_tile + v_chunk_offset(v_row0 + j, g));
        stream::fp8_v_fragments(words, a);
      } else {
        uint2 words[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
          words[j] = *reinterpret_cast<const uint2*>(v_tile + v_chunk_offset(v_row0 + j, g / 2) + (g % 2) * 8);
        const unsigned char* scales = v_scales(stage);
        uint32_t multiplier[2];
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) {
          const unsigned char* first = scales + (v_row0 + 2 * pair) * C::kScaleRowBytes;
          const unsigned char* second = first + C::kScaleRowBytes;
          multiplier[pair] = nvfp4 ? stream::nvfp4_pair_multiplier<Element>(first[g], second[g])
                                   : stream::mxfp4_pair_multiplier<Element>(first[g / 2], second[g / 2]);
        }
        stream::fp4_v_fragments<Element>(words, multiplier, a);
      }
#pragma unroll
      for (int mt = 0; mt < stream::kDimTiles; ++mt) ptx::mma_16816<Mma>(o[mt], a[mt], p_lo, p_hi);
    }
  }

  // ---- epilogue: each warp writes its normalized partial and LSE, epilogue.cuh merges them.
  ptx::cp_async_wait<0>();
  __syncthreads();
  const WarpPartials<C::kWarps, C::kRowsPerTile, kD> partials(smem);
  const float value_unit = per_token ? exp2f(float(v_exponent - 127)) : 1.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    softmax.sum_lanes(h);
    const int row = 2 * c + h;
    const float inverse = softmax.normalizer<kFp8>(h, value_unit);
#pragma unroll
    for (int mt = 0; mt < stream::kDimTiles; ++mt) {
      float* dst = partials.row(warp, row);
      dst[stream::output_dim<kStorage>(g, mt, 0)] = o[mt][h] * inverse;
      dst[stream::output_dim<kStorage>(g, mt, 1)] = o[mt][h + 2] * inverse;
    }
    if (g == 0) partials.set_lse(warp, row, softmax.lse(h));
  }
  __syncthreads();
  merge_warps_and_store<Element, kD, C::kRowsPerTile, C::kWarps, C::kThreads>(
      p, seq, b, kv_head, first_row, rows, split, partials, v_multiplier,
      [](int column) { return column; });
}

}  // namespace hfa::sm90::decode
