// The orders in which the CTAs of a grid take their tiles: a tile is a block (of queries in the
// forward, of keys in the backward) of one (batch, head) pair, numbered 0 .. blocks · pairs − 1.
// A scheduler (fwd/scheduler.cuh, bwd/scheduler.cuh) picks one and maps the block's rank to the
// block it walks first. Host and device: the host tests walk every tile.
#pragma once

#include "common/host_device.hpp"

namespace hfa::sm90 {

struct TilePosition {
  int rank;  // of the block within its pair, in the order the scheduler wants
  int pair;  // (batch, head) pair: batch = pair / heads, head = pair % heads
};

// Blocks fastest: the CTAs that run together share one head's operands in L2. Right when all
// tiles cost the same.
HFA_HD inline TilePosition blocks_fastest(int tile, int blocks) {
  return {tile % blocks, tile / blocks};
}

// The sections of the sectioned order (launch.hpp's tile_sections chooses them): `count` of
// them, each of `pairs` pairs but the last, which holds the pairs left, fewer or more.
struct TileSections {
  int pairs;
  int count;
};

// Longest first (LPT) within sections of pairs whose operands fit in L2: pairs fastest within a
// section, so the CTAs running at once take the same rank of several pairs, and the ranks the
// scheduler maps to the costliest blocks go first.
HFA_HD inline TilePosition sectioned_ranks(int tile, int blocks, int pairs, TileSections sections) {
  const int section_tiles = sections.pairs * blocks;
  const int last = sections.count - 1;
  const int section = tile / section_tiles < last ? tile / section_tiles : last;
  const int first_pair = section * sections.pairs;
  const int pairs_here = section == last ? pairs - first_pair : sections.pairs;
  const int in_section = tile - section * section_tiles;
  return {in_section / pairs_here, first_pair + in_section % pairs_here};
}

}  // namespace hfa::sm90
