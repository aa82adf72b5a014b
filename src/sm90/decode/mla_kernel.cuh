// The MLA decode kernel: DeepSeek's absorbed MLA as MQA over one latent head, q and k 576 wide,
// v the first 512 columns of the same cache row, pages of 64 tokens. The query rows of a kv-head
// (seqlen_q · group, token-major) are the 64 rows of one wgmma.
//
// Work (work.cuh's WorkWalk): by default the balanced schedule (split_schedule.hpp), one
// persistent CTA per (part, kv-head × 64-row tile) walking its part's range of (sequence, tile):
// the whole sequences in it, finished in place (out and lse), and the pieces of the sequences cut
// at its ends, each a partial in the sequence's slots that the combine merges. The schedule
// kernel writes the ranges on the device from the lengths just before (schedule_kernel.cuh);
// this kernel and the combine after it are dependent launches (mla_launch.cuh).
// When the call fixes the splits (num_splits, split_size) or has varlen queries, the uniform
// plan: one CTA per (split, kv-head × row tile, sequence), as every decode kernel. Either way
// the producer and the consumers walk the same pieces through one ring, so the producer loads a
// piece's first tiles while the consumers finish the piece before.
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
//                   (128-byte swizzle) into a 2-stage ring, one mbarrier per copy. FP8 records:
//                   all 4 warps load the page's records (16-byte loads, the next pass's in
//                   flight while one is converted; each page prefetched into L2 two tiles
//                   ahead), write e4m3 · scale rounded to bf16 and the rotary values into the
//                   stage's slabs, and arrive on each slab's mbarrier, one arrival a warp;
//   2 consumer warpgroups — warpgroup w computes the scores of keys 32w … 32w+31 of every tile
//                   (S = Q·Kᵀ, wgmma 64×32, K = 576 from shared memory, slab by slab as the
//                   slabs land), the two exchange their row maxima through shared memory, each
//                   writes its P half (bf16/fp16) to the shared P tile, and then each
//                   accumulates its own 256 columns of O = P·V (wgmma 64×256×64, P and V from
//                   shared memory). V is read as the MN-major view of the K tile's first 8 slabs:
//                   the cache row is loaded once for both uses.
//
// Schedule, per tile t: wait for P·V(t−1) and give its stage back to the producer (the load
// of tile t+1 then runs under S(t), the softmax and P·V(t)), issue S(t) slab by slab as the
// slabs land, wait, mask (only the tiles at the edges of some row's keys), row maxima →
// barrier → rescale O, exponentials → P → barrier → issue P·V(t). Both warpgroups go in step:
// the softmax is not overlapped with GEMMs, and S(t) waits for P·V(t−1) to finish (a few dozen
// cycles of idle tensor pipe; queuing S(t)'s first slab behind P·V(t−1) and waiting with
// wait_group<1> made ptxas serialize the wgmmas, C7514).
// The next step (FlashMLA's seesaw): warpgroup 0 takes the even tiles' scores (N = 64, half the
// Q reads of two N = 32 halves), warpgroup 1 the odd ones', one handing the other its row max
// and rescale through shared memory, so one's softmax runs under the other's GEMMs. It needs a
// second P tile (room made by keeping Q's rotary slab in registers: an rs-form Q·Kᵀ slab, whose
// K-major B the generated rs wrappers do not take yet), and per-slab empty barriers, so that
// the slabs a tile pair frees early (V's left half after warpgroup 0's P·V, the rotary slab
// after Q·Kᵀ) are refilled at once: with whole-stage releases the pair's last P·V would hold
// back the next pair's loads.
//
// Keys past the sequence's end in its last page may hold anything (NaN; dequantized NaN from an
// FP8 record's NaN bytes): their scores are masked, and their V rows are zeroed in shared memory
// before P·V (0·NaN would poison O).
// Rows past the sequence's query rows are zeros in Q and are never stored.
//
// The epilogue gives the last tile's stage back first, then stages O in fp32 one warpgroup's 256
// columns at a time over Q's tile (the K stages may already hold the next piece's tiles), each
// half stored by both warpgroups in runs of 4 columns of a row.
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
  using Ring = ptx::RingPosition<kStages>;
  // A slab's barrier completes on one arrival and the TMA copy's bytes, or on the arrival of
  // every dequantizing warp.
  static constexpr uint32_t kSlabArrivals = kCache == Cache::plain ? 1 : kProducerWarps;
  static_assert(kFits<Element>, "Q, two K stages and P fit one CTA's shared memory");

  __device__ __forceinline__ static void init_barriers(Storage& s) {
#pragma unroll
    for (int stage = 0; stage < kStages; ++stage) {
#pragma unroll
      for (int slab = 0; slab < kSlabsPerTile; ++slab) s.k_full[stage][slab].init(kSlabArrivals);
      s.k_empty[stage].init(kConsumerWarps);
    }
  }
};

