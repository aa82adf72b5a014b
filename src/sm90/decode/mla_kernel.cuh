// The MLA decode kernel: DeepSeek's absorbed MLA as MQA over one latent head, q and k 576 wide,
// v the first 512 columns of the same cache row, pages of 64 tokens. The query rows of a kv-head
// (seqlen_q · group, token-major) are the 64 rows of one wgmma.
//
// Work (work.cuh's WorkWalk): by default the balanced schedule (split_schedule.hpp), one
// persistent CTA per (kv-head × 64-row tile, part) walking its part's range of (sequence, tile):
// the whole sequences in it, finished in place (out and lse), and the pieces of the sequences cut
// at its ends, each a partial in the sequence's slots that the combine merges. The schedule
// kernel writes the ranges on the device from the lengths just before (schedule_kernel.cuh);
// this kernel and the combine after it are dependent launches (mla_launch.cuh).
// When the call fixes the splits (num_splits, split_size) or has varlen queries, the uniform
// plan: one CTA per (split, kv-head × row tile, sequence), as every decode kernel. Either way
// the producer and the consumers walk the same pieces through the two stages, so the producer
// loads a piece's first tiles while the consumers finish the piece before.
//
// The cache: rows of q's dtype (bf16 or fp16; mla_decode_kernel), or FlashMLA's 656-byte FP8
// records (bf16 q; mla_fp8_decode_kernel): per token 512 e4m3 latent codes, 4 fp32 scales, 64
// bf16 rotary values (quant/mla_fp8.hpp). Both kernels stage each page as the same bf16/fp16
// K tile (128-byte swizzled slabs), so the consumers are one code.
//
// Warp roles (decode_cta_warp_specialized, skeleton.cuh; sizes in mla_config.hpp, producers in
// mla_producers.cuh):
//   producer warpgroup (the third) — rows of q's dtype: one warp reads the block table 32 pages
//                   at a time and issues each page's K tile as 9 TMA copies of 64 columns
//                   (128-byte swizzle) into its tile's stage, one mbarrier per copy. FP8
//                   records: all 4 warps load the page's records (16-byte loads, the next pass's
//                   in flight while one is converted; each page prefetched into L2 two tiles
//                   ahead), write e4m3 · scale rounded to bf16 and the rotary values into the
//                   stage's slabs, and arrive on each slab's mbarrier, one arrival a warp;
//   2 consumer warpgroups — the tiles in pairs (FlashMLA's seesaw, Consumer::consume): warpgroup
//                   0 computes the scores of the first (S = Q·Kᵀ, wgmma 64×64, K = 576 from
//                   shared memory, slab by slab as the slabs land), warpgroup 1 those of the
//                   second; each owns 256 columns of O and accumulates P·V of both tiles on them
//                   (wgmma 64×256×64): its own tile's P from registers, the other's from shared
//                   memory, where each writes its P over its stage's rotary slab (read by its
//                   Q·Kᵀ alone, then free). The two hand each other their running row maxima.
//                   V is read as the MN-major view of the K tile's first 8 slabs: the cache row
//                   is loaded once for both uses.
//
// Schedule, per pair: warpgroup 0's softmax and P·V of the first tile run under warpgroup 1's
// Q·Kᵀ of the second, and warpgroup 1's softmax under warpgroup 0's GEMMs; the order and the
// hand-offs (named barriers: each warpgroup's maxima shared, each tile's P written) are in
// Consumer::consume. Each stage goes back to the producer in halves (V's left slabs; V's right
// slabs with the rotary slab) as soon as their last reader is done, so the next pair's first
// slabs load under this pair's last P·V.
//
// Keys past the sequence's end in its last page may hold anything (NaN; dequantized NaN from an
// FP8 record's NaN bytes): their scores are masked, and their V rows are zeroed in shared memory
// before P·V (0·NaN would poison O).
// Rows past the sequence's query rows are zeros in Q and are never stored.
//
// The epilogue stages O in fp32 one warpgroup's 256 columns at a time over Q's tile (the K
// stages may already hold the next piece's tiles), each half stored by both warpgroups in runs of
// 4 columns of a row.
#pragma once

#include <cuda.h>

#include <cmath>
#include <cstdint>

