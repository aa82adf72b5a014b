// The balanced split schedule (FlashMLA's get_mla_metadata idea, in our own arithmetic): the
// batch's key tiles dealt out to `parts` persistent CTAs, each an equal share of the work however
// ragged the lengths, as one contiguous range of (sequence, tile).
//
// The cost line: sequence b takes the stretch [begin_b, end_b), first kSequenceCost units for
// what a CTA pays to start it, then one unit per tile of its keys (at least one: an empty
// sequence still writes its rows). Part i takes the stretch [i·share, (i+1)·share), share =
// ceil(total / parts) (or whole sequences of a batch of equal ones: balanced_share), and with
// it the tiles whose units fall there. A sequence whose tiles fall in one part is finished by it
// (out and lse); one whose tiles fall in several is split, each part's piece a partial in a slot
// of its own that the combine merges. A part's work is its stretch plus at most one start it
// does not hold (a sequence it continues, or one whose start it shares with the part before): at
// most ceil(total / parts) + kSequenceCost, within one tile and one sequence's cost of an even
// share.
//
// Plain integers, on both sides (HFA_HD): the schedule kernel (schedule_kernel.cuh) runs it on
// the device from the lengths there, the unit test on the CPU. The kernel's threads each take a
// contiguous range of sequences: cost_of_range and slots_of_range give a range's sums, whose
// prefix over the ranges before is its base, and write_range writes the range's share of the
// schedule from those bases.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

namespace hfa::sm90::decode::schedule {

// A sequence's start in tiles' worth of time: Q's load and the ring's first fill before its first
// tile, its rows' epilogue after the last, and for a split piece the partial's write and the
// combine's read. FlashMLA charges the same 5 (its get_decoding_sched_meta); with 72 KB a tile,
// Q alone is one tile's load and a 64 × 512 fp32 partial almost two.
inline constexpr int64_t kSequenceCost = 5;

// Where a part's range starts: tile `tile` of sequence `sequence`, the split-th piece of that
// sequence (0 unless the part continues a sequence the part before began). Part i's range is
// [start i, start i + 1), the last part's end being (batch, 0, 0).
struct PartStart {
  int32_t sequence, tile, split;
};

// One part's piece of one sequence: its units [first_unit, end_unit) and its index among the
// sequence's pieces.
struct Piece {
  int32_t first_unit, end_unit, split;
};

// The schedule: part_starts (parts + 1), then first_slot (batch + 1): sequence b's partials are
// slots first_slot[b] … first_slot[b + 1] − 1, none when one part finishes it.
struct Schedule {
  PartStart* part_starts;
  int32_t* first_slot;
};

// A sequence of `tiles` tiles: its units and its stretch's length.
HFA_HD constexpr int64_t units_of(int64_t tiles) { return tiles > 0 ? tiles : 1; }
HFA_HD constexpr int64_t cost_of(int64_t tiles) { return kSequenceCost + units_of(tiles); }

// Each part's stretch of a cost line of `total` units (total >= 1).
HFA_HD constexpr int64_t share_of(int64_t total, int parts) { return (total + parts - 1) / parts; }

// The least and the greatest cost of a range of sequences (an empty range: none, the merge's
// identity), so that a batch of equal sequences can be told from the others.
struct CostBounds {
  int64_t least = INT64_MAX, most = 0;

  HFA_HD constexpr void merge(const CostBounds& other) {
    least = other.least < least ? other.least : least;
    most = other.most > most ? other.most : most;
  }
  // The one cost of sequences that all cost the same; 0 where they differ.
  HFA_HD constexpr int64_t uniform() const { return least == most ? least : 0; }
};

// The share a schedule deals out. A batch of equal sequences (uniform_cost > 0) has its share
// rounded up to whole sequences where that adds at most kSequenceCost, the price of a cut: every
// boundary then falls between sequences, none is split (no partial, nothing for the combine),
// and no part is longer than one holding a cut piece would be. Batch 64, 1k keys, 128 heads,
// s_q 2: share 41 → 42, 26 sequences cut → none (FlashMLA's greedy schedule cuts none either);
// 16 heads (132 parts): share 11 against a sequence's 21, so every sequence stays cut in two.
HFA_HD constexpr int64_t balanced_share(int64_t total, int parts, int64_t uniform_cost) {
  const int64_t share = share_of(total, parts);
  if (uniform_cost <= 0) return share;
  const int64_t whole = (share + uniform_cost - 1) / uniform_cost * uniform_cost;
  return whole - share <= kSequenceCost ? whole : share;
}

// The slots of a sequence cut into `pieces`: one a piece, none for a sequence left whole.
HFA_HD constexpr int64_t slots_of(int64_t pieces) { return pieces > 1 ? pieces : 0; }

// The most slots a schedule of `parts` uses: each of the parts − 1 boundaries cuts at most one
// sequence once more, and a sequence cut k times has k + 1 <= 2k pieces.
HFA_HD constexpr int64_t max_slots(int parts) { return 2 * (int64_t(parts) - 1); }

// One sequence's stretch of the cost line.
struct Stretch {
  int64_t begin, end;

