// Tile shapes and the CTA's division of labour for each backward configuration.
//
// A CTA owns one block of kBlockN keys (K and V stay in shared memory) and walks the blocks of
// kBlockM queries that see it. Per query block it recomputes the scores transposed,
// Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (keys as the wgmma M), so that Pᵀ and dSᵀ come out with keys as
// rows: the A operand of dV += Pᵀ·dO and dK += dSᵀ·Q. dQ = dS·K reads dSᵀ from shared memory,
// and its fp32 partial is added into a workspace accumulator. Where the query block is not a
// whole wgmma M (80 rows, kDqTransposed), dQ is computed transposed instead, dQᵀ = Kᵀ·dSᵀ with
// the head dim as M and the queries as N, from a dS tile stored with queries as rows.
//
// Where the gradients are transposed (kTransposedGradients), the scores are not: S = Q·Kᵀ and
// dP = dO·Vᵀ with the queries as M, P and dS stored with keys as rows, and dVᵀ = dOᵀ·P,
// dKᵀ = Qᵀ·dS and dQᵀ = Kᵀ·dSᵀ with the head dim as M.
//
// Two consumer warpgroups divide each step one of three ways:
//   keys split (head dims ≤ 128): each warpgroup its own 64 keys against all kBlockM queries, so
//     its Pᵀ and dSᵀ span the whole reduction of dV and dK and feed them from registers, and its
//     dK, dV accumulators (64 keys × the whole head dims) stay in registers across the walk;
//   head dims split (192, 256): 64 keys, and 64 × (dqk + dv) accumulators would not fit one
//     warpgroup's registers, so each warpgroup takes half the queries of Sᵀ and dPᵀ, both halves
//     meet in shared memory, and each warpgroup accumulates its share of the 64-column slabs of
//     dK and dV (and computes its share of dQ's);
//   gradients transposed (192, 256 in the default mode): 80 keys, 64 queries,
//     each warpgroup S and dP of all the queries against its 40 keys; Pᵀ and dSᵀ meet in shared
//     memory, and each warpgroup accumulates dKᵀ and dVᵀ for its share of the 64-dim slabs over
//     all 80 keys (the head dim as M, so that the keys, as N, need not be whole wgmma Ms), and
//     computes its share of dQᵀ's slabs (docs/decisions/039).
#pragma once

#include <type_traits>

#include "common/score_policy.hpp"
#include "sm90/common/sparse_block.hpp"
#include "sm90/common/wgmma_shape.hpp"

// Tuning switches, overridable at build time for experiments (-D...).
#ifndef HFA_SM90_BWD_DQ_STAGES_D128
#define HFA_SM90_BWD_DQ_STAGES_D128 2
#endif