#include "sm90/common/math.hpp"
#include "sm90/common/swizzled_tile.cuh"
#include "sm90/common/warpgroup.cuh"
#include "sm90/decode/epilogue.cuh"
#include "sm90/decode/mla_config.hpp"
#include "sm90/decode/mla_producers.cuh"
#include "sm90/decode/params.hpp"
#include "sm90/decode/sequence.cuh"
#include "sm90/decode/skeleton.cuh"
#include "sm90/decode/softmax.cuh"
#include "sm90/decode/work.cuh"
#include "sm90/ptx/cp_async.cuh"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/named_barrier.cuh"
#include "sm90/ptx/registers.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/wgmma.cuh"

namespace hfa::sm90::decode::mla {

// The parameters of the kernel on rows of q's dtype: the decode parameters every decode kernel
// reads, and the cache's tensor map (dim 576, slot 64, kv-head, page), boxes of 64 columns × one
// page. The kernel on FP8 records takes the decode parameters alone.
struct MlaParams {
  CUtensorMap k_map;
  Params decode;
};

// The configuration the skeleton's parts agree on (skeleton.cuh), for a cache of rows of q's
// dtype (Cache::plain) or of FP8 records (Cache::fp8_record, bf16 q).
template <typename ElementType, Cache kCache>
struct Config {
  using Element = ElementType;
  using Storage = SharedStorage<Element>;
  static constexpr int kRowsPerTile = mla::kRowsPerTile;
  static constexpr int kBlockN = mla::kBlockN;
  static constexpr int kConsumerThreads = mla::kConsumerThreads;
  static constexpr int kProducerRegisters = mla::kProducerRegisters<kCache>;
  static constexpr int kConsumerRegisters = mla::kConsumerRegisters<kCache>;
  static constexpr int kTilesPerStep = mla::kTilesPerStep;
  using Ring = PairRing;
  // A slab's barrier completes on one arrival and the TMA copy's bytes, or on the arrival of
  // every dequantizing warp.
  static constexpr uint32_t kSlabArrivals = kCache == Cache::plain ? 1 : kProducerWarps;
  static_assert(kFits<Element>, "Q, two K stages and P fit one CTA's shared memory");

  __device__ __forceinline__ static void init_barriers(Storage& s) {
#pragma unroll
    for (int stage = 0; stage < kStages; ++stage) {
#pragma unroll
      for (int slab = 0; slab < kSlabsPerTile; ++slab) s.k_full[stage][slab].init(kSlabArrivals);
#pragma unroll
      for (int half = 0; half < kStageHalves; ++half)
        s.k_empty[stage][half].init(half_readers(stage, StageHalf(half)));
    }
  }
};

// A consumer warpgroup: the scores of one tile of each pair, its 256 columns of O.
template <typename Configuration>
struct Consumer {
  using C = Configuration;
  using Element = typename C::Element;
  using Storage = typename C::Storage;
  using QTile = typename Storage::QTile;
  using KTile = typename Storage::KTile;
  using PTile = typename Storage::PTile;
  static constexpr int kSAcc = kBlockN / 2;               // 64 × 64 fp32 over 128 threads
  static constexpr int kPRegs = kSAcc / 2;                // P packed: the A operand of P·V
  static constexpr int kOAcc = kColumnsPerWarpgroup / 2;  // 64 × 256 fp32 over 128 threads
  static constexpr int kStepsPerSlab = kSlabColumns / kMmaK;  // 4: Q·Kᵀ takes 9 × 4 k-steps
  static_assert(kSlabsPerTile * kStepsPerSlab * kMmaK == kHeadDimQK,
                "Q·Kᵀ's k-steps are the slabs'");
  static constexpr int kPVSteps = kBlockN / kMmaK;            // 4
  static constexpr uint32_t kVStepBytes = kMmaK * ptx::kSwizzleBytes;  // 16 key rows of V
  static constexpr uint32_t kChunkBytes = 16;