// A consumer warpgroup: half of every tile's scores, its 256 columns of O.
template <typename Configuration>
struct Consumer {
  using C = Configuration;
  using Element = typename C::Element;
  using Storage = typename C::Storage;
  using QTile = typename Storage::QTile;
  using KTile = typename Storage::KTile;
  using PTile = typename Storage::PTile;
  static constexpr int kSAcc = kKeysPerWarpgroup / 2;     // 64 × 32 fp32 over 128 threads
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
  const int warpgroup;  // 0 or 1: its keys of each tile, its columns of O
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

  __device__ __forceinline__ void consume(int t) {
    const int stage = ring.stage;
    const int first_key = (work.first_tile + t) * kBlockN;
    const int my_first_key = first_key + warpgroup * kKeysPerWarpgroup;

    // S = Q · K(my keys)ᵀ, slab by slab as they land. The keys' rows start 32 rows into
    // the tile: a multiple of 8 rows, so the swizzle's phase is the tile's.
    float sc[kSAcc];
    {
      const uint64_t q_desc = ptx::kmajor_descriptor(ptx::smem_address(s.q.data));
      const uint64_t k_desc = ptx::kmajor_descriptor(
          ptx::smem_address(s.k[stage].data) + warpgroup * kKeysPerWarpgroup * ptx::kSwizzleBytes);
      // The previous tile's P·V done: its stage goes back to the producer before this tile's
      // GEMMs, so that the next tile's load runs under them, the softmax and P·V.
      ptx::wait_group<0>();
      ptx::fence_operands(o);
      if (t > 0) release((stage + kStages - 1) % kStages);
      ptx::fence_operands(sc);
#pragma unroll
      for (int slab = 0; slab < kSlabsPerTile; ++slab) {
        // After each wait: the accumulators stay the wgmmas' across it (ptxas would insert
        // the fence itself, and say so).
        s.k_full[stage][slab].wait(ring.phase);
        ptx::fence();
#pragma unroll
        for (int step = 0; step < kStepsPerSlab; ++step) {
          const int k_step = slab * kStepsPerSlab + step;
          ptx::mma_ss<kKeysPerWarpgroup, Element>(
              sc, ptx::advance(q_desc, QTile::kmajor_step_offset(k_step)),
              ptx::advance(k_desc, KTile::kmajor_step_offset(k_step)), k_step > 0);
        }
      }
      ptx::commit_group();
      // S, and everything before it: the P tile is free (ours; the other warpgroup's P·V is
      // known done at the row-max barrier below).
      ptx::wait_group<0>();
      ptx::fence_operands(sc);
      ptx::fence_operands(o);
    }

    // Scores in log2 units, masked where some key of the tile falls outside a row's.
    const bool masked = my_first_key < clear_lo || my_first_key + kKeysPerWarpgroup - 1 > clear_hi;
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < kSAcc; ++i) {
      const int h = ptx::fragment_row_half(i);
      float x = sc[i] * scale_log2;
      if (masked) {
        const int key = my_first_key + ptx::fragment_column(i, at.column_pair);
        if (key < keys[h].lo || key > keys[h].hi) x = -INFINITY;
      }
      sc[i] = x;
      tile_max[h] = fmaxf(tile_max[h], x);
    }
    softmax.reduce_tile_max(tile_max);
    // Both warpgroups' maxima: each then raises its rows' max to the same value, so their O
    // halves and row sums stay on one scale.
    if (at.column_pair == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) s.row_max[warpgroup][at.row0 + 8 * h] = tile_max[h];
    }
    sync_consumers();
    float rescale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float other = s.row_max[1 - warpgroup][at.row0 + 8 * h];
      rescale[h] = softmax.raise_max(h, fmaxf(tile_max[h], other));
    }
    // Exact: a factor of 1 (the rows' max did not grow) leaves O as it is; once the maxima
    // settle, most tiles of a long piece skip the 128 multiplies.
    if (!__all_sync(kFullWarp, rescale[0] == 1.0f && rescale[1] == 1.0f)) {
#pragma unroll
      for (int i = 0; i < kOAcc; ++i) o[i] *= rescale[ptx::fragment_row_half(i)];
    }

    // The last tile of the sequence: its V rows past the end to zeros (this warpgroup's slabs:
    // the only ones it reads as V). The other warpgroup's Q·Kᵀ may still read those rows; they
    // only reach scores that are masked.
    const int valid_rows = work.seq.seqlen_k - first_key;
    if (valid_rows < kBlockN) zero_v_rows(stage, valid_rows);

    // P = exp2(x − max) of this warpgroup's keys into its columns of the P tile.
    unsigned char* p_tile = reinterpret_cast<unsigned char*>(s.p.data);
