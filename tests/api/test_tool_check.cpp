// The tool's sampled check cuts each block of query rows out as a small problem with a shifted
// window. Feed it outputs computed by the full float64 reference: whatever the lengths and
// mask, the errors it reports must be rounding only.
#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "api/validate.hpp"
#include "block_mask.hpp"
#include "check.hpp"
#include "cpu/reference.hpp"

namespace hfa::tool {
namespace {

// Replaces the workload's outputs by the full reference's.
void fill_with_reference(Workload& w) {
  const Spec& s = w.spec();
  Tensor q = make_tensor(w.q.data(), s.dtype, {s.batch, s.seqlen_q, s.heads, s.hdim});
  Tensor k = make_tensor(w.k.data(), s.dtype, {s.batch, s.seqlen_k, s.kv_heads, s.hdim});
  Tensor v = make_tensor(w.v.data(), s.dtype, {s.batch, s.seqlen_k, s.kv_heads, s.hdim_v});
  Tensor out = make_tensor(w.out.data(), s.dtype, {s.batch, s.seqlen_q, s.heads, s.hdim_v});
  Tensor lse = make_tensor(w.lse.data(), DType::f32, {s.batch, s.heads, s.seqlen_q});
  Tensor dout = make_tensor(w.dout.data(), s.dtype, {s.batch, s.seqlen_q, s.heads, s.hdim_v});
  // The gradients' own arrays (the reference writes to vectors, but a call's gradients may share
  // no memory with its inputs).
  Tensor dq_view = make_tensor(w.dq.data(), s.dtype, {s.batch, s.seqlen_q, s.heads, s.hdim});
  Tensor dk_view = make_tensor(w.dk.data(), s.dtype, {s.batch, s.seqlen_k, s.kv_heads, s.hdim});
  Tensor dv_view = make_tensor(w.dv.data(), s.dtype, {s.batch, s.seqlen_k, s.kv_heads, s.hdim_v});
  const Options options = s.options();
  detail::BackwardProblem p;
  const Status status =
      detail::build_backward_problem({&dout, &q, &k, &v, &out, &lse, &dq_view, &dk_view, &dv_view,
                                      &options},
                                     detail::Purpose::run, &p);
  ASSERT_TRUE(status.is_ok()) << status.message();

  std::vector<double> o(w.out.size()), l(w.lse.size()), dq(w.q.size()), dk(w.k.size()), dv(w.v.size());
  cpu::reference_forward(p.fwd, o.data(), l.data());
  cpu::reference_backward(p, dq.data(), dk.data(), dv.data());
  const auto store = [](HostArray& to, const std::vector<double>& from) {
    for (std::size_t i = 0; i < from.size(); ++i) to.set(static_cast<int64_t>(i), static_cast<float>(from[i]));
  };
  store(w.out, o);
  store(w.lse, l);
  store(w.dq, dq);
  store(w.dk, dk);
  store(w.dv, dv);
}

TEST(ToolCheck, SampledBlocksMatchTheFullReference) {
  for (int64_t seqlen_q : {1, 5, 40, 77})
    for (int64_t seqlen_k : {0, 3, 40, 90})
      for (int mask = 0; mask < 5; ++mask) {
        Spec s;
        s.device = Device::cpu();
        s.dtype = DType::f32;
        s.batch = 2, s.heads = 2, s.kv_heads = 1, s.hdim = s.hdim_v = 64;
        s.seqlen_q = seqlen_q;
        s.seqlen_k = seqlen_k;
        s.causal = mask == 1 || mask == 3;
        if (mask == 2) s.window_left = 7, s.window_right = 3;
        if (mask == 3) s.window_left = 5;
        if (mask == 4) s.window_right = 20;
        SCOPED_TRACE(s.describe());
        Workload w(s, 1, true);
        fill_with_reference(w);
        std::ostringstream log;
        const CheckResult result = check_against_reference(w, true, log);
        EXPECT_TRUE(result.passed) << log.str();
        EXPECT_LT(result.out_error, 1e-6) << log.str();
        EXPECT_LT(result.lse_error, 1e-5) << log.str();
        EXPECT_LT(result.dq_error, 1e-5) << log.str();
      }
}

TEST(ToolCheck, WrongOutputsFail) {
  Spec s;
  s.device = Device::cpu();
  s.dtype = DType::f32;
  s.batch = 1, s.heads = 1, s.kv_heads = 1, s.seqlen_q = s.seqlen_k = 32, s.hdim = s.hdim_v = 64;
  s.causal = true;
  Workload w(s, 1, true);  // with dout: fill_with_reference runs the backward too
  fill_with_reference(w);
  w.out.set(31 * 64 + 5, w.out.get(31 * 64 + 5) + 0.01f);  // last row, in the bottom block
  std::ostringstream log;
  EXPECT_FALSE(check_against_reference(w, false, log).passed) << log.str();
}

TEST(ToolFlops, Formula) {
  Spec s;
  s.batch = 2, s.heads = 3, s.seqlen_q = s.seqlen_k = 100, s.hdim = s.hdim_v = 64;
  EXPECT_DOUBLE_EQ(forward_flops(s), 4.0 * 2 * 3 * 100 * 100 * 64);
  s.causal = true;  // the pairs on and below the diagonal: 100 · 101 / 2
  EXPECT_DOUBLE_EQ(forward_flops(s), 4.0 * 2 * 3 * 5050 * 64);
  s.hdim_v = 128;  // d = (d_qk + d_v) / 2
  s.causal = false;
  EXPECT_DOUBLE_EQ(forward_flops(s), 4.0 * 2 * 3 * 100 * 100 * 96);
  EXPECT_DOUBLE_EQ(backward_flops(s), 2.5 * forward_flops(s));
}

TEST(ToolFlops, VarlenSumsItsSequences) {
  Spec s;
  s.heads = 2, s.hdim = s.hdim_v = 64, s.causal = true;
  s.varlen_q = {4, 0, 3};
  s.varlen_k = {4, 5, 6};
  s.batch = 3;
  // causal, bottom-right: 10 pairs, none, and rows seeing 4, 5, 6 keys
  EXPECT_DOUBLE_EQ(forward_flops(s), 2.0 * 2 * (10 + 0 + 15) * 128);
  EXPECT_EQ(s.start_q(2), 4);
  EXPECT_EQ(s.total_k(), 15);
}

TEST(ToolFlops, CountsThePairsInsideTheMask) {
  EXPECT_EQ(visible_pairs(4, 4, false, -1, -1), 16);
  EXPECT_EQ(visible_pairs(4, 4, true, -1, -1), 10);
  EXPECT_EQ(visible_pairs(4, 4, false, 1, 0), 7);    // 1 + 2 + 2 + 2
  EXPECT_EQ(visible_pairs(4, 4, false, 0, 1), 7);    // 2 + 2 + 2 + 1
  EXPECT_EQ(visible_pairs(2, 5, true, -1, -1), 9);   // bottom-right: rows see 4 and 5 keys
  EXPECT_EQ(visible_pairs(5, 2, true, -1, -1), 3);   // rows 0..2 see nothing
  EXPECT_EQ(visible_pairs(4, 4, true, 1, 5), 7);     // causal caps the right side at 0
  EXPECT_EQ(visible_pairs(0, 9, true, -1, -1), 0);
  // --window 128,0 at 1024: 129 keys a row but for the first 128 rows, not 1024.
  EXPECT_EQ(visible_pairs(1024, 1024, false, 128, 0), 128 * 129 / 2 + 896 * 129);
  Spec s;
  s.batch = 1, s.heads = 1, s.seqlen_q = s.seqlen_k = 1024, s.hdim = s.hdim_v = 64;
  s.window_left = 128, s.window_right = 0;
  EXPECT_DOUBLE_EQ(forward_flops(s), 2.0 * 128 * (128 * 129 / 2 + 896 * 129));
}

// --block-mask's patterns, their FLOPs, and the mask the tool builds from them: every pair's
// visibility read back from the lists and bits as the library reads them (hfa/options.def).
TEST(ToolBlockMask, PatternsAndTheirPairs) {
  const BlockMaskPattern documents = parse_block_mask("document:3,2");
  EXPECT_EQ(documents.describe(), "document:3,2");
  const int64_t firsts[] = {0, 0, 0, 3, 3, 5, 5, 5, 8, 8};  // 3, 2, 3, 2 repeated
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(documents.keys(i).first, firsts[i]) << i;
    EXPECT_EQ(documents.keys(i).last, firsts[i] + (i % 5 < 3 ? 2 : 1)) << i;
  }
  const BlockMaskPattern sliding = parse_block_mask("causal-sliding:2");
  EXPECT_EQ(sliding.keys(5).first, 3);
  EXPECT_EQ(sliding.keys(5).last, 5);
  for (const char* bad : {"document", "document:", "document:4,0", "causal-sliding:-1", "band:3"})
    EXPECT_THROW(parse_block_mask(bad), UsageError) << bad;

