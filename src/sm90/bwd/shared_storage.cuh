// The backward kernel's shared memory: the CTA's K and V block, rings of Q (with its LSE) and dO
// (with its D) stages, the Pᵀ and dSᵀ tiles the warpgroups share, the fp32 dQ tile the writer
// warp adds into the workspace, and their barriers.
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
  using Dq = DqChunk<Config::kBlockM, Config::kHeadDimQK>;
  static constexpr bool kSharesP = !Config::kKeysSplit;  // Pᵀ feeds dV from registers otherwise

  KTile k;
  VTile v;
  QTile q[Config::kStagesQ];
  DOTile dout[Config::kStagesDO];
  ScoresTile ds[Config::kStagesScores];
  struct None {};
  [[no_unique_address]] std::conditional_t<kSharesP, ScoresTile[Config::kStagesScores], None> p;
  alignas(16) float dq[Config::kStagesDq][Dq::kFloats];
  alignas(16) float lse_log2[Config::kStagesQ][Config::kBlockM];  // rides with Q
  alignas(16) float dpsum[Config::kStagesDO][Config::kBlockM];    // rides with dO

  ptx::Mbarrier kv_full;
  ptx::Mbarrier q_full[Config::kStagesQ];
  ptx::Mbarrier q_empty[Config::kStagesQ];
  ptx::Mbarrier do_full[Config::kStagesDO];
  ptx::Mbarrier do_empty[Config::kStagesDO];
  ptx::Mbarrier dq_full[Config::kStagesDq];   // every consumer warp wrote its dQ parts
  ptx::Mbarrier dq_empty[Config::kStagesDq];  // the writer's bulk add has read them
};

}  // namespace hfa::sm90::bwd