  const Params& p;
  const DecodeWork& work;
  Storage& s;
  const int warpgroup;  // 0 or 1: its tile of each pair, its columns of O
  const int thread;     // in the warpgroup
  const ptx::FragmentCoords at;
  float o[kOAcc];
  RowSoftmax<1, 4> softmax;  // a row's fragment lies in the 4 lanes of a quad
  float scale_log2;
  RowKeys keys[2];  // of the thread's two rows
  // Tiles whose keys all lie in [clear_lo, clear_hi] need no mask for this thread's rows.
  int clear_lo, clear_hi;
  typename C::Ring ring;  // from where the piece before left it

  __device__ __forceinline__ Consumer(const Params& params, const DecodeWork& w, Storage& storage,
                                      const typename C::Ring& start)
      : p(params),
        work(w),
        s(storage),
        warpgroup(warpgroup_index()),
        thread(thread_in_warpgroup()),
        at(ptx::fragment_coords(thread_in_warpgroup())),
        ring(start) {
#pragma unroll
    for (int i = 0; i < kOAcc; ++i) o[i] = 0.0f;
    scale_log2 = p.softmax_scale * kLog2e;
#pragma unroll
    for (int h = 0; h < 2; ++h) keys[h] = work.row_keys(p, work.first_row + at.row0 + 8 * h);
    clear_lo = max(keys[0].lo, keys[1].lo);
    clear_hi = min(keys[0].hi, keys[1].hi);
  }

