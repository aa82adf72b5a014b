// The sections of the sectioned tile order (tile_sections, sm90/common/launch.hpp), the tiles'
// walk through them (sectioned_ranks, sm90/common/tile_order.cuh), and whether the backward
// splits a GQA group over CTAs (bwd::heads_per_tile): host arithmetic, so it runs everywhere,
// GPU or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "sm90/bwd/launch.hpp"
#include "sm90/common/launch.hpp"
#include "sm90/common/tile_order.cuh"

namespace hfa::sm90 {
namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;
constexpr int kSms = 132;

TileSections sections(int pairs, int tiles, std::size_t bytes) {
  return tile_sections(pairs, tiles, bytes, 50 * kMiB, kSms);
}

int last_section_pairs(int pairs, TileSections s) { return pairs - (s.count - 1) * s.pairs; }

// The shape whose tail it was written for: the backward of GQA 32/8 heads at 8k, hdim 128
// (64 key blocks a kv head, 32 MiB of Q, dO and dQ accumulator each): not one pair fits half
// the L2, and a pair's 64 tiles are half a wave; three pairs make a wave, and the eight even out
// to two sections of four.
TEST(TileSections, AtLeastOneWave) {
  const TileSections s = sections(8, 64, 32 * kMiB);
  EXPECT_EQ(s.pairs, 4);
  EXPECT_EQ(s.count, 2);
}

// Many short pairs: the L2 decides (25 MiB / 0.25 MiB = 100), evened out to 10 sections of 103
// rather than 10 of 100 and a short one of 24 (the last, 97 pairs, holds 388 tiles: kept).
TEST(TileSections, L2FitEvenedOut) {
  const TileSections s = sections(1024, 4, kMiB / 4);
  EXPECT_EQ(s.pairs, 103);
  EXPECT_EQ(s.count, 10);
}

// The backward's hdim 128 causal 4k (batch 4 × 16 heads, 32 key blocks, 4 MiB a pair): six pairs
// fit, evened out to 7, which leaves 1 pair (32 tiles) for a tenth section; it joins the ninth.
TEST(TileSections, ShortLastSectionJoinsTheOneBefore) {
  const TileSections s = sections(64, 32, 4 * kMiB);
  EXPECT_EQ(s.pairs, 7);
  EXPECT_EQ(s.count, 9);
  EXPECT_EQ(last_section_pairs(64, s), 8);
}

TEST(TileSections, NeverMorePairsThanThereAre) {
  EXPECT_EQ(sections(3, 1000, 1).pairs, 3);
  EXPECT_EQ(sections(3, 1000, 1).count, 1);
  EXPECT_EQ(sections(1, 1, 50 * kMiB).pairs, 1);
  const TileSections none = tile_sections(0, 0, 0, 0, 1);  // no pairs, no tiles: still valid
  EXPECT_EQ(none.pairs, 1);
  EXPECT_EQ(none.count, 1);
}

// Over a sweep: sections of [1, pairs] pairs; at least the L2's share and a wave of tiles where
// the pairs allow; a last section of at least two waves of tiles unless it is the only one or a
// whole section; and every tile of the grid at its own (rank, pair), each pair's ranks in order
// (the deterministic backward's turns rely on it: a tile waits only for one launched before it).
TEST(TileSections, Sweep) {
  for (int pairs = 1; pairs <= 300; pairs += 7) {
    for (int tiles = 1; tiles <= 300; tiles += 11) {
      for (std::size_t bytes : {kMiB / 8, 2 * kMiB, 9 * kMiB, 40 * kMiB}) {
        const TileSections s = sections(pairs, tiles, bytes);
        const std::string where = std::to_string(pairs) + " pairs of " + std::to_string(tiles) +
                                  " tiles, " + std::to_string(bytes) + " bytes";
        ASSERT_GE(s.pairs, 1) << where;
        ASSERT_LE(s.pairs, pairs) << where;
        ASSERT_GE(s.count, 1) << where;
        const int fit = int(std::min<std::size_t>(25 * kMiB / bytes, pairs));
        EXPECT_GE(s.pairs, fit) << where;
        EXPECT_GE(int64_t(s.pairs) * tiles, std::min<int64_t>(int64_t(pairs) * tiles, kSms))
            << where;
        const int last = last_section_pairs(pairs, s);
        EXPECT_GE(last, 1) << where;
        EXPECT_LT(last, 2 * s.pairs) << where;
        if (s.count > 1 && last < s.pairs) {
          EXPECT_GE(int64_t(last) * tiles, 2 * kSms) << where;
        }

        std::vector<int> next_rank(pairs, 0);
        for (int tile = 0; tile < pairs * tiles; ++tile) {
          const TilePosition at = sectioned_ranks(tile, tiles, pairs, s);
          ASSERT_GE(at.pair, 0) << where;
          ASSERT_LT(at.pair, pairs) << where;
          ASSERT_EQ(at.rank, next_rank[at.pair]++) << where << ", tile " << tile;
        }
        for (int pair = 0; pair < pairs; ++pair) ASSERT_EQ(next_rank[pair], tiles) << where;
      }
    }
  }
}

// A model of how the grid runs the backward's causal tiles: the SMs take them in launch order,
// each SM the next tile as it frees; the tile of rank r (its key block, longest first) walks the
// query blocks from its diagonal to the end, plus kTileCost steps of its own (K/V loads, the
// epilogue). Its makespan over the ideal (the work spread evenly, or the longest tile where that
// is longer), for the benchmark grid's shapes (16k tokens, 2048 / hdim heads): where the last
// section was 1 pair of 32 tiles (hdim 128, 4k) the model read 1.096 and the kernel 0.89-0.92
// of FlashAttention-3, whose order reads 1.003; joined to the one before, 1.006 and 0.97
// (docs/decisions/051).
template <int kHdim>
double modelled_tail(int seqlen) {
  constexpr int kTileCost = 3;
  using Causal = bwd::Config<kHdim, kHdim, true>;  // the tile the causal backward runs
  constexpr int block_m = Causal::kBlockM, block_n = Causal::kBlockN;
  const int pairs = 2048 / kHdim * (16384 / seqlen);
  const int blocks = (seqlen + block_n - 1) / block_n;
  const auto steps = [&](int rank) {
    return std::max(1, (seqlen - rank * block_n + block_m - 1) / block_m) + kTileCost;
  };
  const std::size_t bytes_per_pair = std::size_t(seqlen) * kHdim * (2 * 2 + 4);  // Q, dO; dQ fp32
  const TileSections s = sections(pairs, blocks, bytes_per_pair);
  std::vector<int64_t> free_at(kSms, 0);  // a min-heap of the SMs' next free time
  int64_t work = 0;
  for (int tile = 0; tile < pairs * blocks; ++tile) {
    std::pop_heap(free_at.begin(), free_at.end(), std::greater<>());
    free_at.back() += steps(sectioned_ranks(tile, blocks, pairs, s).rank);
    std::push_heap(free_at.begin(), free_at.end(), std::greater<>());
    work += steps(tile % blocks);
  }
  const double ideal = std::max(double(work) / kSms, double(steps(0)));
  return double(*std::max_element(free_at.begin(), free_at.end())) / ideal;
}

TEST(TileSections, ModelledTailOfTheCausalGrid) {
  for (int seqlen : {1024, 2048, 4096, 8192, 16384}) {
    EXPECT_LT(modelled_tail<64>(seqlen), 1.03) << "hdim 64, " << seqlen << " keys";
    EXPECT_LT(modelled_tail<128>(seqlen), 1.03) << "hdim 128, " << seqlen << " keys";
    EXPECT_LT(modelled_tail<256>(seqlen), 1.03) << "hdim 256, " << seqlen << " keys";
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
