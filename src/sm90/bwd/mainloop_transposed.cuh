// A consumer warpgroup's step where the gradients are transposed (TileConfig::
// kTransposedGradients: head dims 192 and 256), and the dKᵀ, dVᵀ it accumulates over all steps:
//   S = Q·Kᵀ, dP = dO·Vᵀ            every query (M) against its 40 of the block's 80 keys
//   P = exp2(S·scale_log2 − LSE_log2),  dS = P ∘ (dP − D)   (× (1 − tanh²) under a softcap)
//   Pᵀ, dSᵀ → shared memory, keys as rows (stmatrix .trans), where both halves meet
//   dVᵀ += dOᵀ·P,  dKᵀ += Qᵀ·dS       its slabs of the head dims (M) × every key
//   dQᵀ = Kᵀ·dSᵀ                      its slabs × every query, one slab at a time, each added
//                                     into the workspace from registers (red.global.add.v4)
// Pᵀ and dSᵀ are read three ways: K-major as the B of dVᵀ and dKᵀ (keys as N, queries as K),
// and dSᵀ MN-major as the B of dQᵀ (queries as N, its 64 columns one whole slab).
#pragma once

#include <type_traits>

#include "sm90/bwd/consumer_base.cuh"
#include "sm90/bwd/fragment_add.cuh"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/scheduler.cuh"
#include "sm90/bwd/shared_storage.cuh"
#include "sm90/common/score_mods.cuh"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/matrix_move.cuh"
#include "sm90/ptx/named_barrier.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/wgmma.cuh"