  // Two varlen sequences of 5 and 4 tokens under the documents' pattern over the packed tokens:
  // the second starts inside a document (token 5 of 3, 2, 3, 2, ...), causal within each.
  Spec s;
  s.heads = 1, s.hdim = s.hdim_v = 64, s.causal = true, s.batch = 2;
  s.varlen_q = s.varlen_k = {5, 4};
  s.block_mask = documents;
  EXPECT_EQ(s.mask_keys(1, 0).first, 0);  // packed token 5: its document is tokens 5..7
  EXPECT_EQ(s.mask_keys(1, 3).first, 3);  // packed token 8: tokens 8..9
  // Sequence 0: 6 + 3 pairs; sequence 1: 6 + 1 pairs.
  EXPECT_DOUBLE_EQ(forward_flops(s), 2.0 * (9 + 7) * 128);
}

TEST(ToolBlockMask, BuiltListsAndBitsSayThePattern) {
  for (const char* text : {"document:100,37,5", "causal-sliding:45"}) {
    const BlockMaskPattern pattern = parse_block_mask(text);
    const int64_t rows = 300, keys = 290;
    HostBlockMask mask;
    build_block_mask([&](int64_t i) { return pattern.keys(i); }, rows, keys, 64, 48, &mask);
    const detail::BlockSparse& v = mask.view;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < keys; ++j) {
        const int64_t m = i / v.block_q, kb = j / v.block_kv;
        bool seen = false;
        for (int32_t s = 0; s < *v.full_kv_num_blocks.at(0, 0, m); ++s)
          seen = seen || *v.full_kv_indices.at(0, 0, m, s) == kb;
        for (int32_t s = 0; s < *v.kv_num_blocks.at(0, 0, m); ++s)
          if (*v.kv_indices.at(0, 0, m, s) == kb)
            seen = detail::BlockSparse::bit(
                v.bits(0, 0, m, s) + (i % v.block_q) * v.words_per_row, j % v.block_kv);
        const KeyRange want = pattern.keys(i);
        ASSERT_EQ(seen, want.first <= j && j <= want.last) << text << " (" << i << ", " << j << ")";
      }
  }
}

}  // namespace
}  // namespace hfa::tool