namespace hfa::sm90::bwd {

// What one consumer warpgroup computes of a step. Slab runs are [first, first + count) of
// 64-column slabs; rows and columns count from the block's first key or query.
struct WarpgroupRole {
  int key_row0;     // its 64 rows (keys) of Sᵀ and dPᵀ; gradients transposed: its first key
                    // column of S and dP (it has kScoreColumns of them)
  int query_col0;   // its first query column of Sᵀ and dPᵀ (it has kScoreColumns of them)
  int dk_first, dk_count;  // dK and dV: rows key_row0 .. + 63 (transposed: every key), these
                           // slabs of the head dims
  int dv_first, dv_count;
  int dq_row0;             // dQ: rows dq_row0 .. + 63 of the query block, these slabs of dqk
  int dq_first, dq_count;
};

// kDeterministic_: the deterministic mode's configuration, where it differs from the default's
// (head dims split: kDqFromRegisters); launch.cuh picks it for deterministic=true there only.
template <int kHeadDimQK_, int kHeadDimV_, bool kWindowed_, bool kSoftcap_,
          bool kDeterministic_ = false>
struct TileConfig {
  static constexpr int kHeadDimQK = kHeadDimQK_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr bool kWindowed = kWindowed_;
  static constexpr bool kSoftcap = kSoftcap_;
  // The score policy (src/common/score_policy.hpp) the kernel list's switches select: these
  // modifiers, and the window rule's masks where kWindowed (past seqlen_k always).
  using Mods = policy::ListedMods<kSoftcap>;
  // Whether queries come from a block-sparse mask's lists (BlockSparseTileConfig below).
  static constexpr bool kBlockSparse = false;
  static constexpr bool kDeterministic = kDeterministic_;
  static constexpr int kSlabsQK = kHeadDimQK / kSlabColumns;
  static constexpr int kSlabsV = kHeadDimV / kSlabColumns;
  static_assert(kHeadDimQK % kSlabColumns == 0 && kHeadDimV % kSlabColumns == 0);
  static_assert(kHeadDimQK <= 256 && kHeadDimV <= 256, "no backward tile for this head dim");

  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kThreads = kThreadsPerWarpgroup * (kConsumerWarpgroups + 1);
  static constexpr bool kKeysSplit = kHeadDimQK <= 128 && kHeadDimV <= 128;
  // Head dims 192 and 256 in the default mode (FlashAttention-3's tile there,
  // docs/decisions/039): 80 keys a block, 25 % more than 64, so that each step's Q and dO loads
  // (64 KB at hdim 256) and dQ adds (64 KB) serve 25 % more FLOPs: 9.8 KB of L2 traffic a MFLOP
  // where 64 keys moved 12.3, in a kernel that sits at the L2's ceiling. 80 keys are no wgmma M,
  // so the keys are N everywhere: the scores with the queries as M (each warpgroup 64 × 40),
  // and dKᵀ, dVᵀ (each slab 64 dims × 80 keys, 40 registers) and dQᵀ (64 dims × 64 queries)
  // with the head dim as M. Its dK and dV slabs (a warpgroup's share, up to 2 + 2 at hdim 256:
  // 160 registers) stay in registers across the walk as the 64-key tile's do.
  // Windowed tiles (causal included) too, as FlashAttention-3 runs its causal hdim 256 on 64 ×
  // 80 (the block ranges are generic in kBlockN, the mask has the queries-as-rows form). Kept
  // on the head-dims-split tile: the deterministic mode, whose writer path needs the 64 KB dQ
  // tile beside the stages, and at 80 keys even one stage of each does not fit at hdim 256
  // (40 + 40 + 32 + 32 + 10 + 10 + 64 = 228 KB).
  static constexpr bool kTransposedGradients = !kKeysSplit && !kDeterministic;

  // hdim 128 without a window (FlashAttention-3's tile there, docs/decisions/038): 80 queries a
  // step, 25 % more FLOPs than 64 over which to spread a step's fixed costs (its barriers, waits
  // and wgmma drain), and ~5 % fewer shared-memory bytes a FLOP in a kernel bound by the tensor
  // and shared-memory pipes. 80 is no multiple of a wgmma's M, so dQ is computed transposed:
  // dQᵀ = Kᵀ·dSᵀ, each warpgroup one 64-dim slab (M) × the 80 queries (N) over the block's keys
  // (K). Its B operand, dS with keys as K, must then be K-major (an MN-major operand spans whole
  // 64-column slabs, and 80 is none), so dS is stored as a queries × keys tile (stmatrix .trans
  // from the Sᵀ fragment), and the fp32 dQ tile holds dQᵀ's accumulator order (workspace.hpp,
  // TransposedFragmentChunk).
  // Kept at 64 rows, as FlashAttention-3 keeps them:
  //   windowed tiles (causal included; not measured at 80): a diagonal block's masked share
  //     grows with its rows;
  //   softcap: its dS factors (kSAcc more registers) beside Sᵀ, dPᵀ, dK and dV would need 248
  //     of the 240 registers (ptxas at 80 rows: 544 B of spill stores, 432 B of loads; none at
  //     64).
  // The deterministic mode runs the 80-row tile too: the writer's turns are per query block,
  // whatever its rows, and one dQ tile where 64 rows had two stalls no turn: +2-8 % over 64
  // rows at 2k-16k keys (docs/decisions/038).
  static constexpr bool kDqTransposed =
      kHeadDimQK == 128 && kHeadDimV == 128 && !kWindowed && !kSoftcap;
  // 80 = 5 k16 steps of the dV and dK reduction: the most rows whose stages fit (96 would need
  // 32 + 32 + 3 · 2 · 24 + 48 = 256 KB, shared-memory arithmetic below).
  static constexpr int kTransposedDqRows = 5 * kMmaK;