namespace hfa::sm90::bwd {

// Slab i of a warpgroup's accumulators, kPart registers each: the accumulator of one wgmma.
template <int kPart, int kAcc>
__device__ __forceinline__ float (&accumulator_slab(float (&acc)[kAcc], int i))[kPart] {
  static_assert(kAcc % kPart == 0);
  return *reinterpret_cast<float(*)[kPart]>(acc + i * kPart);
}

template <typename Config, typename Element, int kWarpgroup>
struct TransposedGradientMainloop
    : ConsumerBase<TransposedGradientMainloop<Config, Element, kWarpgroup>, Config, Element,
                   kWarpgroup> {
  using Base = ConsumerBase<TransposedGradientMainloop, Config, Element, kWarpgroup>;
  using typename Base::Mods, typename Base::Storage;
  using Base::kRole, Base::kSAcc, Base::kFactorAcc, Base::kRowStepBytes, Base::kBothWarpgroups;
  using Base::p, Base::smem, Base::thread, Base::at, Base::q_ring, Base::do_ring, Base::scores_ring;
  using Base::release_stage, Base::issue_scores;
  using Dq = typename Storage::Dq;
  using ScoresTile = typename Storage::ScoresTile;  // keys as rows, the block's queries as columns
  static constexpr int kSlabAcc = Config::kKeySlabRegisters;  // 64 dims × the block's keys
  static constexpr int kDkAcc = kRole.dk_count * kSlabAcc;
  static constexpr int kDvAcc = kRole.dv_count * kSlabAcc;
  static constexpr int kDqAcc = Dq::kPartFloats / kThreadsPerWarpgroup;  // 64 dims × the queries
  static constexpr int kColumnGroups = Config::kScoreColumns / 8;  // 8-key groups of S
  static_assert(Config::kTransposedGradients && ScoresTile::kSlabs == 1,
                "Pᵀ and dSᵀ hold the block's queries in one slab: dQᵀ's MN-major B");
  static_assert(std::is_same_v<Dq, TransposedFragmentChunk<Config::kBlockM, Config::kHeadDimQK>>);

  using Base::Base;

  // ---- GEMMs ---------------------------------------------------------------------------------

  // S (or dP) = queries(every one) · keys(key_row0 ..)ᵀ: the queries as M. 40 keys are 5
  // swizzle atoms, so the second warpgroup's keys start on one.
  template <typename QueriesTile, typename KeysTile>
  __device__ __forceinline__ void issue_score_gemm(float (&acc)[kSAcc], const QueriesTile& queries,
                                                   const KeysTile& keys) {
    issue_scores(acc, queries, 0, keys, kRole.key_row0);
  }

  // acc(kSlabCount slabs of the head dims × every key) += operandᵀ · scores, the reduction over
  // the block's queries: A the operand's slab (Q or dO, its dims contiguous: MN-major), one
  // wgmma M a slab; B the Pᵀ or dSᵀ tile, keys as N, read K-major (its queries contiguous). The
  // slabs alternate within a k-step, two independent accumulation chains.
  template <int kSlabCount, int kAcc, typename OperandTile>
  __device__ __forceinline__ void issue_key_gradient(float (&acc)[kAcc], const ScoresTile& scores,
                                                     const OperandTile& operand, int first_slab) {
    static_assert(kAcc == kSlabCount * kSlabAcc);
    const uint64_t a0 = ptx::mnmajor_descriptor(
        ptx::smem_address(operand.data) + first_slab * OperandTile::kSlabBytes, OperandTile::kSlabBytes);
    const uint64_t b0 = ptx::kmajor_descriptor(ptx::smem_address(scores.data));
#pragma unroll
    for (int step = 0; step < Config::kBlockM / kMmaK; ++step) {
      const uint64_t b = ptx::advance(b0, ScoresTile::kmajor_step_offset(step));
#pragma unroll
      for (int slab = 0; slab < kSlabCount; ++slab) {
        const uint64_t a = ptx::advance(a0, slab * OperandTile::kSlabBytes + step * kRowStepBytes);
        ptx::mma_ss<Config::kBlockN, Element, ptx::Major::mn, ptx::Major::k>(
            accumulator_slab<kSlabAcc>(acc, slab), a, b, true);
      }
    }
  }

  // dQᵀ's slab `slab`, 64 dims × every query, over the block's keys: A K's slab (MN-major, its
  // dims contiguous), B the dSᵀ tile with queries as N (MN-major, its queries contiguous).
  __device__ __forceinline__ void issue_dq(float (&dq)[kDqAcc], const ScoresTile& ds, int slab) {
    const uint64_t a0 = ptx::mnmajor_descriptor(
        ptx::smem_address(smem.k.data) + slab * Storage::KTile::kSlabBytes, Storage::KTile::kSlabBytes);
    const uint64_t b0 = ptx::mnmajor_descriptor(ptx::smem_address(ds.data), ScoresTile::kSlabBytes);
#pragma unroll
    for (int step = 0; step < Config::kBlockN / kMmaK; ++step) {
      const uint64_t a = ptx::advance(a0, step * kRowStepBytes);
      const uint64_t b = ptx::advance(b0, step * kRowStepBytes);
      ptx::mma_ss<Config::kBlockM, Element, ptx::Major::mn, ptx::Major::mn>(dq, a, b, step > 0);
    }
  }

  // ---- Element-wise ----------------------------------------------------------------------------

  // S → P in place, after the score policy's modifiers and the mask (modify_and_mask).
  __device__ __forceinline__ void probabilities(float (&s)[kSAcc], float (&factor)[kFactorAcc],
                                                const KeyTile& tile, int m_block, int stage,
                                                const Mods& head_mods) {
    const int first_query = m_block * Config::kBlockM + at.row0;
    const int first_key = tile.n_block * Config::kBlockN + kRole.key_row0 + at.column_pair;
    this->modify_and_mask(s, factor, tile, m_block, head_mods, first_query, first_key);
    // The thread's two queries' LSE; a query past the sequence has +inf (preprocess): P = 0.
    const float lse[2] = {smem.lse_log2[stage][at.row0], smem.lse_log2[stage][at.row0 + 8]};
#pragma unroll
    for (int i = 0; i < kSAcc; ++i) {
      s[i] = exp2f(fmaf(s[i], p.scale_log2, -lse[ptx::fragment_row_half(i)]));
    }
  }

  // dP → dS in place.
  __device__ __forceinline__ void score_gradients(float (&dp)[kSAcc], const float (&prob)[kSAcc],
                                                  const float (&factor)[kFactorAcc], int stage) {
    const float d[2] = {smem.dpsum[stage][at.row0], smem.dpsum[stage][at.row0 + 8]};
#pragma unroll
    for (int i = 0; i < kSAcc; ++i) {
      dp[i] = prob[i] * (dp[i] - d[ptx::fragment_row_half(i)]);
      if constexpr (Mods::kScalesGrad) dp[i] *= factor[i];
    }
  }

  // The warpgroup's P or dS (packed as accumulator_to_operand packs it: register 2j + h holds
  // row half h of 8-key group j) into its 40 key rows of a Pᵀ or dSᵀ tile, each 8×8 matrix
  // stored transposed: matrix (row half h, keys 8j ..) lands on rows key_row0 + 8j .. + 7,
  // queries 16·warp + 8h .. + 7 of each. Lane l gives the address of stored row l % 8 of
  // matrix l / 8: eight keys of one swizzle atom, in eight different 16-byte chunks, so no
  // bank conflicts. Five groups: two .x4 and one .x2.
  __device__ __forceinline__ void store_transposed(ScoresTile& tile, const uint32_t (&packed)[kSAcc / 2]) {
    const int lane = thread % 32, matrix = lane / 8;
    const int query = thread / 32 * 16 + matrix % 2 * 8;
    const uint32_t base = ptx::smem_address(tile.data);
#pragma unroll
    for (int q = 0; q < kColumnGroups / 2; ++q) {
      const uint32_t matrices[4] = {packed[4 * q], packed[4 * q + 1], packed[4 * q + 2],
                                    packed[4 * q + 3]};
      const int key = kRole.key_row0 + 8 * (2 * q + matrix / 2) + lane % 8;
      ptx::stmatrix_x4_trans(base + ScoresTile::offset(key, query), matrices);
    }
    if constexpr (kColumnGroups % 2 == 1) {
      constexpr int kLast = kColumnGroups - 1;
      const uint32_t matrices[2] = {packed[2 * kLast], packed[2 * kLast + 1]};
      const int key = kRole.key_row0 + 8 * kLast + lane % 8;  // lanes 16 .. 31: unused
      ptx::stmatrix_x2_trans(base + ScoresTile::offset(key, query), matrices);
    }
  }

  // ---- The step ------------------------------------------------------------------------------

  __device__ void step(const KeyTile& tile, int head, int m_block, float (&dk)[kDkAcc],
                       float (&dv)[kDvAcc]) {
    const int q_stage = q_ring.stage, do_stage = do_ring.stage, scores_stage = scores_ring.stage;
    uint32_t prob[kSAcc / 2], grad[kSAcc / 2];
    this->scores_and_gradients(tile, head, m_block, prob, grad);
    ScoresTile& p_tile = smem.p[scores_stage];
    ScoresTile& ds_tile = smem.ds[scores_stage];
    store_transposed(p_tile, prob);
    store_transposed(ds_tile, grad);
    ptx::fence_proxy_async_smem();  // the tiles are read by wgmma (async proxy) next
    // Both warpgroups' keys are in (and, two stages back, both are done reading this stage).
    ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::scores_shared), kBothWarpgroups);

