// How many (batch, head) pairs a section of the sectioned tile order holds (pairs_per_section,
// sm90/common/launch.hpp), and whether the backward splits a GQA group over CTAs
// (bwd::heads_per_tile): host arithmetic, so it runs everywhere, GPU or not.
#include <gtest/gtest.h>

#include <algorithm>

#include "sm90/bwd/launch.hpp"
#include "sm90/common/launch.hpp"

namespace hfa::sm90 {
namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;
constexpr int kSms = 132;

// The shape whose tail it was written for: the backward of GQA 32/8 heads at 8k, hdim 128
// (64 key blocks a kv head, 32 MiB of Q, dO and dQ accumulator each): not one pair fits half
// the L2, and a pair's 64 tiles are half a wave; three pairs make a wave, and the eight even out
// to two sections of four.
TEST(PairsPerSection, AtLeastOneWave) {
  EXPECT_EQ(pairs_per_section(8, 64, 32 * kMiB, 50 * kMiB, kSms), 4);
}

// Many short pairs: the L2 decides (25 MiB / 0.25 MiB = 100), evened out to 10 sections of 103
// rather than 10 of 100 and a short one of 24.
TEST(PairsPerSection, L2FitEvenedOut) {
  EXPECT_EQ(pairs_per_section(1024, 4, kMiB / 4, 50 * kMiB, kSms), 103);
}

TEST(PairsPerSection, NeverMorePairsThanThereAre) {
  EXPECT_EQ(pairs_per_section(3, 1000, 1, 50 * kMiB, kSms), 3);
  EXPECT_EQ(pairs_per_section(1, 1, 50 * kMiB, 50 * kMiB, kSms), 1);
  EXPECT_EQ(pairs_per_section(0, 0, 0, 0, 1), 1);  // no pairs, no tiles: still a valid divisor
}

// Over a sweep: within [1, pairs]; at least the L2's share and a wave of tiles where the pairs
// allow; and a last section at most (sections − 1) pairs shorter than the others.
TEST(PairsPerSection, Sweep) {
  for (int pairs = 1; pairs <= 300; pairs += 7) {
    for (int tiles = 1; tiles <= 300; tiles += 11) {
      for (std::size_t bytes : {kMiB / 8, 2 * kMiB, 9 * kMiB, 40 * kMiB}) {
        const int n = pairs_per_section(pairs, tiles, bytes, 50 * kMiB, kSms);
        ASSERT_GE(n, 1);
        ASSERT_LE(n, pairs);
        const int fit = int(std::min<std::size_t>(25 * kMiB / bytes, pairs));
        EXPECT_GE(n, fit) << pairs << " pairs, " << tiles << " tiles, " << bytes << " bytes";
        EXPECT_GE(int64_t(n) * tiles, std::min<int64_t>(int64_t(pairs) * tiles, kSms));
        const int sections = (pairs + n - 1) / n;
        const int last = pairs - (sections - 1) * n;
        EXPECT_GE(last, n - (sections - 1)) << pairs << " pairs in sections of " << n;
      }
    }
  }
}


// heads_q / heads_kv / batch, a causal mask, the deterministic mode.
detail::BackwardProblem backward_problem(int heads_q, int heads_kv, int batch, bool causal,
                                         bool deterministic = false) {
  detail::BackwardProblem p;
  p.fwd.heads_q = heads_q, p.fwd.heads_kv = heads_kv, p.fwd.batch = batch;
  if (causal) p.fwd.causal = true, p.fwd.window_right = 0;
  p.fwd.deterministic = deterministic;
  return p;
}

int heads_per_tile(const detail::BackwardProblem& p, int n_blocks, int sms = kSms) {
  return bwd::heads_per_tile(p, n_blocks, {sms, 50 * kMiB});
}

// The shapes (hdim 128: 128-key blocks): one kv head at 16k is 128 tiles of 132 SMs,
// a full wave without a mask, a tail of long CTAs with one.
TEST(BackwardHeadsPerTile, SplitWhereWholeGroupsIdleOrUnequal) {
  EXPECT_EQ(heads_per_tile(backward_problem(8, 1, 1, false), 128), 8);
  EXPECT_EQ(heads_per_tile(backward_problem(8, 1, 1, true), 128), 1);
  EXPECT_EQ(heads_per_tile(backward_problem(8, 1, 1, false), 32), 1);   // 4k: a quarter wave
  EXPECT_EQ(heads_per_tile(backward_problem(32, 8, 1, false), 64), 4);  // 512 of 528 slots
  EXPECT_EQ(heads_per_tile(backward_problem(64, 8, 2, false), 64), 8);
  EXPECT_EQ(heads_per_tile(backward_problem(8, 1, 1, false), 150), 1);  // 150 of 264 slots
  EXPECT_EQ(heads_per_tile(backward_problem(8, 2, 2, false), 3, 2), 4);  // sm_margin: wave of 2
}

TEST(BackwardHeadsPerTile, WholeGroupsWithoutKeyAccumulators) {
  EXPECT_EQ(heads_per_tile(backward_problem(8, 8, 1, true), 4), 1);  // no group to split
  EXPECT_EQ(heads_per_tile(backward_problem(8, 1, 1, true, true), 4), 8);  // deterministic
}

}  // namespace
}  // namespace hfa::sm90
