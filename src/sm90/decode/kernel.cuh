// The tile decode kernel: one CTA per (split, kv-head × 16-row tile, sequence). The query rows
// of a GQA group (group · seqlen_q of them) are the rows of the tile, so each K/V byte is read
// once for all of them. It serves what the stream kernel (stream_kernel.cuh) does not: more
// than 8 query rows per kv-head, page sizes that are not multiples of 16, head dims 64 and 256.
// With varlen queries the grid's row tiles cover the longest sequence and a sequence's CTAs past
// its own rows exit at once.
//
// The kernel is compiled per head dim (64, 128, 256: config.hpp), which sizes every tile.
// Memory is the limit, so the kernel is a pipeline of cp.async copies: 64 keys of K and V codes
// (and scales) per stage, (stages - 1) stages in flight, two CTAs per SM (one at hdim 256).
// Each of the 4 warps owns 16 keys of every stage end to end: it reads their pages, copies
// them, widens them and multiplies them, with its own online softmax, so the warps never wait
// for each other inside the loop (only __syncwarp). Page numbers are read one iteration ahead
// of the copies that need them, so the block table's latency hides behind a tile of compute.
// Quantized codes are widened per stage into a bf16/fp16 tile (dequant.cuh) that the same
// ldmatrix + mma.sync code reads as a plain cache's tile. The warps merge through shared
// memory at the end (epilogue.cuh), then write the output, or the split's partial when the
// keys are split across CTAs.
//
// The body reads as the decode skeleton's parts (src/sm90/README.md): scheduler
// (work.cuh), producer, consumer (with softmax.cuh), epilogue (epilogue.cuh). The producer and
// the consumer's math stay written out here, in lambdas and the loop, because the SASS is the
// proof that a refactoring keeps the speed: moving them into functions or structs reorders the
// PTX (the lambdas' closures, the loop's phis) and ptxas schedules it differently.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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
#include "sm90/decode/work.cuh"
#include "sm90/ptx/cp_async.cuh"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/matrix_move.cuh"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/mma_sync.cuh"

namespace hfa::sm90::decode {

inline constexpr int kSwizzleRows = 8;          // chunks XOR (row mod 8): conflict-free ldmatrix
// mma.sync m16n8k16 and ldmatrix's 8x8 tiles: the 8s and 16s of the fragment index math.
inline constexpr int kMmaN = 8;
inline constexpr int kMmaK = 16;

struct RowOffsets {
  int64_t k, v, k_scale, v_scale;  // bytes from the side's base; -1: no key (zero-filled)
};

// Byte offset of chunk `chunk` of row `row` in a swizzled tile of kRowBytes-byte rows. ldmatrix
// reads one chunk of 8 consecutive rows per phase: the XOR spreads them over 8 distinct chunks
// mod 8, i.e. all 32 banks, for any row length of at least 8 chunks (128 bytes, hdim 64), and
// only flips the low 3 bits of the chunk index, so the chunk stays inside its row.
template <int kRowBytes>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  static_assert(kRowBytes % (kSwizzleRows * kChunkBytes) == 0, "whole groups of 8 chunks a row");
  return row * kRowBytes + ((chunk ^ (row % kSwizzleRows)) * kChunkBytes);
}

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

