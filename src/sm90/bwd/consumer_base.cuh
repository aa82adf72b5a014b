// What the backward's two consumer mainloops share: mainloop.cuh (the scores transposed, Sᵀ with
// the keys as wgmma M) and mainloop_transposed.cuh (S with the queries as M, the gradients
// transposed). A warpgroup's state and rings, the stage releases, the score GEMM over two K-major
// tiles, the padding zeroed before a GEMM reads it, and a step's first half, S and dP to P and
// dS, in which only the score GEMMs' operands differ: the mainloop (Derived) says which tile is
// the GEMM's A (issue_score_gemm) and how its fragment maps to queries and keys (probabilities,
// score_gradients).
#pragma once

#include "sm90/bwd/mask.cuh"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/scheduler.cuh"
#include "sm90/bwd/shared_storage.cuh"
#include "sm90/common/block_sparse.cuh"
#include "sm90/common/score_mods.cuh"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/named_barrier.cuh"
#include "sm90/ptx/tma.cuh"  // fence_proxy_async_smem
#include "sm90/ptx/wgmma.cuh"

namespace hfa::sm90::bwd {

// A block-sparse step's mask (TileConfig::kBlockSparse), ConsumerBase::sparse_mask: whether its
// block pair is partial and, if so, the thread's bits of it (FragmentBits over the step's
// queries, kWords = kBlockM / 32 of them, a row per key: the preprocess's transposed bits),
// loaded at the top of the step so that their latency hides behind the step's waits. A base of
// ConsumerBase, empty where the configuration is dense, so that the dense consumers' layout and
// code stay what they were (an empty member, even [[no_unique_address]], stopped NVVM: "internal
// error during structure layout").
template <bool kBlockSparse, int kWords>
struct SparseStepMaskOf {};
template <int kWords>
struct SparseStepMaskOf<true, kWords> {
  struct {
    bool partial = false;
    FragmentBits<kWords> bits;
  } sparse_mask;  // the current step's
};

template <typename Derived, typename Config, typename Element, int kWarpgroup>
struct ConsumerBase : SparseStepMaskOf<Config::kBlockSparse, Config::kBlockM / 32> {
  using Storage = SharedStorage<Config, Element>;
  static constexpr WarpgroupRole kRole = Config::role(kWarpgroup);
  static constexpr int kSAcc = Config::kScoreColumns / 2;  // 64 rows × its columns, 128 threads
  // The score policy's dS factor of each score (softcap: 1 − tanh²).
  using Mods = typename Config::Mods;
  static constexpr int kFactorAcc = Mods::kScalesGrad ? kSAcc : 1;
  static constexpr int kKSteps = kSlabColumns / kMmaK;  // k16 steps inside one 128-byte slab
  static constexpr uint32_t kKStepBytes = kMmaK * sizeof(Element);
  static constexpr uint32_t kRowStepBytes = kMmaK * ptx::kSwizzleBytes;  // 16 rows of a tile
  static constexpr uint32_t kBothWarpgroups = 2 * kThreadsPerWarpgroup;

  const Params& p;
  Storage& smem;
  int thread;  // within the warpgroup
  ptx::FragmentCoords at;
  ptx::RingPosition<Config::kStagesQ> q_ring;
  ptx::RingPosition<Config::kStagesDO> do_ring;
  ptx::RingPosition<Config::kStagesScores> scores_ring;
  // Words of a partial block's bit rows that one step's queries span.
  static constexpr int kSparseStepWords = Config::kBlockM / 32;

  __device__ ConsumerBase(const Params& params, Storage& storage, int thread_in_warpgroup)
      : p(params), smem(storage), thread(thread_in_warpgroup), at(ptx::fragment_coords(thread)) {}