  __device__ __forceinline__ void sync_consumers() const {
    ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::mla_consumers), kConsumerThreads);
  }

  // Q's 64 rows into the swizzled Q tile, zeros past the sequence's rows, by both warpgroups:
  // 16-byte cp.async copies (plan.cpp checks q's alignment), all in flight before one wait (a
  // load and a store a chunk waited a round trip each), then fenced for wgmma's reads.
  __device__ __forceinline__ void start() {
    constexpr int kChunksPerRow = kHeadDimQK * int(sizeof(Element)) / int(kChunkBytes);  // 72
    constexpr int kValuesPerChunk = int(kChunkBytes / sizeof(Element));
    const int warp = (warpgroup * kThreadsPerWarpgroup + thread) / kWarpSize;  // 0 .. 7
    const int lane = thread % kWarpSize;
    const auto* q = static_cast<const Element*>(p.q);
    unsigned char* tile = reinterpret_cast<unsigned char*>(s.q.data);
    // A warp a row at a time (its address math once a row), a lane 2-3 chunks of it.
#pragma unroll 1
    for (int row = warp; row < kRowsPerTile; row += kConsumerWarps) {
      const int r = work.first_row + row;
      const Element* src = q;  // rows past the sequence's: zeros, nothing read
      uint32_t bytes = 0;
      if (r < work.rows) {
        const int i = r / p.group, h = work.kv_head * p.group + r % p.group;
        src = q + work.batch * p.q_batch_stride + (work.seq.q_begin + i) * p.q_row_stride +
              h * p.q_head_stride;
        bytes = kChunkBytes;
      }
#pragma unroll
      for (int chunk = lane; chunk < kChunksPerRow; chunk += kWarpSize)
        ptx::cp_async_16(ptx::smem_address(tile + QTile::offset(row, chunk * kValuesPerChunk)),
                         src + chunk * kValuesPerChunk, bytes);
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
    ptx::fence_proxy_async_smem();
    sync_consumers();
  }

  // The pair of tiles t (stage 0) and t + 1 (stage 1, when the piece has it), in the order of
  // FlashMLA's seesaw, with m the rows' running max, f0 and f1 the factors the two tiles raise it
  // by, O_L and O_R warpgroup 0's and 1's columns of O:
  //   warpgroup 0: S0 = Q·K0ᵀ; m0 = max(m, rowmax S0) → shared; P0 = exp2(S0 − m0) → stage 0's
  //                rotary slab; O_L = f0·O_L + P0·V0_L (P0 from registers);
  //   warpgroup 1: S1 = Q·K1ᵀ (beside S0); m1 = max(m0, rowmax S1) → shared;
  //                O_R = f0·O_R + P0·V0_R; P1 = exp2(S1 − m1) → stage 1's rotary slab;
  //                O_R = f1·O_R + P1·V1_R (P1 from registers);
  //   warpgroup 0: O_L = f1·O_L + P1·V1_L.
  // So one warpgroup's softmax runs under the other's GEMMs, and each Q·Kᵀ is a whole tile
  // (N = 64). P leaves in bf16/fp16 as the GEMMs take it, rounded once (FlashMLA rescales P0
  // by f1 before writing it: a second rounding). Each warpgroup's row sums follow its own P with
  // the same factors; at the end both are on the scale of the last m, as the O halves are.
  __device__ __forceinline__ void consume(int t) {
    const bool pair = t + 1 < work.n_tiles;
    const int first_key = (work.first_tile + t) * kBlockN;
    if (warpgroup == 0) {
      first_of_pair(first_key, pair);
    } else {
      second_of_pair(first_key + kBlockN, pair);
    }
    ring.advance(0);
    if (pair) ring.advance(1);
  }

  // The epilogue (every GEMM of the piece done, every stage given back at its pair's end): the
  // row sums of both warpgroups, then O's column halves in turn, each normalized by its
  // warpgroup into fp32 rows staged over Q's tile (which the next piece loads anew) and stored
  // by both warpgroups row by row, in runs of 4 columns: to out and lse, or to the piece's
  // partial.
  __device__ __forceinline__ void finish() {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      softmax.sum_lanes(h);
      if (at.column_pair == 0) s.row_sum[warpgroup][at.row0 + 8 * h] = softmax.row_sum[h];
    }
    // Past this barrier both warpgroups' Q·Kᵀ are complete: Q's tile may be overwritten.
    sync_consumers();
    float inverse[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = at.row0 + 8 * h;
      softmax.row_sum[h] = s.row_sum[0][row] + s.row_sum[1][row];
      inverse[h] = softmax.normalizer(h);
      if (warpgroup == 0 && at.column_pair == 0) s.row_lse[row] = softmax.lse(h);
    }
    const PartialRows partial = partial_rows<kHeadDimV>(p, work);
    float* staged = reinterpret_cast<float*>(s.q.data);
    for (int half = 0; half < kConsumerWarpgroups; ++half) {
      if (warpgroup == half) stage_columns(staged, inverse);
      sync_consumers();
      store_staged(staged, half, partial);
      // The staged rows read: the next half, or the next piece's Q, may overwrite them.
      sync_consumers();
    }
  }

 private:
  // Warpgroup 0's part of a pair: the first tile's scores (stage 0), its P handed over and its
  // P·V on this warpgroup's columns, then the second tile's P·V on them.
  __device__ __forceinline__ void first_of_pair(int first_key, bool pair) {
    uint32_t pm[kPRegs];
    {
      float sc[kSAcc];
      scores(sc, 0);
      float tile_max[2];
      scale_and_mask(sc, first_key, tile_max);
      float f0[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) f0[h] = softmax.raise_max(h, tile_max[h]);
      share_max();
      probabilities(sc);
      rescale_o(f0);
      ptx::accumulator_to_operand<Element>(sc, pm);
    }
    zero_v_rows(0, first_key);
    pv_from_registers(pm, 0);
    store_p(pm, 0);
    ptx::named_barrier_arrive(ptx::barrier_id(ptx::NamedBarrier::mla_p_ready, 0),
                              kConsumerThreads);
    release(0, StageHalf::right);  // read by S0, P0 written there
    // m1 (m0 again without a second tile): O_L moves to its scale once P0·V0_L is done.
    wait_max(1);
    float f1[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) f1[h] = softmax.raise_max(h, shared_max(1, h));
    wait_pv();
    ptx::fence_operands(pm);
    release(0, StageHalf::left);  // read by S0 and P0·V0_L
    rescale_o(f1);
    if (!pair) return;
    ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::mla_p_ready, 1), kConsumerThreads);
    pv_from_shared(1);
    wait_pv();
    release(1, StageHalf::left);
    release(1, StageHalf::right);
  }

  // Warpgroup 1's part: the second tile's scores (stage 1, when the piece has it), the first
  // tile's P·V on this warpgroup's columns, then the second's P handed over and its P·V.
  __device__ __forceinline__ void second_of_pair(int first_key, bool pair) {
    float sc[kSAcc];
    float tile_max[2] = {-INFINITY, -INFINITY};
    if (pair) {
      scores(sc, 1);
      release(1, StageHalf::left);  // S1 done; warpgroup 0's P1·V1_L reads it too
      scale_and_mask(sc, first_key, tile_max);
    }
    wait_max(0);
    float f0[2], f1[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      f0[h] = softmax.raise_max(h, shared_max(0, h));
      f1[h] = softmax.raise_max(h, tile_max[h]);
    }
    share_max();
    rescale_o(f0);
    ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::mla_p_ready, 0), kConsumerThreads);
    pv_from_shared(0);
    uint32_t pm[kPRegs];
    if (pair) {
      probabilities(sc);
      ptx::accumulator_to_operand<Element>(sc, pm);
      store_p(pm, 1);
      zero_v_rows(1, first_key);
      ptx::named_barrier_arrive(ptx::barrier_id(ptx::NamedBarrier::mla_p_ready, 1),
                                kConsumerThreads);
    }
    wait_pv();
    release(0, StageHalf::right);  // P0·V0_R done
    if (!pair) return;
    rescale_o(f1);
    pv_from_registers(pm, 1);
    wait_pv();
    ptx::fence_operands(pm);
    release(1, StageHalf::right);  // S1 and P1·V1_R done, P1 written there
  }

  // S = Q · K(stage)ᵀ over the stage's 64 keys, slab by slab as they land; complete on return
  // (no P·V of this warpgroup is in flight: each pair ends with its waits).
  __device__ __forceinline__ void scores(float (&sc)[kSAcc], int stage) {
    const uint64_t q_desc = ptx::kmajor_descriptor(ptx::smem_address(s.q.data));
    const uint64_t k_desc = ptx::kmajor_descriptor(ptx::smem_address(s.k[stage].data));
    ptx::fence_operands(sc);
#pragma unroll
    for (int slab = 0; slab < kSlabsPerTile; ++slab) {
      // After each wait: the accumulators stay the wgmmas' across it (ptxas would insert the
      // fence itself, and say so).
      s.k_full[stage][slab].wait(ring.phase(stage));
      ptx::fence();
#pragma unroll
      for (int step = 0; step < kStepsPerSlab; ++step) {
        const int k_step = slab * kStepsPerSlab + step;
        ptx::mma_ss<kBlockN, Element>(sc, ptx::advance(q_desc, QTile::kmajor_step_offset(k_step)),
                                      ptx::advance(k_desc, KTile::kmajor_step_offset(k_step)),
                                      k_step > 0);
      }
    }
    ptx::commit_group();
    ptx::wait_group<0>();
    ptx::fence_operands(sc);
  }

  // The scores in log2 units, masked where some key of the tile falls outside a row's, and the
  // rows' maxima over the quad's lanes. The mask's loop is a branch of its own, taken by the
  // edge tiles alone: tested inside the loop, ptxas predicated it into every tile (3 integer
  // tests and a select a score).
  __device__ __forceinline__ void scale_and_mask(float (&sc)[kSAcc], int first_key,
                                                 float (&tile_max)[2]) const {
    tile_max[0] = tile_max[1] = -INFINITY;
    if (first_key < clear_lo || first_key + kBlockN - 1 > clear_hi) {
#pragma unroll
      for (int i = 0; i < kSAcc; ++i) {
        const int h = ptx::fragment_row_half(i);
        const int key = first_key + ptx::fragment_column(i, at.column_pair);
        sc[i] = key < keys[h].lo || key > keys[h].hi ? -INFINITY : sc[i] * scale_log2;
        tile_max[h] = fmaxf(tile_max[h], sc[i]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kSAcc; ++i) {
        const int h = ptx::fragment_row_half(i);
        sc[i] *= scale_log2;
        tile_max[h] = fmaxf(tile_max[h], sc[i]);
      }
    }
    softmax.reduce_tile_max(tile_max);
  }

  // The rows' running max after this warpgroup's tile, to the other warpgroup.
  __device__ __forceinline__ void share_max() {
    if (at.column_pair == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) s.row_max[warpgroup][at.row0 + 8 * h] = softmax.row_max[h];
    }
    ptx::named_barrier_arrive(ptx::barrier_id(ptx::NamedBarrier::mla_max_ready, warpgroup),
                              kConsumerThreads);
  }
  __device__ __forceinline__ void wait_max(int other) const {
    ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::mla_max_ready, other),
                            kConsumerThreads);
  }
  __device__ __forceinline__ float shared_max(int other, int h) const {
    return s.row_max[other][at.row0 + 8 * h];
  }

  // Exact: a factor of 1 (the rows' max did not grow) leaves O as it is; once the maxima
  // settle, most tiles of a long piece skip the 128 multiplies.
  __device__ __forceinline__ void rescale_o(const float (&factor)[2]) {
    if (!__all_sync(kFullWarp, factor[0] == 1.0f && factor[1] == 1.0f)) {
#pragma unroll
      for (int i = 0; i < kOAcc; ++i) o[i] *= factor[ptx::fragment_row_half(i)];
    }
  }

  // exp2(x − max) of the tile's log2 scores, added to the row sums.
  __device__ __forceinline__ void probabilities(float (&sc)[kSAcc]) {
#pragma unroll
    for (int i = 0; i < kSAcc; ++i) sc[i] = softmax.probability(ptx::fragment_row_half(i), sc[i]);
  }

  // Where the stage's tile keeps its P: the rotary slab, read by the tile's Q·Kᵀ alone.
  __device__ __forceinline__ unsigned char* p_slab(int stage) const {
    return reinterpret_cast<unsigned char*>(s.k[stage].data) + kRotarySlab * KTile::kSlabBytes;
  }

  // P, packed as the A operand of P·V (the pairs of columns the accumulator holds), into the
  // stage's rotary slab, which its Q·Kᵀ has read; fenced for the other warpgroup's P·V.
  __device__ __forceinline__ void store_p(const uint32_t (&pm)[kPRegs], int stage) {
    unsigned char* p_tile = p_slab(stage);
#pragma unroll
    for (int j = 0; j < kPRegs; ++j) {
      const int i = 2 * j;  // its first accumulator
      const int row = at.row0 + 8 * ptx::fragment_row_half(i);
      *reinterpret_cast<uint32_t*>(
          p_tile + PTile::offset(row, ptx::fragment_column(i, at.column_pair))) = pm[j];
    }
    ptx::fence_proxy_async_smem();
  }

  // V's columns of this warpgroup in the stage's tile: MN-major, 16 keys (2 KB of rows) a
  // k-step.
  __device__ __forceinline__ uint64_t v_descriptor(int stage) const {
    return ptx::mnmajor_descriptor(
        ptx::smem_address(s.k[stage].data) + warpgroup * kVSlabsPerWarpgroup * KTile::kSlabBytes,
        KTile::kSlabBytes);
  }

  // O(my columns) += P · V(stage, my columns), P from this warpgroup's registers.
  __device__ __forceinline__ void pv_from_registers(uint32_t (&pm)[kPRegs], int stage) {
    const uint64_t v_desc = v_descriptor(stage);
    ptx::fence_operands(o);
    ptx::fence_operands(pm);
    ptx::fence();
#pragma unroll
    for (int step = 0; step < kPVSteps; ++step)
      ptx::mma_rs<kColumnsPerWarpgroup, Element>(
          o, *reinterpret_cast<const uint32_t(*)[4]>(&pm[4 * step]),
          ptx::advance(v_desc, step * kVStepBytes), true);
    ptx::commit_group();
    ptx::fence_operands(o);
  }

  // O(my columns) += P · V(stage, my columns), P the other warpgroup's, in the rotary slab.
  __device__ __forceinline__ void pv_from_shared(int stage) {
    const uint64_t p_desc = ptx::kmajor_descriptor(ptx::smem_address(p_slab(stage)));
    const uint64_t v_desc = v_descriptor(stage);
    ptx::fence_operands(o);
    ptx::fence();
#pragma unroll
    for (int step = 0; step < kPVSteps; ++step)
      ptx::mma_ss<kColumnsPerWarpgroup, Element, ptx::Major::k, ptx::Major::mn>(
          o, ptx::advance(p_desc, PTile::kmajor_step_offset(step)),
          ptx::advance(v_desc, step * kVStepBytes), true);
    ptx::commit_group();
    ptx::fence_operands(o);
  }

  __device__ __forceinline__ void wait_pv() {
    ptx::wait_group<0>();
    ptx::fence_operands(o);
  }

  // One arrival per warp: the warp's reads of the stage's half (and its writes of P there) are
  // done.
  __device__ __forceinline__ void release(int stage, StageHalf half) {
    __syncwarp();
    if (thread % kWarpSize == 0) s.k_empty[stage][int(half)].arrive();
  }

  // This warpgroup's 256 columns of O, times each row's normalizer, into the staged rows.
  __device__ __forceinline__ void stage_columns(float* staged, const float (&inverse)[2]) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* dst = staged + (at.row0 + 8 * h) * kStagedRowFloats;
