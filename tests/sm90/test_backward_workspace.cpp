// The backward's workspace as the host sizes it and the kernels index it (sm90/bwd/workspace.hpp):
// the order of each fp32 accumulator chunk (where the consumers' registers land and where the
// postprocess reads them back), and the rows a problem's runs are padded to, which follow the
// configuration it runs on (80 query rows at hdim 128 without a window or softcap, 64 with
// one). Host arithmetic: it runs everywhere, GPU or not.
#include <gtest/gtest.h>

#include <type_traits>
#include <vector>

#include "sm90/bwd/launch.hpp"

namespace hfa::sm90 {
namespace {

// Float f of a chunk lands on (row, column) of the block.
template <typename Chunk>
void expect_at(int f, int row, int column) {
  const bwd::ChunkCoords at = Chunk::coords(f);
  EXPECT_EQ(at.row, row) << f;
  EXPECT_EQ(at.column, column) << f;
}

// Every float of a chunk lands on its own (row, column) of the block, and the pairs the
// postprocess reads together are neighbours the way the chunk says (kRowPairs).
template <typename Chunk>
void expect_bijection(int rows, int columns) {
  ASSERT_EQ(Chunk::kFloats, rows * columns);
  std::vector<int> seen(Chunk::kFloats, 0);
  for (int f = 0; f < Chunk::kFloats; ++f) {
    const bwd::ChunkCoords at = Chunk::coords(f);
    ASSERT_GE(at.row, 0);
    ASSERT_LT(at.row, rows);
    ASSERT_GE(at.column, 0);
    ASSERT_LT(at.column, columns);
    ++seen[at.row * columns + at.column];
    if (f % 2 == 1) {
      const bwd::ChunkCoords before = Chunk::coords(f - 1);
      EXPECT_EQ(at.row, before.row + (Chunk::kRowPairs ? 0 : 1)) << f;
      EXPECT_EQ(at.column, before.column + (Chunk::kRowPairs ? 1 : 0)) << f;
    }
  }
  for (int i = 0; i < Chunk::kFloats; ++i) EXPECT_EQ(seen[i], 1) << "element " << i;
}

TEST(BackwardDqChunk, EveryFloatItsOwnElement) {
  expect_bijection<bwd::FragmentChunk<64, 128>>(64, 128);
  expect_bijection<bwd::FragmentChunk<128, 64>>(128, 64);
  expect_bijection<bwd::TransposedFragmentChunk<80, 128>>(80, 128);
  // Head dims 192 and 256 with the gradients transposed: dQᵀ over 64 queries, and the key
  // accumulators' dKᵀ, dVᵀ over 80 keys.
  expect_bijection<bwd::TransposedFragmentChunk<64, 256>>(64, 256);
  expect_bijection<bwd::TransposedFragmentChunk<64, 192>>(64, 192);
  expect_bijection<bwd::TransposedFragmentChunk<80, 256>>(80, 256);
  expect_bijection<bwd::TransposedFragmentChunk<80, 192>>(80, 192);
}

// The chunks each configuration's kernels use: dQ transposed at hdim 128's 80 rows and where
// the gradients are transposed, and then the key accumulators too.
TEST(BackwardDqChunk, ChunksByConfiguration) {
  EXPECT_TRUE((std::is_same_v<bwd::DqChunk<bwd::Config<256, 256>>,
                              bwd::TransposedFragmentChunk<64, 256>>));
  EXPECT_TRUE((std::is_same_v<bwd::KeyChunk<bwd::Config<256, 256>, 256>,
                              bwd::TransposedFragmentChunk<80, 256>>));
  EXPECT_TRUE((std::is_same_v<bwd::KeyChunk<bwd::Config<192, 128>, 128>,
                              bwd::TransposedFragmentChunk<80, 128>>));
  EXPECT_TRUE((std::is_same_v<bwd::DqChunk<bwd::Config<256, 256, true>>,
                              bwd::TransposedFragmentChunk<64, 256>>));
  EXPECT_TRUE((std::is_same_v<bwd::DqChunk<bwd::Config<256, 256, false, false, true>>,
                              bwd::FragmentChunk<64, 256>>));
  EXPECT_TRUE((std::is_same_v<bwd::KeyChunk<bwd::Config<128, 128>, 128>,
                              bwd::FragmentChunk<128, 128>>));
}

// A transposed dK or dV chunk (80 keys): float (g·128 + t)·4 + r of part s is register 4g + r
// of thread t of the warpgroup accumulating slab s, whose rows are head dims and columns keys.
TEST(BackwardDqChunk, TransposedKeyChunkOrder) {
  using Chunk = bwd::TransposedFragmentChunk<80, 256>;  // (key, dim)
  expect_at<Chunk>(1, 1, 0);
  expect_at<Chunk>(4 * 128, 8, 0);
  expect_at<Chunk>(4 * (9 * 128 + 127) + 3, 79, 63);
  expect_at<Chunk>(3 * 64 * 80, 0, 192);  // part 3: the last slab
  EXPECT_EQ(Chunk::part(0, 3), 3 * 64 * 80);
}

// dQᵀ's chunk: float (g·128 + t)·4 + r of part s is register 4g + r of thread t of the
// warpgroup computing slab s, whose accumulator rows are head dims (16·warp + lane / 4, + 8)
// and columns queries (8g + 2·(lane % 4), + 1).
TEST(BackwardDqChunk, TransposedIsDqTransposedAccumulatorOrder) {
  using Chunk = bwd::TransposedFragmentChunk<80, 128>;  // (query, dim)
  expect_at<Chunk>(0, 0, 0);
  expect_at<Chunk>(1, 1, 0);                  // r = 1: the next query
  expect_at<Chunk>(2, 0, 8);                  // r = 2: the dim 8 rows down
  expect_at<Chunk>(4 * 1, 2, 0);              // thread 1: its column pair
  expect_at<Chunk>(4 * 4, 0, 1);              // thread 4: the next row
  expect_at<Chunk>(4 * 32, 0, 16);            // warp 1
  expect_at<Chunk>(4 * 128, 8, 0);            // group 1: queries 8 on
  expect_at<Chunk>(4 * (9 * 128 + 127) + 3, 79, 63);  // the part's last float
  expect_at<Chunk>(64 * 80, 0, 64);           // part 1: the second slab
  EXPECT_EQ(Chunk::part(0, 1), 64 * 80);
}

TEST(BackwardTiles, QueryRowsByConfiguration) {
  EXPECT_EQ((bwd::Config<128, 128>::kBlockM), 80);
  EXPECT_TRUE((bwd::Config<128, 128>::kDqTransposed));
  EXPECT_EQ((bwd::Config<128, 128, true>::kBlockM), 64);
  EXPECT_EQ((bwd::Config<128, 128, false, true>::kBlockM), 64);
  EXPECT_EQ((bwd::Config<128, 128, true, true>::kBlockM), 64);
  EXPECT_EQ((bwd::Config<64, 64>::kBlockM), 128);
  EXPECT_EQ((bwd::Config<192, 128>::kBlockM), 64);
  EXPECT_EQ((bwd::Config<256, 256>::kBlockM), 64);
  EXPECT_FALSE((bwd::Config<64, 64>::kDqTransposed));
  EXPECT_FALSE((bwd::Config<256, 256>::kDqTransposed));
}

// Head dims 192 and 256 in the default mode: 80-key blocks with the gradients transposed
// (softcap and windows included); the deterministic mode keeps the 64 × 64 head-dims-split
// tile, whose query rows the default's match (the workspace's shape is the mode's either way).
TEST(BackwardTiles, KeyBlocksByConfiguration) {
  EXPECT_TRUE((bwd::Config<256, 256>::kTransposedGradients));
  EXPECT_TRUE((bwd::Config<256, 256, false, true>::kTransposedGradients));
  EXPECT_TRUE((bwd::Config<192, 192>::kTransposedGradients));
  EXPECT_TRUE((bwd::Config<192, 128>::kTransposedGradients));
  EXPECT_EQ((bwd::Config<256, 256>::kBlockN), 80);
  EXPECT_EQ((bwd::Config<192, 128>::kBlockN), 80);
  EXPECT_EQ((bwd::Config<256, 256>::kStagesDO), 1);
  EXPECT_EQ((bwd::Config<192, 192>::kStagesDO), 2);
  EXPECT_TRUE((bwd::Config<256, 256, true>::kTransposedGradients));
  EXPECT_FALSE((bwd::Config<256, 256, false, false, true>::kTransposedGradients));
  EXPECT_EQ((bwd::Config<256, 256, true>::kBlockN), 80);
  EXPECT_EQ((bwd::Config<256, 256, false, false, true>::kBlockN), 64);
  EXPECT_FALSE((bwd::Config<128, 128>::kTransposedGradients));
  // Each warpgroup's share of the head dims' slabs: all of them between the two, and its
  // registers (dKᵀ, dVᵀ 40 a slab) within what the 240 leave beside S, dP and a dQᵀ slab.
  using C256 = bwd::Config<256, 256>;
  for (int w = 0; w < 2; ++w) {
    const bwd::WarpgroupRole r = C256::role(w);
    EXPECT_EQ(r.key_row0, 40 * w);
    EXPECT_EQ(r.dk_count + r.dv_count, 4);
    EXPECT_EQ((r.dk_count + r.dv_count) * C256::kKeySlabRegisters, 160);
  }
  EXPECT_EQ(C256::role(0).dq_count + C256::role(1).dq_count, 4);
}

detail::BackwardProblem problem(int seqlen_q, bool window, bool softcap, bool deterministic) {
  detail::BackwardProblem p;
  p.fwd.batch = 2, p.fwd.heads_q = 4, p.fwd.heads_kv = 4;
  p.fwd.seqlen_q = seqlen_q, p.fwd.seqlen_k = 300;
  p.fwd.hdim_qk = p.fwd.hdim_v = 128;
  if (window) p.fwd.causal = true, p.fwd.window_right = 0;
  if (softcap) p.fwd.softcap = 4.0f;
  p.fwd.deterministic = deterministic;
  return p;
}

// The workspace a call is told to allocate is the layout of the configuration that runs it:
// 1000 queries pad to 1040 rows in 80-row blocks, 1024 in 64-row ones.
TEST(BackwardWorkspace, SizedForTheConfigurationThatRuns) {
  for (bool deterministic : {false, true}) {
    const detail::BackwardProblem plain = problem(1000, false, false, deterministic);
    const bwd::WorkspaceLayout rows80 = bwd::workspace_layout<bwd::Config<128, 128>>(plain);
    EXPECT_EQ(rows80.padded_rows, 1040);
    EXPECT_EQ((bwd::workspace_bytes<128, 128>(plain)), rows80.bytes);
    // Runs × padded rows × (LSE, D, 128 fp32 dQ) and a turn counter a block when deterministic,
    // each region 256-byte aligned.
    const std::size_t rows = 2 * 4 * 1040;
    EXPECT_GE(rows80.bytes, rows * (2 + 128) * sizeof(float) +
                                (deterministic ? rows / 80 * sizeof(int32_t) : 0));

    for (auto [window, softcap] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
      const detail::BackwardProblem p = problem(1000, window, softcap, deterministic);
      const bwd::WorkspaceLayout rows64 =
          bwd::workspace_layout<bwd::Config<128, 128, true>>(p);
      EXPECT_EQ(rows64.padded_rows, 1024);
      EXPECT_EQ((bwd::workspace_bytes<128, 128>(p)), rows64.bytes) << window << softcap;
    }
  }
}

// The key accumulators (a GQA group split over CTAs) pad each run to whole key blocks of the
// configuration that runs: 80 keys at hdim 256 in the default mode; none when deterministic.
TEST(BackwardWorkspace, KeyAccumulatorsInTheBlocksThatRun) {
  for (bool deterministic : {false, true}) {
    detail::BackwardProblem p = problem(1000, false, false, deterministic);
    p.fwd.heads_q = 8, p.fwd.heads_kv = 2;
    p.fwd.hdim_qk = p.fwd.hdim_v = 256;
    const bwd::WorkspaceLayout layout = bwd::workspace_layout<bwd::Config<256, 256>>(p);
    EXPECT_EQ(layout.padded_keys, deterministic ? 0 : 320);  // 300 keys in 80-key blocks
    EXPECT_EQ(layout.padded_rows, 1024);
    EXPECT_EQ((bwd::workspace_bytes<256, 256>(p)), layout.bytes);
  }
}

// A block-sparse mask's transposed lists follow the dense layout of its configuration (the
// windowed one: 64-row tiles at hdim 128), sized by the mask's own batch and head extents (one
// list where all five tensors broadcast a dim): per (list, key block) a pair per mask query
// block, the counts, a list entry and a bit block index per query tile; per (list, mask query
// block, slot) a partial block's bits.
TEST(BackwardWorkspace, BlockSparseListsAfterTheDenseLayout) {
  static const int32_t kData[1] = {0};
  for (bool broadcast : {false, true}) {
    SCOPED_TRACE(broadcast ? "mask broadcast over batch and heads" : "a mask per (batch, head)");
    detail::BackwardProblem p = problem(1000, false, false, false);  // 300 keys
    detail::BlockSparse& mask = p.fwd.block_sparse;
    detail::BlockIndexView view;
    view.data = kData;
    if (!broadcast) view.stride[0] = 4 * 8, view.stride[1] = 8;  // (batch 2, heads 4, ...)
    mask.kv_num_blocks = mask.kv_indices = mask.kv_mask_bits = view;
    mask.slots = 3;
    using Sparse = bwd::BlockSparseConfig<128, 128>;
    static_assert(Sparse::kBlockM == 64 && Sparse::kBlockN == 128 && Sparse::kBlockSparse);
    const bwd::WorkspaceLayout dense = bwd::workspace_layout<bwd::Config<128, 128, true>>(p);
    const bwd::WorkspaceLayout layout = bwd::workspace_layout<Sparse>(p);
    EXPECT_EQ(layout.padded_rows, dense.padded_rows);
    EXPECT_EQ(layout.sparse_offset, dense.bytes);
    EXPECT_EQ((bwd::block_sparse_workspace_bytes<128, 128>(p)), layout.bytes);

    const bwd::SparseListShape shape = bwd::sparse_list_shape(p.fwd);
    EXPECT_EQ(shape.lists(), broadcast ? 1 : 2 * 4);
    EXPECT_EQ(shape.q_blocks, 8);  // 1000 queries
    EXPECT_EQ(shape.k_blocks, 3);  // 300 keys
    EXPECT_EQ(bwd::sparse_query_tiles<Sparse>(p.fwd), 16);
    const std::size_t key_entries = std::size_t(shape.lists()) * 3;
    EXPECT_GE(layout.counts_offset - layout.pairs_offset, key_entries * 8 * sizeof(int32_t));
    EXPECT_GE(layout.queries_offset - layout.counts_offset,
              key_entries * sizeof(QueryListCounts));
    EXPECT_GE(layout.partial_bits_offset - layout.queries_offset,
              key_entries * 16 * sizeof(int32_t));
    EXPECT_GE(layout.bits_offset - layout.partial_bits_offset, key_entries * 16 * sizeof(int32_t));
    EXPECT_EQ(layout.bytes - layout.bits_offset,
              bwd::align_up(std::size_t(shape.lists()) * 8 * 3 * kSparseBlockWords *
                            sizeof(int32_t)));
  }
}

}  // namespace
}  // namespace hfa::sm90