  // 80 = 5 k16 steps of dQᵀ's reduction over the keys: the most keys whose stages fit at hdim
  // 256 (96: 48 + 48 + 2·32 + 32 + 2·12 + 2·12 = 240 KB, shared-memory arithmetic below), and
  // two warpgroups' 40-key halves of S are a wgmma N (a multiple of 8).
  static constexpr int kTransposedGradientKeys = 5 * kMmaK;

  // Keys split: 2 × 64 keys. Queries: 128 at hdim 64, where a step's GEMMs are short and S, dP
  // (64 registers each) still fit beside dK, dV (32 each); 64 at hdim 128 (dK, dV take 128
  // registers), 80 where dQ is computed transposed (S, dP 40 registers each). Head dims split:
  // 64 × 64, the tile whose accumulators fit at hdim 256 (dK, dV 128 registers, Sᵀ and dPᵀ 16
  // each, a dQ slab 32). Gradients transposed: 80 keys × 64 queries (dKᵀ, dVᵀ 160 registers at
  // hdim 256, S and dP 20 each, a dQᵀ slab 32).
  static constexpr int kBlockN = kKeysSplit             ? kConsumerWarpgroups * kRowsPerWarpgroup
                                 : kTransposedGradients ? kTransposedGradientKeys
                                                        : kRowsPerWarpgroup;
  static constexpr int kBlockM = kDqTransposed                  ? kTransposedDqRows
                                 : kKeysSplit && kHeadDimQK <= 64 ? 2 * kRowsPerWarpgroup
                                                                  : kRowsPerWarpgroup;
  // A warpgroup's columns of its score tiles: queries of Sᵀ and dPᵀ, or, where the gradients
  // are transposed, keys of S and dP.
  static constexpr int kScoreColumns = kKeysSplit             ? kBlockM
                                       : kTransposedGradients ? kBlockN / kConsumerWarpgroups
                                                              : kBlockM / kConsumerWarpgroups;

  // A thread's registers of one 64-column slab of dK or dV: 64 keys × 64 dims over the
  // warpgroup (32), or, where the gradients are transposed, 64 dims × the block's 80 keys (40).
  static constexpr int kKeySlabRegisters =
      (kTransposedGradients ? kBlockN : kRowsPerWarpgroup) * kSlabColumns / kThreadsPerWarpgroup;

