// A consumer warpgroup's work on one step — the CTA's key block against one query block — and
// the dK, dV it accumulates over all steps (see tile_config.hpp for who computes what):
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ                       (issued together)
//   P = exp2(S·scale_log2 − LSE_log2)             (no max, no sum: the forward's LSE normalizes)
//   dS = P ∘ (dP − D)   (× (1 − tanh²) under a softcap)
//   dV += Pᵀ·dO,  dK += dSᵀ·Q                      (Pᵀ, dSᵀ from registers when keys split)
//   dQ = dS·K over the block's keys                (dSᵀ of both warpgroups from shared memory)
//     or dQᵀ = Kᵀ·dSᵀ, the head dim as M           (dS stored queries × keys: kDqTransposed)
//   → the workspace: added from registers, or through the fp32 dQ tile in shared memory that
//     the writer warp adds (tile_config.hpp, kDqFromRegisters).
// dQ goes out one slab at a time (64 × 64, or 64 dims × 80 queries transposed), so at most 32
// (40) of its accumulators live at once. A kernel whose walks take turns (TileConfig::
// kTurnsFromSteps, kTakesTurns) runs lagged_step instead of step: dQ a step late.
#pragma once

#include <type_traits>

#include "sm90/bwd/consumer_base.cuh"
#include "sm90/bwd/fragment_add.cuh"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/scheduler.cuh"
#include "sm90/bwd/shared_storage.cuh"
#include "sm90/common/exp2.cuh"
#include "sm90/common/score_mods.cuh"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/matrix_move.cuh"
#include "sm90/ptx/named_barrier.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/wgmma.cuh"

