// The balanced split schedule's arithmetic (sm90/decode/split_schedule.hpp), built as the schedule
// kernel builds it (each thread a contiguous range of sequences, prefix sums of the ranges'
// costs and slots) and walked as the MLA kernel's CTAs walk it (WorkWalk's reaches / piece_of):
// every tile of every sequence in exactly one part, each part's work within one tile and one
// sequence's cost of an even share, a sequence's pieces numbered in order and its slots counted
// (none when whole), at most max_slots of them, the same schedule for any thread count. Host
// arithmetic: runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sm90/decode/split_schedule.hpp"

namespace hfa::sm90::decode::schedule {
namespace {

struct Built {
  std::vector<PartStart> part_starts;
  std::vector<int32_t> first_slot;
  int64_t total = 0, share = 0;
};

constexpr PartStart kUnwritten{-1, -1, -1};

// The schedule of sequences of tiles[b] tiles over `parts` parts, by `threads` threads as the
// kernel's: thread t takes sequences [t·per, (t+1)·per), per = ceil(batch / threads).
Built build(const std::vector<int32_t>& tiles, int parts, int threads) {
  const int32_t batch = int32_t(tiles.size());
  Built built;
  built.part_starts.assign(parts + 1, kUnwritten);
  built.first_slot.assign(batch + 1, -1);
  const auto tiles_of = [&](int32_t b) { return tiles[b]; };
  const int32_t per = (batch + threads - 1) / threads;
  const auto lo = [&](int t) { return std::min(batch, t * per); };
  const auto hi = [&](int t) { return std::min(batch, lo(t) + per); };

  std::vector<int64_t> cost_base(threads), slot_base(threads);
  CostBounds bounds;
  for (int t = 0; t < threads; ++t) {
    cost_base[t] = built.total;
    CostBounds range;
    built.total += cost_of_range(tiles_of, lo(t), hi(t), &range);
    bounds.merge(range);
  }
  built.share = balanced_share(built.total, parts, bounds.uniform());
  int64_t slots = 0;
  for (int t = 0; t < threads; ++t) {
    slot_base[t] = slots;
    slots += slots_of_range(tiles_of, lo(t), hi(t), cost_base[t], built.share);
  }
  const Schedule schedule{built.part_starts.data(), built.first_slot.data()};
  for (int t = 0; t < threads; ++t)
    write_range(tiles_of, lo(t), hi(t), cost_base[t], slot_base[t],
                built.share, schedule);
  write_end(built.total, built.share, parts, batch, slots, schedule);
  return built;
}

bool same(const PartStart& a, const PartStart& b) {
  return a.sequence == b.sequence && a.tile == b.tile && a.split == b.split;
}

bool same(const std::vector<PartStart>& a, const std::vector<PartStart>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const PartStart& x, const PartStart& y) { return same(x, y); });
}

std::string describe(const std::vector<int32_t>& tiles, int parts) {
  std::string s = std::to_string(parts) + " parts, tiles";
  for (std::size_t b = 0; b < tiles.size() && b < 12; ++b) s += ' ' + std::to_string(tiles[b]);
  if (tiles.size() > 12) s += " … (" + std::to_string(tiles.size()) + " sequences)";
  return s;
}

