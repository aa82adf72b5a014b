// The score policy's pieces on the host, in float64 (the oracle's precision) and float: the
// modifiers against their formulas, the window rule against problem.hpp's statement, the
// block-sparse lists and bits against a hand-built mask.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/score_policy.hpp"

namespace hfa::policy {
namespace {

TEST(ScorePolicy, NoScoreModIsTheIdentity) {
  const ScoreMods<> mods{};
  EXPECT_TRUE(ScoreMods<>::kIdentity);
  EXPECT_FALSE(ScoreMods<>::kScalesGrad);
  EXPECT_EQ(mods.score(1.25), 1.25);
  EXPECT_EQ(mods.score(-INFINITY), -INFINITY);
}

// The tile's score under a softcap c is tanh(s·scale/c); the kernels multiply it by c·log2(e).
TEST(ScorePolicy, SoftcapIsTanhOfThePrescaledScore) {
  const float scale = 0.125f, cap = 30.0f;
  const ListedMods<true> mods{Softcap::from_prescale(scale / cap), {}};
  for (double s : {-4000.0, -250.0, -3.0, -0.01, 0.0, 0.5, 17.0, 240.0, 4000.0}) {
    double factor = 0.0;
    const double t = mods.score(s, {}, factor);
    const double expected = std::tanh(s * double{scale / cap});
    EXPECT_NEAR(t, expected, 1e-6) << s;  // to_exponent is a float
    EXPECT_NEAR(factor, 1.0 - t * t, 1e-15) << s;
    EXPECT_NEAR(mods.score(static_cast<float>(s)), expected, 1e-6) << s;
  }
}

TEST(ScorePolicy, DecodeSoftcapIsInTheLog2Domain) {
  const float cap = 50.0f;
  const SoftcapLog2 softcap{static_cast<float>(cap * kLog2e)};
  for (double x : {-3.0, -0.2, 0.0, 0.7, 9.0}) {
    EXPECT_NEAR(softcap.score(x), cap * kLog2e * std::tanh(x), 1e-4) << x;
  }
}

// ALiBi adds −slope·|i + seqlen_k − seqlen_q − j| to the logits after the scale and the softcap:
// in the tile's units, times the unit (what scale_log2 / log2(e) multiplies), that is the bias.
TEST(ScorePolicy, AlibiBiasesTheLogitsAfterScaleAndSoftcap) {
  const float scale = 0.0883883f, slope = 0.25f;
  const int seqlen_q = 5, seqlen_k = 9;
  for (float cap : {0.0f, 20.0f}) {
    const Alibi alibi = Alibi::for_problem(slope, scale, cap);
    const double unit = score_unit(scale, cap);
    for (int i = 0; i < seqlen_q; ++i) {
      for (int j = 0; j < seqlen_k; ++j) {
        const ScorePosition at{i, j, seqlen_k - seqlen_q};
        const double tile = 0.3;  // a score in the tile's units
        const double logit = alibi.score(tile, at) * unit;
        const double expected = tile * unit - double{slope} * std::abs(i + seqlen_k - seqlen_q - j);
        EXPECT_NEAR(logit, expected, 1e-6) << i << ' ' << j;
      }
    }
  }
}

// The GPU kernels' form (score_at_offset: the signed offset i + diagonal − j, in a float) is the
// same bias, on both sides of the diagonal; the kernels' policy of ALiBi is the bias alone.
TEST(ScorePolicy, AlibiKernelFormMatchesThePositions) {
  static_assert(std::is_same_v<ListedMods<false, true>, ScoreMods<NoScoreMod, Alibi>>);
  static_assert(std::is_same_v<ListedMods<false>, ScoreMods<>>);
  const ListedMods<false, true> mods{{}, Alibi::for_problem(0.25f, 0.125f, 0.0f)};
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 11; ++j) {
      const ScorePosition at{i, j, 4};
      const float offset = static_cast<float>(i + at.diagonal - j);
      EXPECT_FLOAT_EQ(mods.score_at_offset(1.5f, offset), mods.score(1.5f, at)) << i << ' ' << j;
    }
  }
}

// The kernels' slopes: element (b, h) of a (heads) or (batch, heads) vector, in the tile's unit.
TEST(ScorePolicy, AlibiSlopesIndexBothShapes) {
  const float slopes[6] = {0.5f, 0.25f, 0.125f, 1.0f, 2.0f, 4.0f};
  const AlibiSlopes per_head{slopes, 0, 1, 0.5f};
  EXPECT_FLOAT_EQ(per_head.of(1, 2).slope_in_units, 0.25f);
  const AlibiSlopes per_sequence{slopes, 3, 1, 0.5f};
  EXPECT_FLOAT_EQ(per_sequence.of(1, 2).slope_in_units, 8.0f);
}