template <typename Element, Storage kStorage, int kHeadDim>
__global__ void __launch_bounds__(Config<kStorage, kHeadDim>::kThreads,
                                  Config<kStorage, kHeadDim>::kMinBlocksPerSM)
    decode_kernel(const __grid_constant__ Params p) {
  using C = Config<kStorage, kHeadDim>;
  constexpr int kD = C::kHeadDim;
  constexpr int kRowBytes = C::kTileRowBytes;
  constexpr int kN = C::kBlockN;
  constexpr int kS = C::kStages;
  extern __shared__ __align__(128) unsigned char smem[];

  // ---- scheduler (work.cuh): the CTA's sequence, kv-head, query rows and split of keys.
  const DecodeWork work = decode_work<C::kRowsPerTile, kN>(p);
  // A tile past the sequence's rows has no row: no output, and no partial the combine reads.
  if (!work.has_rows()) return;
  const int split = work.split, kv_head = work.kv_head, b = work.batch;
  const int tid = threadIdx.x, warp = work.warp, lane = work.lane, g = work.g, c = work.c;
  const DecodeSequence& seq = work.seq;
  const int first_row = work.first_row, rows = work.rows;
  const int key_end = work.key_end, first_tile = work.first_tile, n_tiles = work.n_tiles;

  unsigned char* const q_tile = smem + C::kQOffset;
  RowOffsets* const row_table = reinterpret_cast<RowOffsets*>(smem + C::kRowTableOffset);
  auto stage_base = [&](int stage) { return smem + C::kStagesOffset + stage * C::kStageBytes; };
  auto k_codes = [&](int stage) { return stage_base(stage); };
  auto v_codes = [&](int stage) { return stage_base(stage) + C::kCodeTileBytes; };
  auto k_scales = [&](int stage) { return stage_base(stage) + 2 * C::kCodeTileBytes; };
  auto v_scales = [&](int stage) {
    return stage_base(stage) + 2 * C::kCodeTileBytes + C::kScaleTileBytes;
  };
  unsigned char* const k_dequant = smem + C::kDequantOffset;
  unsigned char* const v_dequant = k_dequant + C::kTileBytes;

  // ---- consumer: Q's tile.
  load_query_tile<Element, kStorage, kHeadDim>(p, seq, first_row, rows, kv_head, b, tid, q_tile);

  // ---- producer: pages, copies, widening. Lanes 0-15 of each warp own one key row of the
  // warp's 16 in every stage.
  constexpr int kWarpRows = C::kKeysPerWarp;
  const int own_row = warp * kWarpRows + lane;  // meaningful for lane < kWarpRows
  const bool owns_row = lane < kWarpRows;
  // The page (or -1: past the keys, zero-filled) of the lane's key row of tile u. Read one
  // iteration before the copies that use it, so the block table's latency hides behind a tile.
  auto fetch_page = [&](int u) -> int {
    const int key = (first_tile + u) * kN + own_row;
    if (u >= n_tiles || key >= key_end) return -1;
    if (p.block_table == nullptr) return b;
    const int page_index = p.page_shift >= 0 ? key >> p.page_shift : key / p.page_size;
    return p.block_table[b * p.block_table_stride + page_index];
  };
  // The lane's row's byte offsets in the K/V codes and scales, computed once for every lane
  // that copies a piece of the row.
  auto publish_page = [&](int u, int page) {
    const int key = (first_tile + u) * kN + own_row;
    const int slot = p.page_shift >= 0 ? key & ((1 << p.page_shift) - 1) : key % p.page_size;
    RowOffsets r{-1, -1, -1, -1};
    if (page >= 0) {
      r.k = page * p.k.page_stride + slot * p.k.slot_stride + kv_head * p.k.head_stride;
      r.v = page * p.v.page_stride + slot * p.v.slot_stride + kv_head * p.v.head_stride;
      if constexpr (kStorage != Storage::plain) {
        r.k_scale = page * p.k.scale_page_stride + slot * p.k.scale_slot_stride +
                    kv_head * p.k.scale_head_stride;
        r.v_scale = page * p.v.scale_page_stride + slot * p.v.scale_slot_stride +
                    kv_head * p.v.scale_head_stride;
      }
    }
    row_table[(u % kS) * kN + own_row] = r;
  };

  const bool per_token = p.scale_kind == ScaleKind::fp8_per_token;
  // A row's scale bytes in the cache (FP8 per token, FP4): whole words but MXFP4's at hdim 64.
  const int scale_bytes = p.scale_kind == ScaleKind::nvfp4   ? C::kNvfp4ScaleBytes
                          : p.scale_kind == ScaleKind::mxfp4 ? C::kMxfp4ScaleBytes
                                                             : int(sizeof(float));
  const int scale_words = (scale_bytes + kScaleWordBytes - 1) / kScaleWordBytes;
  // Copies tile u's codes (and scales) into its stage; always commits a group, empty past the end.
  auto issue = [&](int u) {
    if (u < n_tiles) {
      const int stage = u % kS;
      const RowOffsets* rows = row_table + stage * kN;
      constexpr int kChunksPerRow = C::kCodeRowBytes / kChunkBytes;
      constexpr int kRowsPerPass = kWarpSize / kChunksPerRow;
      static_assert(kRowsPerPass * kChunksPerRow == kWarpSize && kWarpRows % kRowsPerPass == 0,
                    "a pass copies whole rows with every lane");
      const int chunk = lane % kChunksPerRow;
#pragma unroll
      for (int pass = 0; pass < kWarpRows / kRowsPerPass; ++pass) {
        const int row = warp * kWarpRows + lane / kChunksPerRow + pass * kRowsPerPass;
        const longlong2 at = *reinterpret_cast<const longlong2*>(&rows[row]);
        const int dst = kStorage == Storage::plain ? swizzled<kRowBytes>(row, chunk)
                                                   : row * C::kCodeRowBytes + chunk * kChunkBytes;
        const bool valid = at.x >= 0;
        const int64_t in_row = chunk * kChunkBytes;
        ptx::cp_async_16(ptx::smem_address(k_codes(stage) + dst), p.k.data + (valid ? at.x + in_row : 0),
                    valid ? kChunkBytes : 0);
        ptx::cp_async_16(ptx::smem_address(v_codes(stage) + dst), p.v.data + (valid ? at.y + in_row : 0),
                    valid ? kChunkBytes : 0);
      }
      if constexpr (kStorage != Storage::plain) {
        // One lane per row: K rows by lanes 0-15, V rows by lanes 16-31.
        if (kStorage == Storage::fp4 || per_token) {
          const int row = warp * kWarpRows + lane % kWarpRows;
          const bool is_v = lane >= kWarpRows;
          const int64_t offset = is_v ? rows[row].v_scale : rows[row].k_scale;
          unsigned char* dst = (is_v ? v_scales(stage) : k_scales(stage)) + row * C::kScaleRowBytes;
          for (int w = 0; w < scale_words; ++w) {
            const int at = w * kScaleWordBytes;
            const uint32_t word_bytes = uint32_t(min(kScaleWordBytes, scale_bytes - at));
            const bool valid = offset >= 0;
            const unsigned char* src = (is_v ? p.v.scale : p.k.scale) + (valid ? offset : 0);
            ptx::cp_async_4(ptx::smem_address(dst + at), src + (valid ? at : 0), valid ? word_bytes : 0);
          }
        }
      }
    }
    ptx::cp_async_commit();
  };

  // Calls widen(side, row, chunk, codes) for the 16-byte code chunks of the warp's rows of stage
  // `stage`, K's (side 0) then V's (side 1): the lane's share of the widening.
  auto for_each_code_chunk = [&](int stage, auto widen) {
    constexpr int kChunksPerRow = C::kCodeRowBytes / kChunkBytes;
    constexpr int kJobs = kWarpRows * kChunksPerRow / kWarpSize;
    static_assert(kJobs * kWarpSize == kWarpRows * kChunksPerRow);
#pragma unroll
    for (int side = 0; side < 2; ++side) {
      const unsigned char* codes = side == 0 ? k_codes(stage) : v_codes(stage);
#pragma unroll
      for (int j = 0; j < kJobs; ++j) {
        const unsigned job = lane + j * kWarpSize;
        const int row = warp * kWarpRows + job / kChunksPerRow, chunk = job % kChunksPerRow;
        widen(side, row, chunk,
              *reinterpret_cast<const uint4*>(codes + row * C::kCodeRowBytes + chunk * kChunkBytes));
      }
    }
  };

  // Widens stage `stage`'s codes into the dequantized K and V tiles.
  auto dequantize = [&](int stage) {
    if constexpr (kStorage == Storage::fp8) {  // 16 values a chunk
      for_each_code_chunk(stage, [&](int side, int row, int chunk, uint4 w) {
        unsigned char* tile = side == 0 ? k_dequant : v_dequant;
        uint4 lo, hi;
        // K's per-token scale multiplies the scores instead (one multiply per key, not per value).
        if (side == 1 && per_token)
          e4m3x16_to<Element, true>(w, reinterpret_cast<const float*>(v_scales(stage))[row], lo, hi);
        else
          e4m3x16_to<Element, false>(w, 1.0f, lo, hi);
        *reinterpret_cast<uint4*>(tile + swizzled<kRowBytes>(row, 2 * chunk)) = lo;
        *reinterpret_cast<uint4*>(tile + swizzled<kRowBytes>(row, 2 * chunk + 1)) = hi;
      });
    } else if constexpr (kStorage == Storage::fp4) {  // 32 values a chunk
      const bool nvfp4 = p.scale_kind == ScaleKind::nvfp4;
      for_each_code_chunk(stage, [&](int side, int row, int chunk, uint4 w) {
        unsigned char* tile = side == 0 ? k_dequant : v_dequant;
        const unsigned char* row_scales = (side == 0 ? k_scales(stage) : v_scales(stage)) + row * C::kScaleRowBytes;
        uint32_t first, second;  // multipliers of words 0-1 and 2-3
        if (nvfp4) {  // two blocks of 16 values, one conversion
          nvfp4_block_multipliers<Element>(
              *reinterpret_cast<const uint16_t*>(row_scales + 2 * chunk), first, second);
        } else {  // one block of 32
          first = second = mxfp4_block_multiplier<Element>(row_scales[chunk]);
        }
        const int base = 4 * chunk;  // 8 values (one 16-byte tile chunk) per code word
        *reinterpret_cast<uint4*>(tile + swizzled<kRowBytes>(row, base + 0)) = e2m1x8_scaled<Element>(w.x, first);
        *reinterpret_cast<uint4*>(tile + swizzled<kRowBytes>(row, base + 1)) = e2m1x8_scaled<Element>(w.y, first);
        *reinterpret_cast<uint4*>(tile + swizzled<kRowBytes>(row, base + 2)) = e2m1x8_scaled<Element>(w.z, second);
        *reinterpret_cast<uint4*>(tile + swizzled<kRowBytes>(row, base + 3)) = e2m1x8_scaled<Element>(w.w, second);
      });
    }
  };

  // ---- consumer: Q's fragments, the score multiplier, the fragment rows' keys, O.
  // Q's A fragment of k step ks, from the Q tile.
  auto load_q = [&](int ks, uint32_t (&frag)[4]) {
    const int m = lane / 8;
    const int row = lane % 8 + (m % 2) * 8;
    ptx::ldmatrix_x4(ptx::smem_address(q_tile + swizzled<kRowBytes>(row, 2 * ks + m / 2)), frag);
  };
  // Q fragments for the whole head dim, kept in registers (C::kQInRegisters), else re-read from
  // the Q tile at every k step.
  constexpr bool kQInRegisters = C::kQInRegisters;
  uint32_t q_frag[kQInRegisters ? kD / kMmaK : 1][4];
  __syncthreads();
  if constexpr (kQInRegisters) {
#pragma unroll
    for (int ks = 0; ks < kD / kMmaK; ++ks) load_q(ks, q_frag[ks]);
  }

  // Score multiplier (log2 domain unless softcapped) and each fragment row's visible keys.
  const float k_multiplier = side_multiplier<Element>(p, p.k, kv_head);
  const float v_multiplier = side_multiplier<Element>(p, p.v, kv_head);
  const bool softcapped = p.softcap > 0.0f;
  const float score_multiplier =
      softcapped ? p.softmax_scale * k_multiplier / p.softcap : p.softmax_scale * k_multiplier * kLog2e;
  const policy::SoftcapLog2 softcap{p.softcap * kLog2e};  // the score policy's, applied below
  int key_lo[2], key_hi[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const RowKeys k = work.row_keys(p, first_row + g + 8 * half);
    key_lo[half] = k.lo;
    key_hi[half] = k.hi;
  }

  float o[kD / kMmaN][4];
#pragma unroll
  for (int n = 0; n < kD / kMmaN; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  RowSoftmax<1, 4> softmax;  // a row's scores lie in lanes 4g … 4g+3

  // ---- the pipeline. Prologue: page numbers of the first stages, then their copies.
  if (owns_row)
    for (int u = 0; u < kS - 1; ++u) publish_page(u, fetch_page(u));
  int pending_page = owns_row ? fetch_page(kS - 1) : -1;
  __syncwarp();
  for (int u = 0; u < kS - 1; ++u) issue(u);

  for (int t = 0; t < n_tiles; ++t) {
    if (owns_row) {
      publish_page(t + kS - 1, pending_page);
      pending_page = fetch_page(t + kS);
    }
    ptx::cp_async_wait<kS - 2>();
    __syncwarp();  // the warp's rows of tile t landed; its reads of tile t-1 are done
    issue(t + kS - 1);
    const int stage = t % kS;
    const unsigned char* k_tile = k_codes(stage);
    const unsigned char* v_tile = v_codes(stage);
    if constexpr (C::kDequantizes) {
      dequantize(stage);
      __syncwarp();
      k_tile = k_dequant;
      v_tile = v_dequant;
    }

    // ---- consumer: the stage's math. S = Q Kᵀ for this warp's 16 keys: two 16x8 tiles.
    const int key_base = warp * C::kKeysPerWarp;
    float s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
    for (int ks = 0; ks < kD / kMmaK; ++ks) {
      const int m = lane / 8;
      uint32_t kf[4];
      ptx::ldmatrix_x4(ptx::smem_address(k_tile + swizzled<kRowBytes>(key_base + (m / 2) * 8 + lane % 8, 2 * ks + m % 2)), kf);
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

    // Scale, cap, mask; the running max per fragment row.
    const int key0 = (first_tile + t) * kN + key_base;
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int local = nt * 8 + 2 * c + (e % 2);
        const int key = key0 + local;
        const int half = e / 2;
        float x = s[nt][e] * score_multiplier;
        if (kStorage == Storage::fp8 && per_token)
          x *= reinterpret_cast<const float*>(k_scales(stage))[key_base + local];
        if (key < key_lo[half] || key > key_hi[half]) x = -INFINITY;
        s[nt][e] = x;
        tile_max[half] = fmaxf(tile_max[half], x);
      }
    }
    if (softcapped) {  // uniform: the common path issues no tanh
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)  // masked scores stay -inf
          if (s[nt][e] != -INFINITY) s[nt][e] = softcap.score(s[nt][e]);
      tile_max[0] = tile_max[1] = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
    }
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

    // O += P V for this warp's 16 keys, 16 columns per ldmatrix.
#pragma unroll
    for (int np = 0; np < kD / kMmaK; ++np) {
      const int m = lane / 8;
      uint32_t vf[4];
      ptx::ldmatrix_x4_trans(ptx::smem_address(v_tile + swizzled<kRowBytes>(key_base + (m % 2) * 8 + lane % 8, 2 * np + m / 2)), vf);
      ptx::mma_16816<Element>(o[2 * np], p_frag, vf[0], vf[1]);
      ptx::mma_16816<Element>(o[2 * np + 1], p_frag, vf[2], vf[3]);
    }
  }

  // ---- epilogue: each warp writes its normalized partial and LSE, epilogue.cuh merges them.
  ptx::cp_async_wait<0>();
  __syncthreads();
  const WarpPartials<C::kWarps, C::kRowsPerTile, kD> partials(stage_base(0));
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    softmax.sum_lanes(half);
    const int row = g + 8 * half;
    const float inverse = softmax.normalizer(half);
#pragma unroll
    for (int n = 0; n < kD / kMmaN; ++n) {
      // One pointer expression: partials.row(warp, row) + n * 8 + 2 * c changes the SASS.
      float* dst = partials.out + (warp * C::kRowsPerTile + row) * kD + n * 8 + 2 * c;
      dst[0] = o[n][2 * half] * inverse;
      dst[1] = o[n][2 * half + 1] * inverse;
    }
    if (c == 0) partials.set_lse(warp, row, softmax.lse(half));
  }
  __syncthreads();
  merge_warps_and_store<Element, kD, C::kRowsPerTile, C::kWarps, C::kThreads>(
      p, seq, b, kv_head, first_row, rows, split, partials, v_multiplier,
      [](int stored) { return stored_to_column<kStorage>(stored); });
}

}  // namespace hfa::sm90::decode