namespace hfa::sm90::bwd {

template <typename Config, typename Element, int kWarpgroup>
struct ConsumerMainloop
    : ConsumerBase<ConsumerMainloop<Config, Element, kWarpgroup>, Config, Element, kWarpgroup> {
  using Base = ConsumerBase<ConsumerMainloop, Config, Element, kWarpgroup>;
  using typename Base::Mods, typename Base::Storage;
  using Base::kRole, Base::kSAcc, Base::kFactorAcc, Base::kRowStepBytes, Base::kBothWarpgroups;
  using Base::p, Base::smem, Base::thread, Base::at, Base::q_ring, Base::do_ring, Base::scores_ring;
  using Base::release_stage, Base::issue_scores;
  using Dq = typename Storage::Dq;
  static constexpr int kDkAcc = kRole.dk_count * kSlabColumns / 2;
  static constexpr int kDvAcc = kRole.dv_count * kSlabColumns / 2;
  static constexpr int kDqAcc = Dq::kPartFloats / kThreadsPerWarpgroup;  // a part over 128 threads
  // Keys split: this warpgroup's Sᵀ spans every query, so Pᵀ and dSᵀ are whole A operands of
  // dV and dK in its registers. Head dims split: they meet in shared memory first.
  static constexpr bool kScoresInRegisters = Config::kKeysSplit;
  static_assert(kScoresInRegisters == (Config::kScoreColumns == Config::kBlockM));

  ptx::RingPosition<Config::kStagesDq> dq_ring;
  // Taking turns (Config::kTakesTurns, lagged_step): the step whose dQ is still to be computed,
  // if any.
  ptx::RingPosition<Config::kStagesScores> lagging_ring;
  bool lagging = false;

  using Base::Base;

  // One lane per warp signals (arrival counts are 4 per warpgroup), once every lane of the warp
  // is done with the buffer.
  __device__ __forceinline__ void release(ptx::Mbarrier& empty) {
    __syncwarp();
    if (thread % 32 == 0) empty.arrive();
  }
  // ---- GEMMs ---------------------------------------------------------------------------------

  // Sᵀ (or dPᵀ) = keys(key_row0 ..) · queries(query_col0 ..)ᵀ: the keys as M.
  template <typename QueriesTile, typename KeysTile>
  __device__ __forceinline__ void issue_score_gemm(float (&acc)[kSAcc], const QueriesTile& queries,
                                                   const KeysTile& keys) {
    issue_scores(acc, keys, kRole.key_row0, queries, kRole.query_col0);
  }

  // acc(64 keys × slabs of `operand`) += scoresᵀ · operand, the reduction over the block's
  // queries: scores from registers (packed A fragments) or from a shared Scores tile.
  template <int kSlabCount, int kAcc, typename SharedScores, typename OperandTile>
  __device__ __forceinline__ void issue_key_gradient(float (&acc)[kAcc],
                                                     const uint32_t (&scores)[kSAcc / 2],
                                                     const SharedScores& shared,
                                                     const OperandTile& operand, int first_slab) {
    static_assert(kAcc == kSlabCount * kSlabColumns / 2);
    const uint64_t b0 = ptx::mnmajor_descriptor(
        ptx::smem_address(operand.data) + first_slab * OperandTile::kSlabBytes, OperandTile::kSlabBytes);
    const uint64_t a0 = ptx::kmajor_descriptor(ptx::smem_address(shared.data) +
                                               kRole.key_row0 * ptx::kSwizzleBytes);
#pragma unroll
    for (int step = 0; step < Config::kBlockM / kMmaK; ++step) {
      const uint64_t b = ptx::advance(b0, step * kRowStepBytes);
      if constexpr (kScoresInRegisters) {
        const uint32_t a[4] = {scores[4 * step], scores[4 * step + 1], scores[4 * step + 2],
                               scores[4 * step + 3]};
        ptx::mma_rs<kSlabCount * kSlabColumns, Element>(acc, a, b, true);
      } else {
        static_assert(std::is_same_v<SharedScores, typename Storage::ScoresTile>);
        const uint64_t a = ptx::advance(a0, Storage::ScoresTile::kmajor_step_offset(step));
        ptx::mma_ss<kSlabCount * kSlabColumns, Element, ptx::Major::k, ptx::Major::mn>(acc, a, b, true);
      }
    }
  }

  // dQ's slab `slab` over the block's keys, K's slab read MN-major (its dims are contiguous):
  //   dq = dS(rows dq_row0..) · K(slab), dS read from the dSᵀ tile, whose query columns make it
  //     MN-major, as K is (keys are its rows);
  //   transposed (kDqTransposed), dq = dQᵀ(slab) = K(slab)ᵀ · dSᵀ, 64 dims × every query: K's
  //     slab is A, and B the dS tile, queries as rows, read K-major (its keys are contiguous),
  //     as Q is in Sᵀ = K·Qᵀ.
  __device__ __forceinline__ void issue_dq(float (&dq)[kDqAcc], const typename Storage::DsTile& ds,
                                           int slab) {
    if constexpr (Config::kDqTransposed) {
      const uint64_t a0 = ptx::mnmajor_descriptor(
          ptx::smem_address(smem.k.data) + slab * Storage::KTile::kSlabBytes, Storage::KTile::kSlabBytes);
      const uint64_t b0 = ptx::kmajor_descriptor(ptx::smem_address(ds.data));
#pragma unroll
      for (int step = 0; step < Config::kBlockN / kMmaK; ++step) {
        const uint64_t a = ptx::advance(a0, step * kRowStepBytes);
        const uint64_t b = ptx::advance(b0, Storage::DsTile::kmajor_step_offset(step));
        ptx::mma_ss<Config::kBlockM, Element, ptx::Major::mn, ptx::Major::k>(dq, a, b, step > 0);
      }
    } else {
      const uint64_t a0 = ptx::mnmajor_descriptor(
          ptx::smem_address(ds.data) + kRole.dq_row0 / kSlabColumns * Storage::ScoresTile::kSlabBytes,
          Storage::ScoresTile::kSlabBytes);
      const uint64_t b0 = ptx::mnmajor_descriptor(
          ptx::smem_address(smem.k.data) + slab * Storage::KTile::kSlabBytes, Storage::KTile::kSlabBytes);
#pragma unroll
      for (int step = 0; step < Config::kBlockN / kMmaK; ++step) {
        const uint64_t a = ptx::advance(a0, step * kRowStepBytes);
        const uint64_t b = ptx::advance(b0, step * kRowStepBytes);
        ptx::mma_ss<kSlabColumns, Element, ptx::Major::mn, ptx::Major::mn>(dq, a, b, step > 0);
      }
    }
  }

  // ---- Element-wise ----------------------------------------------------------------------------

  // The thread's column pair j of the tile: queries query_col0 + 8j + column_pair, + 1.
  __device__ __forceinline__ float2 column_pair(const float* per_query, int j) const {
    return *reinterpret_cast<const float2*>(per_query + kRole.query_col0 + 8 * j + at.column_pair);
  }

  // 2^x for the thread's i-th score: on MUFU, or every kExp2OnFmaEvery-th on the FMA pipes.
  static __device__ __forceinline__ float exponential(int i, float x) {
    constexpr int kEvery = Config::kExp2OnFmaEvery;
    if constexpr (kEvery > 0) {
      if ((i + 1) % kEvery == 0) return exp2_on_fma_pipes(x);
    }
    return exp2f(x);
  }

  // Sᵀ → P in place, after the score policy's modifiers and the mask (modify_and_mask).
  __device__ __forceinline__ void probabilities(float (&s)[kSAcc], float (&factor)[kFactorAcc],
                                                const KeyTile& tile, int m_block, int stage,
                                                const Mods& head_mods) {
    const int first_key = tile.n_block * Config::kBlockN + kRole.key_row0 + at.row0;
    const int first_query = m_block * Config::kBlockM + kRole.query_col0 + at.column_pair;
    this->modify_and_mask(s, factor, tile, m_block, head_mods, first_key, first_query);
    // A query past the sequence has LSE +inf (preprocess): P = 0 there without a test.
#pragma unroll
    for (int j = 0; j < kSAcc / 4; ++j) {
      const float2 lse = column_pair(smem.lse_log2[stage], j);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float* e = s + 4 * j + 2 * half;
        e[0] = exponential(4 * j + 2 * half, fmaf(e[0], p.scale_log2, -lse.x));
        e[1] = exponential(4 * j + 2 * half + 1, fmaf(e[1], p.scale_log2, -lse.y));
      }
    }
  }