    // dV, the first dQ slab, dK: dO's stage is free once the first two are done, and the dQ
    // slab's adds run while dK is on the tensor cores.
    float dq[kDqAcc];
    ptx::fence_operands(dv);
    ptx::fence_operands(dk);
    ptx::fence_operands(dq);
    ptx::fence();
    issue_key_gradient<kRole.dv_count>(dv, p_tile, smem.dout[do_stage], kRole.dv_first);
    ptx::commit_group();
    issue_dq(dq, ds_tile, kRole.dq_first);
    ptx::commit_group();
    issue_key_gradient<kRole.dk_count>(dk, ds_tile, smem.q[q_stage], kRole.dk_first);
    ptx::commit_group();
    ptx::wait_group<1>();
    ptx::fence_operands(dv);
    ptx::fence_operands(dq);
    release_stage(smem.do_empty[do_stage]);
    do_ring.advance();

    float* chunk = p.ws.dq_accum +
                   dq_chunk_index<Config::kBlockM>(p, tile.batch, head, m_block) * Dq::kFloats;
    add_fragment_part(chunk + Dq::part(0, kRole.dq_first), dq, thread);
#pragma unroll
    for (int j = 1; j < kRole.dq_count; ++j) {
      ptx::fence_operands(dq);
      ptx::fence();
      issue_dq(dq, ds_tile, kRole.dq_first + j);
      ptx::commit_group();
      ptx::wait_group<0>();
      ptx::fence_operands(dq);
      add_fragment_part(chunk + Dq::part(0, kRole.dq_first + j), dq, thread);
    }

    ptx::wait_group<0>();
    ptx::fence_operands(dk);
    release_stage(smem.q_empty[q_stage]);
    q_ring.advance();
    scores_ring.advance();
  }
};

}  // namespace hfa::sm90::bwd