  // Block-sparse: the mask of the step at `position` of `blocks` into sparse_mask. The
  // thread's keys (rows) are its fragment rows in the key block (one mask block); its queries
  // the step's kBlockM columns of its mask query block (tile m_block % kStepsPerQueryBlock).
  __device__ __forceinline__ void load_sparse_mask(const SparseQueryBlocks& blocks, int position,
                                                   int m_block) {
    static_assert(Config::kBlockSparse && !Config::kTransposedGradients);
    auto& sparse_mask = this->sparse_mask;
    sparse_mask.partial = blocks.is_partial(position);
    sparse_mask.bits = all_visible_bits<kSparseStepWords>();
    if (sparse_mask.partial) {
      const int key = kRole.key_row0 + at.row0;
      const int first_word = m_block % Config::kStepsPerQueryBlock * kSparseStepWords;
      const int32_t* const rows[2] = {blocks.bits_row(position, key) + first_word,
                                      blocks.bits_row(position, key + 8) + first_word};
      sparse_mask.bits = load_fragment_bits<kSparseStepWords>(rows, at.column_pair);
    }
  }

  // A Q or dO stage: every thread releases its own reads (tile_config.hpp, kStageReleasers).
  __device__ __forceinline__ void release_stage(ptx::Mbarrier& empty) { empty.arrive(); }

  // acc = rows(row0 ..) · columns(column0 ..)ᵀ over the slabs of both tiles (K-major): the
  // warpgroup's 64 rows against its kScoreColumns columns. row0 and column0 start on a swizzle
  // atom (8 rows).
  template <typename RowTile, typename ColumnTile>
  __device__ __forceinline__ void issue_scores(float (&acc)[kSAcc], const RowTile& rows, int row0,
                                               const ColumnTile& columns, int column0) {
    static_assert(RowTile::kSlabs == ColumnTile::kSlabs);
    const uint64_t a0 = ptx::kmajor_descriptor(ptx::smem_address(rows.data) +
                                               row0 * ptx::kSwizzleBytes);
    const uint64_t b0 = ptx::kmajor_descriptor(ptx::smem_address(columns.data) +
                                               column0 * ptx::kSwizzleBytes);
#pragma unroll
    for (int slab = 0; slab < RowTile::kSlabs; ++slab) {
#pragma unroll
      for (int step = 0; step < kKSteps; ++step) {
        const uint32_t offset = step * kKStepBytes;
        const uint64_t a = ptx::advance(a0, slab * RowTile::kSlabBytes + offset);
        const uint64_t b = ptx::advance(b0, slab * ColumnTile::kSlabBytes + offset);
        ptx::mma_ss<Config::kScoreColumns, Element>(acc, a, b, slab > 0 || step > 0);
      }
    }
  }

  // The score policy's modifiers on the scores (their dS factor into `factor`, taken before
  // masking: softcap's 1 − tanh² would be NaN at −inf), then the mask where the tile needs one.
  // first_row, first_column: the thread's first key and query (keys as rows: mainloop.cuh), or
  // its first query and key (queries as rows, the gradients transposed). head_mods: a
  // positional policy's modifiers of the step's head (ALiBi's slope; both row halves are of
  // that one head).
  __device__ __forceinline__ void modify_and_mask(float (&s)[kSAcc], float (&factor)[kFactorAcc],
                                                  const KeyTile& tile, int m_block,
                                                  const Mods& head_mods, int first_row,
                                                  int first_column) {
    constexpr bool kQueriesAsRows = Config::kTransposedGradients;
    if constexpr (Mods::kPositional) {
      float diagonal_column[2];
      if constexpr (kQueriesAsRows) {
        fragment_diagonal_by_query(diagonal_column, first_row, first_column, tile.seq);
      } else {
        fragment_diagonal(diagonal_column, first_row, first_column, tile.seq);
      }
      const Mods row_mods[2] = {head_mods, head_mods};
      apply_score_mods(s, row_mods, diagonal_column);
    } else {
      apply_score_mods(s, factor, score_mods<Mods>(p.softcap_prescale));
    }
    if (Scheduler<Config>::needs_mask(p, tile, m_block)) {
      if constexpr (kQueriesAsRows) {
        mask_scores_by_query<Config::kWindowed>(s, first_row, first_column, tile.seq, p);
      } else {
        mask_scores(s, first_row, first_column, tile.seq, p);
      }
    }
    // A partial block of a block-sparse mask ANDs its bits in (keys as rows: load_sparse_mask).
    if constexpr (Config::kBlockSparse) {
      if (this->sparse_mask.partial) mask_clear_bits(s, this->sparse_mask.bits);
    }
  }