#pragma unroll
      for (int i = 2 * h; i < kOAcc; i += 4) {
        const int column = ptx::fragment_column(i, at.column_pair);
        *reinterpret_cast<float2*>(dst + column) =
            make_float2(o[i] * inverse[h], o[i + 1] * inverse[h]);
      }
    }
  }

  // The staged rows (O's columns half · 256 …) to their destination: a warp's 32 runs are 128
  // consecutive columns of one row.
  __device__ __forceinline__ void store_staged(const float* staged, int half,
                                               const PartialRows& partial) const {
    const int tid = warpgroup * kThreadsPerWarpgroup + thread;
    constexpr int kRunsPerRow = kColumnsPerWarpgroup / kStoreRun;
    for (int idx = tid; idx < kRowsPerTile * kRunsPerRow; idx += kConsumerThreads) {
      const int row = idx / kRunsPerRow, run = idx % kRunsPerRow;
      const int r = work.first_row + row;
      if (r >= work.rows) break;  // rows go up with idx
      const float4 values = *reinterpret_cast<const float4*>(staged + row * kStagedRowFloats +
                                                             run * kStoreRun);
      const float merged[kStoreRun] = {values.x, values.y, values.z, values.w};
      store_piece_row<Element, kHeadDimV>(p, work, partial, r,
                                          half * kColumnsPerWarpgroup + run * kStoreRun, merged,
                                          s.row_lse[row]);
    }
  }

  // The sequence's last tile (the one of this warpgroup's scores): its V rows past the end to
  // zeros before any P·V reads them (0·NaN would poison O); its scores there are masked. The
  // other warpgroup reads the stage only after this one's P hand-off, which follows the fence.
  // Both warpgroups' Q·Kᵀ are done with the tile (the other reads only its P and V).
  __device__ __forceinline__ void zero_v_rows(int stage, int first_key) {
    const int from = max(work.seq.seqlen_k - first_key, 0);
    if (from >= kBlockN) return;
    constexpr int kChunksPerSlabRow = int(ptx::kSwizzleBytes / kChunkBytes);
    constexpr int kChunksPerRow = kHeadDimV / kSlabColumns * kChunksPerSlabRow;
    unsigned char* base = reinterpret_cast<unsigned char*>(s.k[stage].data);
    for (int idx = thread; idx < (kBlockN - from) * kChunksPerRow; idx += kThreadsPerWarpgroup) {
      const int row = from + idx / kChunksPerRow;
      const int slab = idx % kChunksPerRow / kChunksPerSlabRow, chunk = idx % kChunksPerSlabRow;
      *reinterpret_cast<uint4*>(base + slab * KTile::kSlabBytes + row * ptx::kSwizzleBytes +
                                chunk * kChunkBytes) = make_uint4(0, 0, 0, 0);
    }
    ptx::fence_proxy_async_smem();
  }
};

template <typename Element>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_kernel(const __grid_constant__ MlaParams params) {
  extern __shared__ __align__(128) unsigned char smem[];
  using C = Config<Element, Cache::plain>;
  decode_cta_warp_specialized<Consumer<C>, CopyProducer<C>>(params.decode, params.k_map, smem);
}

// FlashMLA's FP8 records (Element: bf16), read through the cache view: no tensor map.
template <typename Element>
__global__ void __launch_bounds__(kThreads, 1)
    mla_fp8_decode_kernel(const __grid_constant__ Params params) {
  extern __shared__ __align__(128) unsigned char smem[];
  using C = Config<Element, Cache::fp8_record>;
  decode_cta_warp_specialized<Consumer<C>, RecordProducer<C>>(params, params.k, smem);
}

}  // namespace hfa::sm90::decode::mla