  // Shared memory (≤ 227 KB): K, V, Q and dO stages, Pᵀ (wherever the keys are not split) and
  // dSᵀ (dS where transposed) stages, the writer warp's fp32 dQ tiles (where kDqFromRegisters is not
  // set). hdim 128: 32 + 32 + 2·16 + 2·16 + 2·16 + 2·32 = 224 KB; hdim 128 at 80 rows: 32 + 32
  // + 2·20 + 2·20 + 2·20 + 40 = 224 KB, + 1.25 KB of LSE and D and 88 B of barriers, rounded
  // up to the 1 KB alignment (226 KB), + the 1 KB alignment pad = 227 KB, the limit exactly
  // (so one dQ tile); hdim 64: 16 + 16 + 2·16 + 2·16 + 2·32 + 32 = 192 KB; head dims split
  // (windowed or deterministic), 192/192: 24 + 24 +
  // 2·24 + 2·24 + 2·8 + 2·8 (+ 48 deterministic) = 176 (224) KB; 256: 32 + 32 + 2·32 + 2·32 +
  // 2·8 + 2·8 = 224 KB, deterministic one Q and one dO stage beside the 64 KB dQ tile (32 + 32
  // + 32 + 32 + 16 + 16 + 64 = 224 KB). Two stages let the loader fetch the next step's Q and
  // dO during this one: hdim 256 with one was 20-27 % slower (docs/decisions/025). Gradients
  // transposed, 80 keys: K 80·dqk·2 B and V 80·dv·2 B, Pᵀ and dSᵀ 80 × 64 (10 KB) a stage;
  // 256: 40 + 40 + 2·32 + 32 + 2·10 + 2·10 = 216 KB + 768 B of LSE and D and 56 B of
  // barriers = 217 KB after the alignment, 218 KB with the pad: one dO stage, as
  // FlashAttention-3 keeps there (a second would need 249 KB); 192/192: 30 + 30 + 2·24 + 2·24
  // + 2·10 + 2·10 = 196 KB (199 KB launched); 192/128: 30 + 20 + 2·24 + 2·16 + 2·10 + 2·10 =
  // 170 KB (173 KB).
  static constexpr int kStagesQ = kHeadDimQK == 256 && kDeterministic ? 1 : 2;
  static constexpr int kStagesDO = kTransposedGradients && kHeadDimV == 256 ? 1 : kStagesQ;
  // Two Pᵀ/dSᵀ stages: a warpgroup writes the next step's while the other may still read this
  // one's in its dQ GEMM, and one barrier a step (scores_shared) orders both uses.
  static constexpr int kStagesScores = 2;
  // Every consumer thread arrives on the Q and dO rings' empty barriers: each thread reads its
  // stage's LSE and D with ordinary loads, and an arrival releases only its own thread's
  // accesses. (Measured: one lane per warp after __syncwarp was 0-4 % faster at hdim 128, and
  // compute-sanitizer racecheck reported its reads against the next bulk copy as hazards.)
  static constexpr int kStageReleasers = kConsumerWarpgroups * kThreadsPerWarpgroup;
  // How dQ partials reach the workspace. Head dims split (and gradients transposed), in the
  // default mode: each warpgroup adds its slabs from registers (red.global.add.v4.f32), 8-12 %
  // faster at hdim 256 than the bulk reduce-add of a 64 KB shared tile a step, which costs a
  // store and a read of it in the shared memory that the step's GEMMs are short of, and that
  // tile's room holds a second Q/dO stage instead. Keys split, and deterministic everywhere:
  // the writer warp's bulk reduce of a shared tile, 6-28 % faster at hdim 64 and 128
  // (docs/decisions/024); deterministic, it keeps the turn order without stalling the
  // consumers (adds from registers in turn order, each fenced before the turn passes, measured
  // 15-25 % slower at hdim 192 and 256).
  static constexpr bool kDqFromRegisters = !kKeysSplit && !kDeterministic;
  // The writer's dQ tiles: two where shared memory has room (hdim 128 at 64 rows), so a step's
  // dQ need not wait for the bulk add of the last one; one at 80 rows (the arithmetic above).
  static constexpr int kStagesDq =
      kKeysSplit && kBlockM == kRowsPerWarpgroup ? HFA_SM90_BWD_DQ_STAGES_D128 : 1;

  // Every kExp2OnFmaEvery-th exponential of P on the FMA pipes (sm90/common/exp2.cuh; 0: none).
  // At hdim 64 a step's 2 × 64 keys × kBlockM queries of exponentials take MUFU at least 1024
  // cycles while the tensor pipe idles under them (decision 041): every 4th on the FMA pipes
  // measured +1.6 % (geometric mean of 6 grid cells, 0.985-1.032; every 2nd −2.3 %). At hdim 128
  // neither gained (1.00, 0.99): MUFU is not what its step waits on (decision 042).
  static constexpr int kExp2OnFmaEvery = kHeadDimQK == 64 && kHeadDimV == 64 ? 4 : 0;

  // A launch whose CTAs walk this many steps or more on average (launch.cuh, mean_walk_steps)
  // runs this configuration's kernel under TakingTurnsTileConfig (docs/decisions/044): dQ a step
  // late, so that the consumer warpgroups never wait for each other inside a step, and the two
  // take turns at P's exponentials (named barriers), one warpgroup's exponentials beside the
  // other's GEMMs. 0: never. hdim 128 (H100, against the shared step): +2.4 / +3.3 % non-causal
  // at 4k / 16k, −0.5 / +1.7 % causal. Shorter walks keep the shared step: the walk's end (the
  // turns' skew, the last step's dQ overlapping nothing) costs about half a step, 3 % of a
  // 16-step walk (0.95-0.97× at 1k with every walk taking turns). Not at hdim 64, where a
  // quarter of P's exponentials already runs on the FMA pipes (kExp2OnFmaEvery): −0.3 … −4.8 %
  // from 4k. The keys-split tiles only (their Pᵀ and dSᵀ feed dV and dK from registers, so only
  // dQ needs both warpgroups' dSᵀ), not under a softcap (its dS factors, kSAcc registers more:
  // the turns kernel spilled 4 bytes at hdim 128). The deterministic mode keeps the shared step
  // (launch.cuh). Its own kernel, chosen by the host: both step bodies in one kernel, chosen per
  // CTA by its walk, spilled 24-140 bytes at hdim 128.
  static constexpr int kTurnsFromSteps = kKeysSplit && !kSoftcap && kHeadDimQK != 64 ? 16 : 0;
  // Whether this kernel's steps take turns (TakingTurnsTileConfig below).
  static constexpr bool kTakesTurns = false;