  // After both consumer warpgroups zeroed tile rows past a sequence's used length
  // (zero_rows_from): the zeros are visible to either's wgmma.
  __device__ __forceinline__ void zero_padding_and_sync() {
    ptx::fence_proxy_async_smem();  // wgmma (async proxy) reads the zeros
    ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::padding_zeroed), kBothWarpgroups);
  }

  // K and V rows past the used keys (seqused_k) to zeros, once, before any step reads them.
  __device__ void zero_key_padding(const KeyTile& tile) {
    const int valid = tile.seq.seqlen_k - tile.n_block * Config::kBlockN;
    if (p.seqused_k == nullptr || valid >= Config::kBlockN) return;
    const int t = kWarpgroup * kThreadsPerWarpgroup + thread;
    zero_rows_from(smem.k, valid, t, kBothWarpgroups);
    zero_rows_from(smem.v, valid, t, kBothWarpgroups);
    zero_padding_and_sync();
  }

  // A step's first half, on the current Q and dO stages: the scores S and dP of the warpgroup's
  // share (dO's wait between the two GEMMs, so that S runs while dO lands), then P and dS,
  // packed as operand pairs (accumulator_to_operand) into prob and grad. Q and dO rows past the
  // used queries (seqused_q) are zeroed first.
  template <bool kTakeTurns = false>
  __device__ __forceinline__ void scores_and_gradients(const KeyTile& tile, int head, int m_block,
                                                       uint32_t (&prob)[kSAcc / 2],
                                                       uint32_t (&grad)[kSAcc / 2]) {
    Derived& mainloop = static_cast<Derived&>(*this);
    float s[kSAcc], dp[kSAcc], factor[kFactorAcc];  // factor: the scores' dS factors
    const int q_stage = q_ring.stage, do_stage = do_ring.stage;
    // Loaded before the waits, so that the load's latency hides behind them.
    Mods head_mods{};
    if constexpr (Mods::kPositional) head_mods = row_score_mods<Mods>(p.alibi, tile.batch, head);

    smem.q_full[q_stage].wait(q_ring.phase);
    const int valid_queries = tile.seq.seqlen_q - m_block * Config::kBlockM;
    const bool padded = p.seqused_q != nullptr && valid_queries < Config::kBlockM;
    if (padded) {
      smem.do_full[do_stage].wait(do_ring.phase);
      const int t = kWarpgroup * kThreadsPerWarpgroup + thread;
      zero_rows_from(smem.q[q_stage], valid_queries, t, kBothWarpgroups);
      zero_rows_from(smem.dout[do_stage], valid_queries, t, kBothWarpgroups);
      zero_padding_and_sync();
    }
    ptx::fence_operands(s);
    ptx::fence_operands(dp);
    ptx::fence();
    mainloop.issue_score_gemm(s, smem.q[q_stage], smem.k);
    ptx::commit_group();
    smem.do_full[do_stage].wait(do_ring.phase);
    ptx::fence();  // as before every GEMM: else ptxas injects the fence itself (advisory C7519)
    mainloop.issue_score_gemm(dp, smem.dout[do_stage], smem.v);
    ptx::commit_group();
    ptx::wait_group<1>();
    ptx::fence_operands(s);
    // Taking turns (ConsumerMainloop::lagged_step): one warpgroup's exponentials at a time.
    if constexpr (kTakeTurns) {
      ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::warp_scheduler, kWarpgroup),
                              kBothWarpgroups);
    }
    mainloop.probabilities(s, factor, tile, m_block, q_stage, head_mods);
    if constexpr (kTakeTurns) {
      // The turn passes once every exponential is computed.
      ptx::named_barrier_arrive_after<kBothWarpgroups>(
          s, ptx::barrier_id(ptx::NamedBarrier::warp_scheduler, 1 - kWarpgroup));
    }
    ptx::wait_group<0>();
    ptx::fence_operands(dp);
    mainloop.score_gradients(dp, s, factor, do_stage);
    ptx::accumulator_to_operand<Element>(s, prob);
    ptx::accumulator_to_operand<Element>(dp, grad);
  }
};

}  // namespace hfa::sm90::bwd