// Every promise split_schedule.hpp makes, of the schedule built with one thread.
void check(const std::vector<int32_t>& tiles, int parts, const Built& built) {
  for (int threads : {3, 256}) {
    const Built again = build(tiles, parts, threads);
    EXPECT_TRUE(same(again.part_starts, built.part_starts)) << threads << " threads";
    EXPECT_EQ(again.first_slot, built.first_slot) << threads << " threads";
  }
  const int32_t batch = int32_t(tiles.size());
  for (const PartStart& start : built.part_starts) EXPECT_FALSE(same(start, kUnwritten));
  EXPECT_TRUE(same(built.part_starts.front(), PartStart{0, 0, 0}));
  EXPECT_TRUE(same(built.part_starts.back(), PartStart{batch, 0, 0}));

  // Walk every part as a CTA does: the units each takes, and each sequence's pieces in order.
  std::vector<std::vector<int>> taken(tiles.size());
  for (std::size_t b = 0; b < tiles.size(); ++b) taken[b].assign(units_of(tiles[b]), 0);
  std::vector<std::vector<int32_t>> splits(tiles.size());
  for (int part = 0; part < parts; ++part) {
    const PartStart begin = built.part_starts[part];
    const PartStart end = built.part_starts[part + 1];
    int64_t work = 0;
    for (int32_t b = begin.sequence; reaches(end, b); ++b) {
      const int64_t units = units_of(tiles[b]);
      const Piece piece = piece_of(begin, end, b, units);
      ASSERT_LT(piece.first_unit, piece.end_unit) << "part " << part << " sequence " << b;
      ASSERT_LE(piece.end_unit, units) << "part " << part << " sequence " << b;
      for (int32_t u = piece.first_unit; u < piece.end_unit; ++u) ++taken[b][u];
      splits[b].push_back(piece.split);
      work += piece.end_unit - piece.first_unit + kSequenceCost;
    }
    // Within one tile and one sequence's start of an even share of the total.
    EXPECT_LE(work, share_of(built.total, parts) + kSequenceCost) << "part " << part;
  }

  int64_t slots = 0;
  for (std::size_t b = 0; b < tiles.size(); ++b) {
    for (std::size_t u = 0; u < taken[b].size(); ++u)
      ASSERT_EQ(taken[b][u], 1) << "sequence " << b << " unit " << u;
    for (std::size_t k = 0; k < splits[b].size(); ++k)
      EXPECT_EQ(splits[b][k], int32_t(k)) << "sequence " << b;
    EXPECT_EQ(built.first_slot[b], slots) << "sequence " << b;
    slots += slots_of(int64_t(splits[b].size()));
  }
  EXPECT_EQ(built.first_slot.back(), slots);
  EXPECT_LE(slots, max_slots(parts));
}

Built expect_valid(const std::vector<int32_t>& tiles, int parts) {
  SCOPED_TRACE(describe(tiles, parts));
  const Built built = build(tiles, parts, 1);
  check(tiles, parts, built);
  return built;
}

// `count` sequences of tiles drawn uniformly from [lo, hi], the same for a seed.
std::vector<int32_t> random_tiles(unsigned seed, int count, int32_t lo, int32_t hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tiles_of(lo, hi);
  std::vector<int32_t> tiles(count);
  for (int32_t& t : tiles) t = tiles_of(rng);
  return tiles;
}

// Ten tiles, an empty sequence, three tiles over 3 parts: the cost line is [0, 15) [15, 21)
// [21, 29), share 10. Part 0 takes tiles 0-4 of sequence 0, part 1 its tiles 5-9 (its second
// piece), part 2 the empty sequence and sequence 2: sequence 0 alone is split, into slots 0, 1.
TEST(SplitSchedule, HandWorkedExample) {
  const Built built = expect_valid({10, 0, 3}, 3);
  EXPECT_EQ(built.total, 29);
  EXPECT_EQ(built.share, 10);
  const std::vector<PartStart> starts = {{0, 0, 0}, {0, 5, 1}, {1, 0, 0}, {3, 0, 0}};
  EXPECT_TRUE(same(built.part_starts, starts));
  EXPECT_EQ(built.first_slot, (std::vector<int32_t>{0, 2, 2, 2}));
}

// FlashMLA's motivating case: 64 sequences of 1k to 16k keys (16 to 256 tiles), on every SM
// (16 heads: one row tile, 132 parts) and on the parts of 2 and 4 row tiles.
TEST(SplitSchedule, RaggedBatch) {
  const std::vector<int32_t> tiles = random_tiles(3, 64, 16, 256);
  for (int parts : {132, 66, 33}) expect_valid(tiles, parts);
}

