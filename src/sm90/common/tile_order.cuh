// The orders in which the CTAs of a grid take their tiles: a tile is a block (of queries in the
// forward, of keys in the backward) of one (batch, head) pair, numbered 0 .. blocks · pairs − 1.
// A scheduler (fwd/scheduler.cuh, bwd/scheduler.cuh) picks one and maps the block's rank to the
// block it walks first.
#pragma once

namespace hfa::sm90 {

struct TilePosition {
  int rank;  // of the block within its pair, in the order the scheduler wants
  int pair;  // (batch, head) pair: batch = pair / heads, head = pair % heads
};

// Blocks fastest: the CTAs that run together share one head's operands in L2. Right when all
// tiles cost the same.
__device__ __forceinline__ TilePosition blocks_fastest(int tile, int blocks) {
  return {tile % blocks, tile / blocks};
}

// Longest first (LPT) within sections of pairs_per_section pairs whose operands fit in L2:
// pairs fastest within a section, so the CTAs running at once take the same rank of several
// pairs, and the ranks the scheduler maps to the costliest blocks go first.
__device__ __forceinline__ TilePosition sectioned_ranks(int tile, int blocks, int pairs,
                                                        int pairs_per_section) {
  const int section_tiles = pairs_per_section * blocks;
  const int section = tile / section_tiles;
  const int in_section = tile % section_tiles;
  const int first_pair = section * pairs_per_section;
  const int pairs_here = min(pairs_per_section, pairs - first_pair);
  const int pair = first_pair + in_section % pairs_here;
  return {in_section / pairs_here, pair};
}

}  // namespace hfa::sm90