  HFA_HD constexpr int64_t first_unit() const { return begin + kSequenceCost; }
  // The parts that take its units: first_part … last_part.
  HFA_HD constexpr int64_t first_part(int64_t share) const { return first_unit() / share; }
  HFA_HD constexpr int64_t last_part(int64_t share) const { return (end - 1) / share; }
  HFA_HD constexpr int64_t pieces(int64_t share) const {
    return last_part(share) - first_part(share) + 1;
  }
  // The parts whose stretch begins inside this one: [first_part_starting, end_part_starting).
  HFA_HD constexpr int64_t first_part_starting(int64_t share) const {
    return (begin + share - 1) / share;
  }
  HFA_HD constexpr int64_t end_part_starting(int64_t share) const {
    return (end + share - 1) / share;
  }
  // Where part `part` (one that begins inside this stretch) starts: at the sequence's first
  // tile when it begins among the start's units, else inside its tiles, as a later piece.
  HFA_HD constexpr PartStart start_of(int64_t part, int32_t sequence, int64_t share) const {
    const int64_t at = part * share;
    if (at <= first_unit()) return {sequence, 0, 0};
    return {sequence, int32_t(at - first_unit()), int32_t(part - first_part(share))};
  }
};

// Whether a part that ends at `end` takes any tile of sequence b (b at or after its start).
HFA_HD constexpr bool reaches(const PartStart& end, int32_t b) {
  return b < end.sequence || (b == end.sequence && end.tile > 0);
}

// The piece of sequence b (of `units` units) that the part [begin, end) takes; reaches(end, b).
HFA_HD constexpr Piece piece_of(const PartStart& begin, const PartStart& end, int32_t b,
                                int64_t units) {
  const bool first = b == begin.sequence;
  return {first ? begin.tile : 0, b == end.sequence ? end.tile : int32_t(units),
          first ? begin.split : 0};
}

// The sum of the costs of sequences [lo, hi), and their bounds into *bounds; tiles_of(b) gives
// sequence b's tiles.
template <typename TilesOf>
HFA_HD int64_t cost_of_range(const TilesOf& tiles_of, int32_t lo, int32_t hi, CostBounds* bounds) {
  int64_t cost = 0;
  for (int32_t b = lo; b < hi; ++b) {
    const int64_t c = cost_of(tiles_of(b));
    cost += c;
    bounds->merge({c, c});
  }
  return cost;
}

// The slots sequences [lo, hi) take, their stretches starting at cost_base.
template <typename TilesOf>
HFA_HD int64_t slots_of_range(const TilesOf& tiles_of, int32_t lo, int32_t hi, int64_t cost_base,
                              int64_t share) {
  int64_t slots = 0;
  Stretch stretch{cost_base, cost_base};
  for (int32_t b = lo; b < hi; ++b) {
    stretch = {stretch.end, stretch.end + cost_of(tiles_of(b))};
    slots += slots_of(stretch.pieces(share));
  }
  return slots;
}

// Sequences [lo, hi)'s part of the schedule: the starts of the parts beginning in their
// stretches, and their first slots (slot_base: the slots of the sequences before lo).
template <typename TilesOf>
HFA_HD void write_range(const TilesOf& tiles_of, int32_t lo, int32_t hi, int64_t cost_base,
                        int64_t slot_base, int64_t share, const Schedule& schedule) {
  Stretch stretch{cost_base, cost_base};
  int64_t slot = slot_base;
  for (int32_t b = lo; b < hi; ++b) {
    stretch = {stretch.end, stretch.end + cost_of(tiles_of(b))};
    for (int64_t part = stretch.first_part_starting(share); part < stretch.end_part_starting(share);
         ++part)
      schedule.part_starts[part] = stretch.start_of(part, b, share);
    schedule.first_slot[b] = int32_t(slot);
    slot += slots_of(stretch.pieces(share));
  }
}

// The rest, once the ranges are written: the parts that begin past the last stretch (empty
// ranges) and the end of the last part, at (batch, 0, 0); the end of the last slots.
HFA_HD inline void write_end(int64_t total, int64_t share, int parts, int32_t batch,
                             int64_t slots, const Schedule& schedule) {
  for (int64_t part = (total + share - 1) / share; part <= parts; ++part)
    schedule.part_starts[part] = {batch, 0, 0};
  schedule.first_slot[batch] = int32_t(slots);
}

// Where the schedule and the partials of its slots live in the call's workspace, in bytes from
// its start: the fp32 partial rows of the most slots a schedule can use (slot_rows rows of hdim
// each), their LSEs (a sequence's as (slot row, piece)), then the schedule. Sized from the shapes
// alone, so that a caller allocates it once.
struct WorkspaceLayout {
  int64_t partial_lse, part_starts, first_slot, bytes;
};

HFA_HD constexpr WorkspaceLayout workspace_layout(int32_t batch, int parts, int64_t slot_rows,
                                                  int64_t hdim) {
  WorkspaceLayout layout{};
  const int64_t rows = max_slots(parts) * slot_rows;
  layout.partial_lse = rows * hdim * int64_t(sizeof(float));
  layout.part_starts = layout.partial_lse + rows * int64_t(sizeof(float));
  layout.first_slot = layout.part_starts + (int64_t(parts) + 1) * int64_t(sizeof(PartStart));
  layout.bytes = layout.first_slot + (int64_t(batch) + 1) * int64_t(sizeof(int32_t));
  return layout;
}

}  // namespace hfa::sm90::decode::schedule
