// The backward kernel's shared memory: the CTA's K and V block, rings of Q (with its LSE) and dO
// (with its D) stages, the Pᵀ and dSᵀ (or dS) tiles the warpgroups share, the fp32 dQ tiles the
// writer warp adds into the workspace (where it does: TileConfig::kDqFromRegisters), and their
// barriers.
#pragma once

#include <cstdint>
#include <type_traits>

#include "sm90/bwd/tile_config.hpp"
#include "sm90/bwd/workspace.hpp"
#include "sm90/common/swizzled_tile.cuh"
#include "sm90/ptx/mbarrier.cuh"

namespace hfa::sm90::bwd {

template <typename Config, typename Element>
struct SharedStorage {
  using KTile = SwizzledTile<Element, Config::kBlockN, Config::kHeadDimQK>;
  using VTile = SwizzledTile<Element, Config::kBlockN, Config::kHeadDimV>;
  using QTile = SwizzledTile<Element, Config::kBlockM, Config::kHeadDimQK>;
  using DOTile = SwizzledTile<Element, Config::kBlockM, Config::kHeadDimV>;
  // Keys as rows, queries as columns: what the warpgroups' accumulators hold.
  using ScoresTile = SwizzledTile<Element, Config::kBlockN, Config::kBlockM>;
  // dS as dQ's GEMM reads it: the accumulators' dSᵀ (its A, MN-major), or, where dQ is
  // computed transposed, queries as rows and keys as columns (dQᵀ's B, K-major).
  using DsTile = std::conditional_t<Config::kDqTransposed,
                                    SwizzledTile<Element, Config::kBlockM, Config::kBlockN>, ScoresTile>;
  using Dq = DqChunk<Config>;
  static constexpr bool kSharesP = !Config::kKeysSplit;  // Pᵀ feeds dV from registers otherwise
  struct None {};
  // What only the writer warp's path has (TileConfig::kDqFromRegisters: not every one does).
  template <typename T>
  using WriterOnly = std::conditional_t<Config::kDqFromRegisters, None, T>;

  KTile k;
  VTile v;
  QTile q[Config::kStagesQ];
  DOTile dout[Config::kStagesDO];
  DsTile ds[Config::kStagesScores];
  [[no_unique_address]] std::conditional_t<kSharesP, ScoresTile[Config::kStagesScores], None> p;
  [[no_unique_address]] alignas(16) WriterOnly<float[Config::kStagesDq][Dq::kFloats]> dq;
  alignas(16) float lse_log2[Config::kStagesQ][Config::kBlockM];  // rides with Q
  alignas(16) float dpsum[Config::kStagesDO][Config::kBlockM];    // rides with dO

  ptx::Mbarrier kv_full;
  ptx::Mbarrier q_full[Config::kStagesQ];
  ptx::Mbarrier q_empty[Config::kStagesQ];
  ptx::Mbarrier do_full[Config::kStagesDO];
  ptx::Mbarrier do_empty[Config::kStagesDO];
  // Every consumer warp wrote its dQ parts; the writer's bulk add has read them.
  [[no_unique_address]] WriterOnly<ptx::Mbarrier[Config::kStagesDq]> dq_full;
  [[no_unique_address]] WriterOnly<ptx::Mbarrier[Config::kStagesDq]> dq_empty;
  // Taking turns (TileConfig::kTakesTurns; dQ a step late, mainloop.cuh's lagged_step): a
  // consumer warpgroup stored its dSᵀ of the stage's step and is done reading the other stage.
  [[no_unique_address]] std::conditional_t<
      Config::kTakesTurns, ptx::Mbarrier[Config::kConsumerWarpgroups][Config::kStagesScores], None>
      step_done;
};

}  // namespace hfa::sm90::bwd