// Softcap then ALiBi: the backward's factor is the cap's derivative at the cap's output.
TEST(ScorePolicy, CappedAndBiasedKeepsTheCapsFactor) {
  const ScoreMods<Softcap, Alibi> mods{Softcap::from_prescale(0.01f), {0.5f}};
  static_assert(ScoreMods<Softcap, Alibi>::kPositional && ScoreMods<Softcap, Alibi>::kScalesGrad);
  double factor = 0.0;
  const double s = mods.score(80.0, {2, 6, 1}, factor);
  const double t = std::tanh(80.0 * double{0.01f});
  EXPECT_NEAR(s, t - 0.5 * 3, 1e-6);
  EXPECT_NEAR(factor, 1.0 - t * t, 1e-6);
}

TEST(ScorePolicy, SinkLogitIsInTheLog2DomainAndMinusInfinityWithout) {
  const float sinks[2] = {0.5f, -2.0f};
  EXPECT_NEAR(SinkLogit{sinks}.log2(1), -2.0 * 1.4426950408889634, 1e-6);
  EXPECT_EQ(SinkLogit{nullptr}.log2(0), -INFINITY);
}

// problem.hpp: query i sees key j iff j < seqlen_k and
//   (left < 0 || j >= i + seqlen_k − seqlen_q − left) and (right < 0 || j <= i + ... + right).
TEST(ScorePolicy, WindowRuleIsTheProblemsStatement) {
  for (int seqlen_q : {1, 4, 11}) {
    for (int seqlen_k : {1, 5, 11}) {
      for (int left : {-1, 0, 2, 7}) {
        for (int right : {-1, 0, 3}) {
          const WindowRule rule{left, right};
          const int diagonal = seqlen_k - seqlen_q;
          for (int i = 0; i < seqlen_q; ++i) {
            for (int j = 0; j < seqlen_k + 2; ++j) {
              const bool expected = j < seqlen_k && (left < 0 || j >= i + diagonal - left) &&
                                    (right < 0 || j <= i + diagonal + right);
              EXPECT_EQ(rule.visible({i, j, diagonal}, seqlen_k), expected)
                  << seqlen_q << ' ' << seqlen_k << ' ' << left << ' ' << right << ' ' << i
                  << ' ' << j;
              // The inverse bounds hold the same pairs.
              if (j < seqlen_k && left >= 0 && right >= 0) {
                const bool inverse = i >= window_first_query(right, j - diagonal) &&
                                     i <= window_last_query(left, j - diagonal);
                EXPECT_EQ(inverse, expected);
              }
            }
          }
        }
      }
    }
  }
}

// One (batch, head), three query blocks of 2 rows over four key blocks of 2 columns: block 0
// visits key block 0 fully and 1 partially, block 1 nothing, block 2 blocks 3 (full), 2
// (partial, bits of one diagonal).
TEST(ScorePolicy, BlockSparseVisitsFullThenPartialBlocks) {
  const int max_blocks = 4;
  const std::vector<int32_t> full_count{1, 0, 1}, partial_count{1, 0, 1};
  std::vector<int32_t> full(3 * max_blocks, -1), partial(3 * max_blocks, -1);
  full[0 * max_blocks] = 0;
  partial[0 * max_blocks] = 1;
  full[2 * max_blocks] = 3;
  partial[2 * max_blocks] = 2;
  // Two rows a block, one word a row.
  std::vector<uint64_t> bits(3 * max_blocks * 2, 0);
  bits[(0 * max_blocks) * 2 + 0] = 0b01;  // row 0 sees column 0
  bits[(0 * max_blocks) * 2 + 1] = 0b11;  // row 1 sees both
  bits[(2 * max_blocks) * 2 + 0] = 0b01;
  bits[(2 * max_blocks) * 2 + 1] = 0b10;
  const BlockSparse mask{partial_count.data(), full_count.data(), partial.data(), full.data(),
                         bits.data(),          max_blocks,        2,              2};

  EXPECT_EQ(mask.count(mask.list_index(0, 1, 3)), 0);  // an empty row of blocks
  const int64_t first = mask.list_index(0, 0, 3);
  ASSERT_EQ(mask.count(first), 2);
  EXPECT_EQ(mask.visit(first, 0).block, 0);
  EXPECT_FALSE(mask.visit(first, 0).partial);
  const BlockSparse::Visit v = mask.visit(first, 1);
  EXPECT_EQ(v.block, 1);
  ASSERT_TRUE(v.partial);
  EXPECT_TRUE(mask.visible(v.bits_entry, 0, 0));
  EXPECT_FALSE(mask.visible(v.bits_entry, 0, 1));
  EXPECT_TRUE(mask.visible(v.bits_entry, 1, 1));

  const int64_t last = mask.list_index(0, 2, 3);
  ASSERT_EQ(mask.count(last), 2);
  EXPECT_EQ(mask.visit(last, 0).block, 3);
  const BlockSparse::Visit d = mask.visit(last, 1);
  EXPECT_EQ(d.block, 2);
  EXPECT_TRUE(mask.visible(d.bits_entry, 0, 0) && mask.visible(d.bits_entry, 1, 1));
  EXPECT_FALSE(mask.visible(d.bits_entry, 0, 1) || mask.visible(d.bits_entry, 1, 0));
}

}  // namespace
}  // namespace hfa::policy