  // dPᵀ → dSᵀ in place.
  __device__ __forceinline__ void score_gradients(float (&dp)[kSAcc], const float (&prob)[kSAcc],
                                                  const float (&factor)[kFactorAcc], int stage) {
#pragma unroll
    for (int j = 0; j < kSAcc / 4; ++j) {
      const float2 d = column_pair(smem.dpsum[stage], j);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = 4 * j + 2 * half;
        dp[i] = prob[i] * (dp[i] - d.x);
        dp[i + 1] = prob[i + 1] * (dp[i + 1] - d.y);
        if constexpr (Mods::kScalesGrad) {
          dp[i] *= factor[i];
          dp[i + 1] *= factor[i + 1];
        }
      }
    }
  }

  // The warpgroup's part of a Scores tile, 16 columns a stmatrix: packed register i holds the
  // pair (row half i % 2, columns 8·(i / 2) + column_pair, + 1) of accumulator_to_operand's
  // packing, so registers 4q .. 4q + 3 are the 8×8 matrices (row half 0, 1) × (columns 16q,
  // 16q + 8), and lane l gives the address of row l % 8 of matrix l / 8.
  __device__ __forceinline__ void store_scores(typename Storage::ScoresTile& tile,
                                               const uint32_t (&packed)[kSAcc / 2]) {
    const int lane = thread % 32, matrix = lane / 8;
    const int row = kRole.key_row0 + thread / 32 * 16 + matrix % 2 * 8 + lane % 8;
    const uint32_t base = ptx::smem_address(tile.data);
#pragma unroll
    for (int q = 0; q < kSAcc / 8; ++q) {
      const uint32_t matrices[4] = {packed[4 * q], packed[4 * q + 1], packed[4 * q + 2],
                                    packed[4 * q + 3]};
      const int column = kRole.query_col0 + 16 * q + matrix / 2 * 8;
      ptx::stmatrix_x4(base + Storage::ScoresTile::offset(row, column), matrices);
    }
  }

  // The warpgroup's dSᵀ into the dS tile (queries × keys: kDqTransposed), the same 8×8
  // matrices as store_scores each stored transposed: matrix (row half h, columns 16q + 8c)
  // lands on rows (queries) 16q + 8c .. + 7, keys key_row0 + 16·warp + 8h .. + 7 of each; lane
  // l gives the address of row l % 8 of matrix l / 8. A matrix's 8 rows are 8 rows of a
  // swizzle atom, so they fall in 8 different 16-byte chunks: no bank conflicts.
  __device__ __forceinline__ void store_scores_transposed(typename Storage::DsTile& tile,
                                                          const uint32_t (&packed)[kSAcc / 2]) {
    const int lane = thread % 32, matrix = lane / 8;
    const int key = kRole.key_row0 + thread / 32 * 16 + matrix % 2 * 8;
    const uint32_t base = ptx::smem_address(tile.data);
#pragma unroll
    for (int q = 0; q < kSAcc / 8; ++q) {
      const uint32_t matrices[4] = {packed[4 * q], packed[4 * q + 1], packed[4 * q + 2],
                                    packed[4 * q + 3]};
      const int query = kRole.query_col0 + 16 * q + matrix / 2 * 8 + lane % 8;
      ptx::stmatrix_x4_trans(base + Storage::DsTile::offset(query, key), matrices);
    }
  }

  // dS as dQ's GEMM reads it (Storage::DsTile).
  __device__ __forceinline__ void store_ds(typename Storage::DsTile& tile,
                                           const uint32_t (&packed)[kSAcc / 2]) {
    if constexpr (Config::kDqTransposed) store_scores_transposed(tile, packed);
    else store_scores(tile, packed);
  }

  // dQ slab → its part of the shared dQ tile, in accumulator order (workspace.hpp, DqChunk).
  __device__ __forceinline__ void store_dq(const float (&dq)[kDqAcc], int slab) {
    float4* part = reinterpret_cast<float4*>(smem.dq[dq_ring.stage] +
                                             Dq::part(kRole.dq_row0 / kRowsPerWarpgroup, slab));
#pragma unroll
    for (int group = 0; group < kDqAcc / 4; ++group) {
      part[group * kThreadsPerWarpgroup + thread] =
          make_float4(dq[4 * group], dq[4 * group + 1], dq[4 * group + 2], dq[4 * group + 3]);
    }
  }

  // dQ slab → the workspace's chunk, from registers: the same order as the shared tile.
  __device__ __forceinline__ void add_dq(const float (&dq)[kDqAcc], float* chunk, int slab) {
    static_assert(!Config::kDqTransposed, "add_fragment_part writes 64 × 64 parts");
    add_fragment_part(chunk + Dq::part(kRole.dq_row0 / kRowsPerWarpgroup, slab), dq, thread);
  }

  // ---- The step ------------------------------------------------------------------------------

  // dQ's slabs after the first, which `dq` holds complete: each out (into the writer's tile,
  // or added from registers into `chunk`) before the next is computed into the same registers.
  __device__ __forceinline__ void finish_dq(float (&dq)[kDqAcc], const typename Storage::DsTile& ds,
                                            float* chunk) {
    constexpr bool kThroughWriter = !Config::kDqFromRegisters;  // tile_config.hpp
    auto emit_dq = [&](int slab) {
      if constexpr (kThroughWriter) store_dq(dq, slab);
      else add_dq(dq, chunk, slab);
    };
    // The writer has read this tile's last use.
    if constexpr (kThroughWriter) smem.dq_empty[dq_ring.stage].wait(dq_ring.phase ^ 1);
    emit_dq(kRole.dq_first);
#pragma unroll
    for (int j = 1; j < kRole.dq_count; ++j) {
      ptx::fence_operands(dq);
      ptx::fence();
      issue_dq(dq, ds, kRole.dq_first + j);
      ptx::commit_group();
      ptx::wait_group<0>();
      ptx::fence_operands(dq);
      emit_dq(kRole.dq_first + j);
    }
    if constexpr (kThroughWriter) {
      ptx::fence_proxy_async_smem();  // the writer's bulk add reads the tile (async proxy)
      release(smem.dq_full[dq_ring.stage]);
      dq_ring.advance();
    }
  }

  // ---- Taking turns (Config::kTakesTurns, keys split) -----------------------------------------
  // dV and dK need only this warpgroup's Pᵀ and dSᵀ (from registers) and are issued as soon as
  // they are packed; dQ needs both warpgroups' dSᵀ, so a step computes the previous step's dQ,
  // whose dSᵀ the other warpgroup stored a step ago (step_done): the warpgroups never wait for
  // each other inside a step, and they take turns at P's exponentials (scores_and_gradients),
  // so that one's exponentials run beside the other's GEMMs (docs/decisions/044).

  // Warpgroup 0 takes the first turn: warpgroup 1 hands it one before the walk.
  __device__ void begin_turns() {
    if constexpr (kWarpgroup == 1) {
      ptx::named_barrier_arrive(ptx::barrier_id(ptx::NamedBarrier::warp_scheduler, 0),
                                kBothWarpgroups);
    }
  }

  __device__ void lagged_step(const KeyTile& tile, int head, int m_block, float (&dk)[kDkAcc],
                              float (&dv)[kDvAcc]) {
    static_assert(Config::kTakesTurns && kScoresInRegisters && !Config::kDqFromRegisters);
    const int q_stage = q_ring.stage, do_stage = do_ring.stage;
    uint32_t prob[kSAcc / 2], grad[kSAcc / 2];
    this->template scores_and_gradients<true>(tile, head, m_block, prob, grad);
    ptx::fence_operands(dv);
    ptx::fence_operands(dk);
    ptx::fence_operands(prob);
    ptx::fence_operands(grad);
    ptx::fence();
    // The shared tile arguments are not read: Pᵀ and dSᵀ come from registers.
    issue_key_gradient<kRole.dv_count>(dv, prob, smem.ds[0], smem.dout[do_stage], kRole.dv_first);
    issue_key_gradient<kRole.dk_count>(dk, grad, smem.ds[0], smem.q[q_stage], kRole.dk_first);
    ptx::commit_group();

    // The other warpgroup's last step is done: its dSᵀ is in that step's stage, and its dQ GEMM
    // no longer reads this step's stage (two stages: the one before last).
    if (lagging) other_step_done(lagging_ring).wait(lagging_ring.phase);
    store_ds(smem.ds[scores_ring.stage], grad);
    // dSᵀ is read by wgmma (async proxy) in the next step: the lagged dQ's own fence, after its
    // tile's stores, orders these stores too before step_done (docs/decisions/046).
    if (lagging) lagged_dq(lagging_ring.stage);
    else ptx::fence_proxy_async_smem();
    ptx::wait_group<0>();
    ptx::fence_operands(dv);
    ptx::fence_operands(dk);
    ptx::fence_operands(prob);
    ptx::fence_operands(grad);
    release(own_step_done(scores_ring));
    release_stage(smem.do_empty[do_stage]);
    release_stage(smem.q_empty[q_stage]);
    do_ring.advance();
    q_ring.advance();
    lagging_ring = scores_ring;
    lagging = true;
    scores_ring.advance();
  }

  // After the walk: its last step's dQ, and warpgroup 1's last turn (handed to warpgroup 0)
  // taken, so that the turn barriers end balanced.
  __device__ void end_turns() {
    if (lagging) {
      other_step_done(lagging_ring).wait(lagging_ring.phase);
      lagged_dq(lagging_ring.stage);
    }
    if constexpr (kWarpgroup == 0) {
      ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::warp_scheduler, 0),
                              kBothWarpgroups);
    }
  }

  // A lagged step's dQ, from the dSᵀ tiles of a stage both warpgroups have stored.
  __device__ __forceinline__ void lagged_dq(int stage) {
    float dq[kDqAcc];
    ptx::fence_operands(dq);
    ptx::fence();
    issue_dq(dq, smem.ds[stage], kRole.dq_first);
    ptx::commit_group();
    ptx::wait_group<0>();
    ptx::fence_operands(dq);
    finish_dq(dq, smem.ds[stage], nullptr);
  }

  __device__ ptx::Mbarrier& own_step_done(const ptx::RingPosition<Config::kStagesScores>& at) {
    return smem.step_done[kWarpgroup][at.stage];
  }
  __device__ ptx::Mbarrier& other_step_done(const ptx::RingPosition<Config::kStagesScores>& at) {
    return smem.step_done[1 - kWarpgroup][at.stage];
  }

  // ---- The shared step -------------------------------------------------------------------------

  // The Pᵀ tile of a stage: its own when the warpgroups share P, else dS's (never read).
  __device__ __forceinline__ auto& prob_tile(int stage) {
    if constexpr (kScoresInRegisters) return smem.ds[stage];
    else return smem.p[stage];
  }

  // The warpgroups' dSᵀ (and, head dims split, Pᵀ) meet in shared memory before dQ.
  __device__ void step(const KeyTile& tile, int head, int m_block, float (&dk)[kDkAcc],
                       float (&dv)[kDvAcc]) {
    const int q_stage = q_ring.stage, do_stage = do_ring.stage, scores_stage = scores_ring.stage;
    uint32_t prob[kSAcc / 2], grad[kSAcc / 2];
    this->scores_and_gradients(tile, head, m_block, prob, grad);
    typename Storage::DsTile& ds_tile = smem.ds[scores_stage];
    store_ds(ds_tile, grad);
    if constexpr (!kScoresInRegisters) store_scores(prob_tile(scores_stage), prob);

    // dV first, from registers before the other warpgroup's scores are in; from the shared
    // tiles after them.
    auto issue_dv = [&] {
      ptx::fence_operands(dv);
      ptx::fence_operands(prob);
      ptx::fence();
      issue_key_gradient<kRole.dv_count>(dv, prob, prob_tile(scores_stage), smem.dout[do_stage],
                                         kRole.dv_first);
      ptx::commit_group();
    };
    if constexpr (kScoresInRegisters) issue_dv();
    // The tiles are read by wgmma (async proxy) after the barrier; fenced after dV's issue, which
    // covers the stores' latency (docs/decisions/046).
    ptx::fence_proxy_async_smem();
    ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::scores_shared), kBothWarpgroups);
    if constexpr (!kScoresInRegisters) issue_dv();

    float dq[kDqAcc];
    ptx::fence_operands(dq);
    ptx::fence_operands(dk);
    ptx::fence_operands(grad);
    ptx::fence();
    issue_dq(dq, ds_tile, kRole.dq_first);
    ptx::commit_group();
    issue_key_gradient<kRole.dk_count>(dk, grad, ds_tile, smem.q[q_stage], kRole.dk_first);
    ptx::commit_group();
    ptx::wait_group<1>();  // dV and the first dQ slab are done; dK may still run
    ptx::fence_operands(dv);
    ptx::fence_operands(prob);
    ptx::fence_operands(dq);
    release_stage(smem.do_empty[do_stage]);
    do_ring.advance();

    finish_dq(dq, ds_tile,
              p.ws.dq_accum + dq_chunk_index<Config::kBlockM>(p, tile.batch, head, m_block) *
                                  Dq::kFloats);

    ptx::wait_group<0>();
    ptx::fence_operands(dk);
    ptx::fence_operands(grad);
    release_stage(smem.q_empty[q_stage]);
    q_ring.advance();
    scores_ring.advance();
  }
};

}  // namespace hfa::sm90::bwd