  // setmaxnreg: the producer warpgroup (a TMA warp and the dQ writer warp) gives back all but
  // 24; the consumers take 240. Balanced against the launch allocation of 168 registers a
  // thread at 384 threads: 128·(168 − 24) = 256·(240 − 168).
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  static_assert(register_split_fits(kThreads, kProducerRegisters, kConsumerRegisters,
                                    kConsumerWarpgroups),
                "setmaxnreg: consumers would claim registers the producer never gave back");

  static constexpr WarpgroupRole role(int w) {
    if constexpr (kTransposedGradients) {
      // Keys of S and dP: 40 each. Slabs of dKᵀ, dVᵀ and dQᵀ: shared as the head-dims-split
      // tile shares them (below), each slab now over every key or query of the block.
      WarpgroupRole r = TileConfig<kHeadDimQK, kHeadDimV, kWindowed, kSoftcap, true>::role(w);
      r.key_row0 = kScoreColumns * w;
      r.query_col0 = 0;
      return r;
    } else if constexpr (kKeysSplit) {
      // dQ: two 64-row halves of a 128-query block, or the two slabs of a 64- or 80-query one
      // (80: dQᵀ, the slab's 64 dims × every query).
      const bool rows_split = kBlockM == 2 * kRowsPerWarpgroup;
      const int dq_count = rows_split ? kSlabsQK : kSlabsQK / 2;
      return {kRowsPerWarpgroup * w, 0,           0, kSlabsQK, 0, kSlabsV,
              rows_split ? kRowsPerWarpgroup * w : 0, rows_split ? 0 : dq_count * w, dq_count};
    } else {
      // dK: warpgroup 0 the first ceil(slabs / 2). dV: an odd count gives its larger share to
      // warpgroup 1, which has the smaller dK share. dQ: the larger share to the warpgroup with
      // less dK + dV work.
      const int dk0 = (kSlabsQK + 1) / 2;
      const int dv1 = (kSlabsV + 1) / 2;
      const int load0 = dk0 + (kSlabsV - dv1), load1 = (kSlabsQK - dk0) + dv1;
      const int dq_more = (kSlabsQK + 1) / 2;
      const int dq0 = load0 <= load1 ? dq_more : kSlabsQK - dq_more;
      if (w == 0) return {0, 0, 0, dk0, dv1, kSlabsV - dv1, 0, 0, dq0};
      return {0, kScoreColumns, dk0, kSlabsQK - dk0, 0, dv1, 0, dq0, kSlabsQK - dq0};
    }
  }