#pragma unroll
    for (int i = 0; i < kSAcc; i += 2) {
      const int h = ptx::fragment_row_half(i);
      const float p0 = softmax.probability(h, sc[i]);
      const float p1 = softmax.probability(h, sc[i + 1]);
      const int key = warpgroup * kKeysPerWarpgroup + ptx::fragment_column(i, at.column_pair);
      *reinterpret_cast<uint32_t*>(p_tile + PTile::offset(at.row0 + 8 * h, key)) =
          ptx::pack_pair<Element>(p0, p1);
    }
    ptx::fence_proxy_async_smem();
    ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::mla_p_ready), kConsumerThreads);

    // O(my columns) += P · V(my columns): V MN-major, 16 keys (2 KB of rows) a k-step.
    {
      const uint64_t p_desc = ptx::kmajor_descriptor(ptx::smem_address(s.p.data));
      const uint64_t v_desc = ptx::mnmajor_descriptor(
          ptx::smem_address(s.k[stage].data) + warpgroup * kVSlabsPerWarpgroup * KTile::kSlabBytes,
          KTile::kSlabBytes);
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
    ring.advance();
  }

  // The epilogue: the last tile's stage back to the producer (the next piece's loads run under
  // what follows), the row sums of both warpgroups, then O's column halves in turn, each
  // normalized by its warpgroup into fp32 rows staged over Q's tile (which the next piece loads
  // anew) and stored by both warpgroups row by row, in runs of 4 columns: to out and lse, or to
  // the piece's partial.
  __device__ __forceinline__ void finish() {
    ptx::wait_group<0>();
    ptx::fence_operands(o);
    if (work.n_tiles > 0) release((ring.stage + kStages - 1) % kStages);
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

  // One arrival per warp: the stage's tile is no longer read by this warp's GEMMs.
  __device__ __forceinline__ void release(int stage) {
    if (thread % kWarpSize == 0) s.k_empty[stage].arrive();
  }

  __device__ __forceinline__ void zero_v_rows(int stage, int first_row) {
    constexpr int kChunksPerSlabRow = int(ptx::kSwizzleBytes / kChunkBytes);
    constexpr int kChunksPerRow = kVSlabsPerWarpgroup * kChunksPerSlabRow;
    unsigned char* base = reinterpret_cast<unsigned char*>(s.k[stage].data) +
                          warpgroup * kVSlabsPerWarpgroup * KTile::kSlabBytes;
    const int from = max(first_row, 0);
    for (int idx = thread; idx < (kBlockN - from) * kChunksPerRow; idx += kThreadsPerWarpgroup) {
      const int row = from + idx / kChunksPerRow;
      const int slab = idx % kChunksPerRow / kChunksPerSlabRow, chunk = idx % kChunksPerSlabRow;
      *reinterpret_cast<uint4*>(base + slab * KTile::kSlabBytes + row * ptx::kSwizzleBytes +
                                chunk * kChunkBytes) = make_uint4(0, 0, 0, 0);
    }
    // Ordered before the P·V wgmma (async proxy) by the fence after P's stores.
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