// Every sequence the same length: whole sequences a part where the share rounds up to them by at
// most a cut's cost, else split evenly.
TEST(SplitSchedule, EqualLengths) {
  // 64 × 1k keys over 33 parts (128 heads, s_q 2): share 41 → 42, two sequences a part.
  const Built pairs = expect_valid(std::vector<int32_t>(64, 16), 33);
  EXPECT_EQ(pairs.share, 42);
  EXPECT_EQ(pairs.first_slot.back(), 0);
  // 128 × 4k keys over 132 parts: share 67 → 69, one sequence a part, 4 parts idle.
  const Built ones = expect_valid(std::vector<int32_t>(128, 64), 132);
  EXPECT_EQ(ones.share, 69);
  EXPECT_EQ(ones.first_slot.back(), 0);
  // 64 × 1k keys over 132 parts: 21 would add 10 to the share of 11; every sequence is cut, into
  // two or three pieces.
  const Built cut = expect_valid(std::vector<int32_t>(64, 16), 132);
  EXPECT_EQ(cut.share, 11);
  for (int b = 0; b < 64; ++b) {
    const int32_t pieces = cut.first_slot[b + 1] - cut.first_slot[b];
    EXPECT_TRUE(pieces == 2 || pieces == 3) << "sequence " << b;
  }
  expect_valid(std::vector<int32_t>(64, 256), 132);
  // One sequence longer: the lengths differ, the share is the even one (no rounding).
  std::vector<int32_t> almost(64, 16);
  almost[17] = 17;
  EXPECT_EQ(expect_valid(almost, 33).share, share_of(64 * 21 + 1, 33));
}

// Empty sequences (one unit each: their rows are still written) among long ones, and only empty.
TEST(SplitSchedule, EmptySequences) {
  expect_valid({0, 300, 0, 0, 17, 0, 625, 0}, 132);
  const Built all_empty = expect_valid(std::vector<int32_t>(5, 0), 132);
  EXPECT_EQ(all_empty.first_slot.back(), 0);  // one unit is never split
}

// More sequences than parts: many whole sequences a part.
TEST(SplitSchedule, BatchLargerThanParts) {
  const std::vector<int32_t> tiles = random_tiles(5, 500, 0, 40);
  for (int parts : {132, 33, 7}) expect_valid(tiles, parts);
}

// One long sequence (40k keys: 625 tiles) split over every part, and a one-tile one that leaves
// most parts empty.
TEST(SplitSchedule, OneSequence) {
  const Built long_one = expect_valid({625}, 132);
  EXPECT_EQ(long_one.first_slot.back(), 125);  // share 5: 5 tiles a part, the first part none
  expect_valid({625}, 66);
  const Built short_one = expect_valid({1}, 132);
  EXPECT_EQ(short_one.first_slot.back(), 0);
}

// One part: every sequence whole in it, no slot.
TEST(SplitSchedule, OnePart) {
  const Built built = expect_valid({3, 0, 900, 64}, 1);
  EXPECT_EQ(built.first_slot.back(), 0);
  EXPECT_EQ(max_slots(1), 0);
}

TEST(SplitSchedule, Sweep) {
  std::mt19937 rng(11);
  for (int round = 0; round < 300; ++round) {
    const int batch = std::uniform_int_distribution<int>(1, 300)(rng);
    const int parts = std::uniform_int_distribution<int>(1, 264)(rng);
    const int longest = std::uniform_int_distribution<int>(0, 700)(rng);
    std::vector<int32_t> tiles(batch);
    for (int32_t& t : tiles) t = std::uniform_int_distribution<int32_t>(0, longest)(rng);
    expect_valid(tiles, parts);
    if (::testing::Test::HasFailure()) return;
  }
}

// The workspace: the partials of max_slots slots, their LSEs, the schedule; each part
// 16-byte aligned where fp32 runs are stored, and sized from (batch, parts) alone.
TEST(SplitSchedule, WorkspaceLayout) {
  const int64_t rows = 128, hdim = 512;
  const WorkspaceLayout layout = workspace_layout(64, 132, rows, hdim);
  const int64_t slots = 2 * 131;
  EXPECT_EQ(layout.partial_lse, slots * rows * hdim * 4);
  EXPECT_EQ(layout.part_starts, layout.partial_lse + slots * rows * 4);
  EXPECT_EQ(layout.first_slot, layout.part_starts + 133 * 12);
  EXPECT_EQ(layout.bytes, layout.first_slot + 65 * 4);
  EXPECT_EQ(layout.partial_lse % 16, 0);
  const WorkspaceLayout one_part = workspace_layout(7, 1, rows, hdim);
  EXPECT_EQ(one_part.part_starts, 0);  // no slot: the schedule alone
  EXPECT_EQ(one_part.bytes, 2 * 12 + 8 * 4);
}

}  // namespace
}  // namespace hfa::sm90::decode::schedule