  static_assert(kBlockN % kMmaK == 0 && kBlockM % kMmaK == 0);
  static_assert(kTransposedGradients ? kScoreColumns % 8 == 0 && kBlockM == kSlabColumns
                                     : kScoreColumns % 16 == 0,
                "score columns: whole stmatrix .x4 pairs of 8-column groups, or 8-column "
                "groups where S is stored transposed; transposed, Pᵀ and dSᵀ one query slab");
  static_assert(kKeysSplit || kTransposedGradients || kBlockM / kConsumerWarpgroups == kScoreColumns);
  static_assert(kKeysSplit || kBlockM == kRowsPerWarpgroup, "head dims split: one 64-row dQ tile");
  static_assert(!kKeysSplit || kBlockM == 2 * kRowsPerWarpgroup || kSlabsQK % 2 == 0,
                "keys split with 64 queries: dQ's slabs split evenly");
  static_assert(!kDqTransposed || (kKeysSplit && kSlabsQK == kConsumerWarpgroups &&
                                   kBlockM % kMmaK == 0 && !kDqFromRegisters),
                "dQ transposed: one 64-dim slab a warpgroup, through the writer's tile");
  static_assert(kDqTransposed || kBlockM % kRowsPerWarpgroup == 0,
                "dQ with queries as M: whole 64-row wgmma tiles");
};

// A configuration whose scores take ALiBi (score_policy.hpp; without softcap, ListedMods): the
// plain configuration's tiles under the ALiBi policy, a layer over it so that the kernels
// compiled before keep their names and code (as the forward's AlibiTileConfig).
template <typename Plain>
struct AlibiTileConfig : Plain {
  static_assert(!Plain::kSoftcap, "ALiBi without softcap (backend.cpp refuses the pair)");
  using Mods = policy::ListedMods<false, true>;
  // Every walk steps as one (kTurnsFromSteps): the turns were measured without ALiBi, and its
  // kernels stay as they were.
  static constexpr int kTurnsFromSteps = 0;
};

// A configuration that reads a block-sparse mask (common/block_sparse.hpp): its CTAs walk the
// query blocks listed for their key block (sm90/common/block_sparse.cuh's SparseQueryBlocks,
// lists the preprocess transposes from the forward's: bwd/sparse_preprocess.cuh) instead of a
// BlockRange, and AND a partial block's bits into the element mask. The windowed configuration
// (a window may still bound the pairs, ANDed with the mask, as in the forward), whose key block
// is one mask block (128 keys) and whose query block one (hdim 64) or half of one (hdim 128,
// 64 rows: two steps a mask block). Scores with keys as rows (the transposed bits' rows): the
// keys-split tile. Not deterministic: its turns follow the window's block ranges (the backend
// refuses the mode). A layer like ALiBi's, so that the kernels compiled before keep their names
// and code.
template <typename Plain>
struct BlockSparseTileConfig : Plain {
  static_assert(Plain::kWindowed && !Plain::kSoftcap && !Plain::kDeterministic,
                "block-sparse: the windowed configuration, no softcap, not deterministic");
  static_assert(Plain::kKeysSplit && !Plain::kDqTransposed && !Plain::kTransposedGradients,
                "block-sparse: scores with keys as rows (the transposed bits' rows)");
  static_assert(Plain::kBlockN == kSparseBlock && kSparseBlock % Plain::kBlockM == 0,
                "block-sparse: a key block of one mask block, query blocks that tile one");
  static constexpr bool kBlockSparse = true;
  // Steps (query tiles) of one mask query block.
  static constexpr int kStepsPerQueryBlock = kSparseBlock / Plain::kBlockM;
  // The producer's two walks over lists (producer.cuh's for_each_sparse_step) hold more than a
  // BlockRange's: at 24 registers ptxas spilled 4 bytes at hdim 128 and 12 at hdim 64; at 32
  // (the consumers given 232) none, and none in the consumers either.
  static constexpr int kProducerRegisters = 32;
  static constexpr int kConsumerRegisters = 232;
  static_assert(register_split_fits(Plain::kThreads, kProducerRegisters, kConsumerRegisters,
                                    Plain::kConsumerWarpgroups),
                "setmaxnreg: consumers would claim registers the producer never gave back");
  // Every exponential on MUFU: with every 4th on the FMA pipes (decision 042) the hdim-64
  // consumers, 8 registers fewer and holding a partial block's bits, spilled 40 bytes.
  static constexpr int kExp2OnFmaEvery = 0;
  // Every walk steps as one (kTurnsFromSteps): its walks are the mask's lists, whose lengths
  // the host does not see, and the consumers are 8 registers short of the dense ones'.
  static constexpr int kTurnsFromSteps = 0;
};

// The kernel of a configuration whose walks take turns at the exponentials, dQ a step late
// (TileConfig::kTurnsFromSteps; mainloop.cuh, lagged_step): the launch picks it over the plain
// one for long walks. A layer like ALiBi's, so that the plain kernel keeps its name and code.
template <typename Plain>
struct TakingTurnsTileConfig : Plain {
  static_assert(Plain::kTurnsFromSteps > 0 && Plain::kKeysSplit && !Plain::kBlockSparse &&
                    !Plain::kDqFromRegisters,
                "taking turns: the keys-split tile whose dQ goes through the writer's tile");
  static constexpr bool kTakesTurns = true;
};

}  // namespace hfa::sm90::bwd
