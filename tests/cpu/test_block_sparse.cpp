// Block-sparse attention (hfa_options' kv_num_blocks ... rows, FlexAttention's BlockMask
// layout): masks of the kinds (documents, prefix-LM, sliding + global tokens, random
// block patterns with empty rows) built from a dense predicate as create_block_mask builds them,
// at fixed length and over the packed tokens of a varlen batch, through the public API against
// attention written out densely in float64 under the same predicate, and the float64 oracle
// (reference.cpp) against it too; the backward against the oracle's under the same lists.
// Outputs start as NaN; rows beyond seqused_q must stay so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/attention_case.hpp"
#include "common/host_tensor.hpp"
#include "cpu/reference.hpp"
#include "hfa/hfa.hpp"

namespace hfa {
namespace {

using test::AttentionCase;
using test::AttentionData;
using test::HostTensor;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Whether query row i of (mask batch b, query head h) may see key j (before causal), in the
// mask's coordinates: a sequence's rows and keys at fixed length, the packed tokens with varlen.
using Visible = std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)>;

// What a mask covers (hfa/options.def): each sequence at fixed length; with varlen one packed
// sequence of every token end to end (FlexAttention's batch of 1).
struct MaskShape {
  int64_t batch, rows, keys;
};

int64_t sum(const std::vector<int32_t>& lengths) {
  int64_t total = 0;
  for (int32_t n : lengths) total += n;
  return total;
}

MaskShape mask_shape(const AttentionCase& c) {
  if (c.is_varlen()) return {1, sum(c.varlen_q), sum(c.varlen_k)};
  return {c.batch, c.seqlen_q, c.seqlen_k};
}

// Sequence b as the dense attention below reads it: its first token of q and of k (the tensors
// are contiguous, token-major at fixed length too), its allocated and used lengths, and where
// its row 0 and key 0 sit in the mask.
struct Span {
  int64_t q0, k0, rows, keys, used_rows, used_keys;
  int64_t mask_batch, mask_row, mask_key;
};

Span span_of(const AttentionData& data, int64_t b) {
  const AttentionCase& c = data.spec();
  Span s{};
  if (c.is_varlen()) {
    s.q0 = data.cu_seqlens_q()[b], s.k0 = data.cu_seqlens_k()[b];
    s.rows = c.varlen_q[b], s.keys = c.varlen_k[b];
    s.mask_batch = 0, s.mask_row = s.q0, s.mask_key = s.k0;
  } else {
    s.q0 = b * c.seqlen_q, s.k0 = b * c.seqlen_k, s.rows = c.seqlen_q, s.keys = c.seqlen_k;
    s.mask_batch = b, s.mask_row = 0, s.mask_key = 0;
  }
  s.used_rows = c.seqused_q.empty() ? s.rows : c.seqused_q[b];
  s.used_keys = c.seqused_k.empty() ? s.keys : c.seqused_k[b];
  return s;
}

struct MaskSpec {
  int32_t block_q = 128, block_kv = 128;
  bool with_full = true;   // false: every listed block is partial (a BlockMask without full_*)
  bool broadcast = false;  // batch and head dims of extent 1 (the predicate read at b = h = 0)
};

// A BlockMask's tensors: per (b, h, query block) a key block whose pairs (those inside the
// sequence) are all visible is full, one with some visible is partial with its bits, one with
// none is not listed. The list slots past each count hold -1, which must never be read.
struct BlockMaskTensors {
  HostTensor num, indices, full_num, full_indices, bits;
  Tensor num_view{}, indices_view{}, full_num_view{}, full_indices_view{}, bits_view{};
  MaskSpec spec;

  BlockMaskTensors(const AttentionCase& c, const Visible& visible, MaskSpec s) : spec(s) {
    const MaskShape shape = mask_shape(c);
    const int64_t batch = s.broadcast ? 1 : shape.batch, heads = s.broadcast ? 1 : c.heads_q;
    const int64_t q_blocks = (shape.rows + s.block_q - 1) / s.block_q;
    const int64_t kv_blocks = (shape.keys + s.block_kv - 1) / s.block_kv;
    const int64_t words = (s.block_kv + 31) / 32;
    const int64_t block_words = s.block_q * words;
    num = HostTensor(DType::i32, {batch, heads, q_blocks});
    indices = HostTensor(DType::i32, {batch, heads, q_blocks, kv_blocks});
    full_num = HostTensor(DType::i32, {batch, heads, q_blocks});
    full_indices = HostTensor(DType::i32, {batch, heads, q_blocks, kv_blocks});
    bits = HostTensor(DType::i32, {batch, heads, q_blocks, kv_blocks * block_words});
    for (int64_t n = 0; n < indices.numel(); ++n) indices.set(n, -1), full_indices.set(n, -1);
    auto* words_at = static_cast<int32_t*>(bits.data());  // contiguous: no padding
    std::fill(words_at, words_at + bits.numel(), 0);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t m = 0; m < q_blocks; ++m) {
          const int64_t row = (b * heads + h) * q_blocks + m;
          int64_t partial = 0, full = 0;
          for (int64_t kb = 0; kb < kv_blocks; ++kb) {
            std::vector<uint32_t> block(static_cast<std::size_t>(block_words), 0);
            int64_t seen = 0, pairs = 0;
            for (int64_t r = 0; r < s.block_q && m * s.block_q + r < shape.rows; ++r)
              for (int64_t col = 0; col < s.block_kv && kb * s.block_kv + col < shape.keys;
                   ++col) {
                ++pairs;
                if (!visible(b, h, m * s.block_q + r, kb * s.block_kv + col)) continue;
                ++seen;
                block[r * words + col / 32] |= 1u << (col % 32);
              }
            if (seen == 0) continue;
            if (seen == pairs && s.with_full) {
              full_indices.set(row * kv_blocks + full++, static_cast<double>(kb));
              continue;
            }
            indices.set(row * kv_blocks + partial, static_cast<double>(kb));
            for (int64_t w = 0; w < block_words; ++w)
              words_at[(row * kv_blocks + partial) * block_words + w] =
                  static_cast<int32_t>(block[w]);
            ++partial;
          }
          num.set(row, static_cast<double>(partial));
          full_num.set(row, static_cast<double>(full));
        }
    num_view = num.view(), indices_view = indices.view(), full_num_view = full_num.view();
    full_indices_view = full_indices.view(), bits_view = bits.view();
  }

  Options attach(Options o) const {
    o.kv_num_blocks = &num_view;
    o.kv_indices = &indices_view;
    o.kv_mask_bits = &bits_view;
    if (spec.with_full) {
      o.full_kv_num_blocks = &full_num_view;
      o.full_kv_indices = &full_indices_view;
    }
    o.sparse_block_q = spec.block_q;
    o.sparse_block_kv = spec.block_kv;
    return o;
  }

  // Visited (query block, key block) pairs, over every (b, h).
  int64_t visited() const {
    int64_t total = 0;
    for (int64_t n = 0; n < num.numel(); ++n)
      total += static_cast<int64_t>(num.get(n)) + (spec.with_full ? int64_t(full_num.get(n)) : 0);
    return total;
  }
};

// The case's varlen offsets and used lengths as the options' int32 tensors.
struct Lengths {
  HostTensor cu_q, cu_k, used_q, used_k;
  Tensor views[4]{};

  explicit Lengths(const AttentionData& data)
      : cu_q(tensor_of(data.cu_seqlens_q())), cu_k(tensor_of(data.cu_seqlens_k())),
        used_q(tensor_of(data.spec().seqused_q)), used_k(tensor_of(data.spec().seqused_k)) {
    const HostTensor* all[] = {&cu_q, &cu_k, &used_q, &used_k};
    for (int n = 0; n < 4; ++n) views[n] = all[n]->view();
  }

  Options attach(Options o, const AttentionCase& c) const {
    if (c.is_varlen()) {
      o.cu_seqlens_q = &views[0], o.cu_seqlens_k = &views[1];
      o.max_seqlen_q = *std::max_element(c.varlen_q.begin(), c.varlen_q.end());
      o.max_seqlen_k = *std::max_element(c.varlen_k.begin(), c.varlen_k.end());
    }
    if (!c.seqused_q.empty()) o.seqused_q = &views[2];
    if (!c.seqused_k.empty()) o.seqused_k = &views[3];
    return o;
  }

 private:
  static HostTensor tensor_of(const std::vector<int32_t>& values) {
    HostTensor t(DType::i32, {static_cast<int64_t>(values.size())});
    for (std::size_t n = 0; n < values.size(); ++n) t.set(static_cast<int64_t>(n), values[n]);
    return t;
  }
};

// Dense attention in float64 under `visible` (and causal, bottom-right within each sequence's
// used lengths), from the inputs as their dtype holds them: out (token, h, d) and lse
// (b, h, i) or, varlen, (h, token). A row that sees nothing: 0, -inf; a row beyond seqused_q:
// NaN, the forward's "untouched".
struct Dense {
  std::vector<double> out, lse;
};

Dense dense_attention(const AttentionData& data, const Visible& visible) {
  const AttentionCase& c = data.spec();
  Dense r;
  r.out.assign(static_cast<std::size_t>(data.total_q()) * c.heads_q * c.hdim_v, kNaN);
  r.lse.assign(static_cast<std::size_t>(data.total_q()) * c.heads_q, kNaN);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.hdim_qk));
  const int64_t group = c.heads_q / c.heads_kv;
  auto at = [&](const HostTensor& t, int64_t token, int64_t h, int64_t d) {
    const std::vector<int64_t>& shape = t.shape();
    const int64_t heads = shape[shape.size() - 2], dim = shape.back();
    return t.get((token * heads + h) * dim + d);
  };
  for (int64_t b = 0; b < c.sequences(); ++b) {
    const Span s = span_of(data, b);
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < s.used_rows; ++i) {
        const int64_t lse_at = c.is_varlen() ? h * data.total_q() + s.q0 + i
                                             : (b * c.heads_q + h) * c.seqlen_q + i;
        double* out = r.out.data() + ((s.q0 + i) * c.heads_q + h) * c.hdim_v;
        std::fill(out, out + c.hdim_v, 0.0);
        r.lse[lse_at] = -kInf;
        std::vector<double> score(static_cast<std::size_t>(s.used_keys), -kInf);
        double max = -kInf;
        for (int64_t j = 0; j < s.used_keys; ++j) {
          if (!visible(s.mask_batch, h, s.mask_row + i, s.mask_key + j)) continue;
          if (c.causal && j > i + s.used_keys - s.used_rows) continue;
          double dot = 0;
          for (int64_t d = 0; d < c.hdim_qk; ++d)
            dot += at(data.q, s.q0 + i, h, d) * at(data.k, s.k0 + j, h / group, d);
          score[j] = dot * scale;
          max = std::max(max, score[j]);
        }
        if (max == -kInf) continue;
        double total = 0;
        for (double& x : score) total += (x = std::exp(x - max));
        r.lse[lse_at] = max + std::log(total);
        for (int64_t d = 0; d < c.hdim_v; ++d) {
          double o = 0;
          for (int64_t j = 0; j < s.used_keys; ++j)
            if (score[j] > 0) o += score[j] * at(data.v, s.k0 + j, h / group, d);
          out[d] = o / total;
        }
      }
  }
  return r;
}

// out and lse (as HostTensors, or the oracle's arrays) against the dense result: every used row
// written (NaN never passes), rows that see nothing exactly O = 0 and LSE = -inf, rows beyond
// seqused_q untouched (NaN).
template <class Out, class Lse>
void expect_matches(const Dense& want, const Out& out, const Lse& lse, double tol,
                    const std::string& what) {
  int64_t bad = 0, empty_rows = 0;
  auto expect = [&](const char* name, std::size_t n, double got, double wanted) {
    const bool ok = std::isnan(wanted) ? std::isnan(got)
                    : wanted == -kInf  ? got == -kInf
                                       : std::abs(got - wanted) <= tol;
    if (!ok && bad++ < 5)
      ADD_FAILURE() << what << ": " << name << "[" << n << "] = " << got << ", want " << wanted;
  };
  for (std::size_t n = 0; n < want.lse.size(); ++n) {
    empty_rows += want.lse[n] == -kInf;
    expect("lse", n, lse(static_cast<int64_t>(n)), want.lse[n]);
  }
  for (std::size_t n = 0; n < want.out.size(); ++n)
    expect("out", n, out(static_cast<int64_t>(n)), want.out[n]);
  EXPECT_EQ(bad, 0) << what << " (" << empty_rows << " rows see no key)";
}

struct SparseCase {
  std::string name;
  AttentionCase c;
  Visible visible;
  MaskSpec spec;
  bool expect_empty_rows = false;
};

AttentionCase base(int32_t batch, int32_t sq, int32_t sk, int32_t hq, int32_t hkv) {
  AttentionCase c;
  c.batch = batch, c.seqlen_q = sq, c.seqlen_k = sk, c.heads_q = hq, c.heads_kv = hkv;
  c.hdim_qk = c.hdim_v = 64;
  return c;
}

// Documents of the given lengths packed one after another (queries and keys alike).
Visible documents(std::vector<int64_t> lengths) {
  return [lengths](int64_t, int64_t, int64_t i, int64_t j) {
    auto doc = [&](int64_t t) {
      int64_t n = 0;
      for (; n < static_cast<int64_t>(lengths.size()) && t >= lengths[n]; ++n) t -= lengths[n];
      return n;
    };
    return doc(i) == doc(j);
  };
}

// A random pattern of blocks: none, full, or random bits (some rows with none), and query
// block 1 of every (b, h) with no key block at all.
Visible random_blocks(int64_t block_q, int64_t block_kv, uint64_t seed) {
  auto kind = [=](int64_t b, int64_t h, int64_t m, int64_t kb) {
    std::mt19937_64 rng(seed ^ (b * 1000003 + h * 10007 + m * 101 + kb));
    return m == 1 ? 0 : static_cast<int>(rng() % 4);  // 0, 1: none; 2: full; 3: partial
  };
  return [=](int64_t b, int64_t h, int64_t i, int64_t j) {
    const int k = kind(b, h, i / block_q, j / block_kv);
    if (k < 2) return false;
    if (k == 2) return true;
    if (i % 7 == 3) return false;  // rows of a partial block that see none of its keys
    std::mt19937_64 rng(seed * 31 + static_cast<uint64_t>(i * 65537 + j));
    return rng() % 2 == 0;
  };
}

std::vector<SparseCase> sparse_cases() {
  std::vector<SparseCase> cases;
  cases.push_back({"documents", base(1, 400, 400, 2, 1), documents({100, 37, 200, 63}), {}});
  {
    SparseCase s{"documents_causal_no_full", base(1, 400, 400, 2, 2),
                 documents({150, 10, 240}), {}};
    s.c.causal = true, s.spec.with_full = false;
    cases.push_back(s);
  }
  // A prefix per sequence: the batch dim of the lists is read.
  cases.push_back({"prefix_lm", base(2, 300, 300, 2, 1),
                   [](int64_t b, int64_t, int64_t i, int64_t j) {
                     return j < (b == 0 ? 150 : 40) || j <= i;
                   },
                   {}});
  // A window per head and 16 global tokens: the head dim is read; 64-key blocks.
  {
    SparseCase s{"sliding_global", base(1, 333, 333, 4, 2),
                 [](int64_t, int64_t h, int64_t i, int64_t j) {
                   return std::abs(i - j) <= 30 + 40 * h || j < 16 || i < 16;
                 },
                 {}};
    s.spec.block_kv = 64;
    cases.push_back(s);
  }
  // Broadcast over batch and heads, 64-row query blocks, more keys than queries with causal.
  {
    SparseCase s{"sliding_broadcast_causal", base(2, 200, 450, 2, 1),
                 [](int64_t, int64_t, int64_t i, int64_t j) { return j >= i + 250 - 100; }, {}};
    s.c.causal = true, s.spec.block_q = 64, s.spec.broadcast = true;
    cases.push_back(s);
  }
  {
    SparseCase s{"random_empty_rows", base(2, 390, 300, 2, 2), random_blocks(128, 128, 7), {}};
    s.expect_empty_rows = true;
    cases.push_back(s);
  }
  {
    SparseCase s{"random_256x96_bf16", base(1, 520, 500, 2, 1), random_blocks(256, 96, 9), {}};
    s.c.dtype = DType::bf16, s.spec.block_q = 256, s.spec.block_kv = 96;
    s.expect_empty_rows = true;
    cases.push_back(s);
  }
  // Used lengths: key blocks listed past seqused_k (sequence 0 uses 120 keys: its rows past 128
  // see none) and rows past seqused_q, which stay untouched.
  {
    SparseCase s{"two_halves_seqused", base(2, 300, 300, 2, 1),
                 [](int64_t, int64_t, int64_t i, int64_t j) { return (i < 128) == (j < 128); },
                 {}};
    s.c.seqused_q = {300, 170}, s.c.seqused_k = {120, 290};
    s.expect_empty_rows = true;
    cases.push_back(s);
  }
  // Varlen: one mask over the packed tokens (FlexAttention's batch of 1), its blocks straddling
  // the sequences. A document mask as FlexAttention users write it...
  {
    SparseCase s{"varlen_documents", base(1, 1, 1, 2, 1), documents({100, 37, 200, 63}), {}};
    s.c.varlen_q = s.c.varlen_k = {100, 37, 200, 63};
    cases.push_back(s);
  }
  // ... causal within each document, 64-row blocks, no full blocks, bf16, an empty document.
  {
    SparseCase s{"varlen_documents_causal_bf16", base(1, 1, 1, 4, 2),
                 documents({150, 0, 10, 240}), {}};
    s.c.varlen_q = s.c.varlen_k = {150, 0, 10, 240};
    s.c.dtype = DType::bf16, s.c.causal = true, s.spec.block_q = 64, s.spec.with_full = false;
    cases.push_back(s);
  }
  // A mask that ignores the documents (a band over the packed tokens, per head): cu_seqlens
  // still bounds each sequence (their AND); fewer queries than keys, and used lengths.
  {
    SparseCase s{"varlen_band_seqused", base(1, 1, 1, 2, 1),
                 [](int64_t, int64_t h, int64_t i, int64_t j) {
                   return std::abs(i - j) <= 40 + 30 * h || j % 97 == 0;
                 },
                 {}};
    s.c.varlen_q = {150, 0, 90, 70}, s.c.varlen_k = {200, 20, 130, 70};
    s.c.seqused_q = {120, 0, 90, 64}, s.c.seqused_k = {200, 5, 100, 70};
    s.spec.block_kv = 64;
    cases.push_back(s);
  }
  {
    SparseCase s{"varlen_random_empty_rows", base(1, 1, 1, 2, 2), random_blocks(128, 128, 11),
                 {}};
    s.c.varlen_q = {200, 190}, s.c.varlen_k = {150, 230};
    s.expect_empty_rows = true;
    cases.push_back(s);
  }
  return cases;
}

void PrintTo(const SparseCase& s, std::ostream* os) { *os << s.name; }

class BlockSparse : public ::testing::TestWithParam<SparseCase> {};

TEST_P(BlockSparse, ForwardAndBackwardMatchDenseMaskedAttention) {
  const SparseCase& s = GetParam();
  AttentionData data(s.c);
  const Visible& visible = s.visible;
  // The predicate the tensors were built from (broadcast: read at b = h = 0).
  const Visible as_built = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return s.spec.broadcast ? visible(0, 0, i, j) : visible(b, h, i, j);
  };
  const BlockMaskTensors mask(s.c, as_built, s.spec);
  const Dense want = dense_attention(data, as_built);
  if (s.expect_empty_rows) {
    bool some = false;
    for (double l : want.lse) some = some || l == -kInf;
    ASSERT_TRUE(some) << "the case was meant to have rows that see no key";
  }

  const Lengths lengths(data);
  Options options;
  options.causal = s.c.causal;
  options = mask.attach(lengths.attach(options, s.c));
  const Tensor q = data.q.view(), k = data.k.view(), v = data.v.view(), out = data.out.view();
  const Tensor lse = data.lse.view();
  const Status status = forward(q, k, v, out, &lse, options);
  ASSERT_TRUE(status.is_ok()) << status.message();
  const double tol = s.c.dtype == DType::f32 ? 2e-5 : 2e-2;
  expect_matches(want, [&](int64_t n) { return data.out.get(n); },
                 [&](int64_t n) { return data.lse.get(n); }, tol, "tiled forward");

  // The oracle under the same lists, from the problem the API builds.
  detail::ForwardProblem p = data.forward_problem();
  p.block_sparse.block_q = s.spec.block_q;
  p.block_sparse.block_kv = s.spec.block_kv;
  p.block_sparse.words_per_row = (s.spec.block_kv + 31) / 32;
  p.block_sparse.packed = s.c.is_varlen();
  auto view_of = [](const HostTensor& t) {
    detail::BlockIndexView view;
    view.data = static_cast<const int32_t*>(t.data());
    for (std::size_t d = 0; d < t.shape().size(); ++d)
      view.stride[d] = t.shape()[d] == 1 ? 0 : t.stride(d);
    return view;
  };
  p.block_sparse.kv_num_blocks = view_of(mask.num);
  p.block_sparse.kv_indices = view_of(mask.indices);
  p.block_sparse.kv_mask_bits = view_of(mask.bits);
  if (s.spec.with_full) {
    p.block_sparse.full_kv_num_blocks = view_of(mask.full_num);
    p.block_sparse.full_kv_indices = view_of(mask.full_indices);
  }
  std::vector<double> ref_out(want.out.size(), kNaN), ref_lse(want.lse.size(), kNaN);
  cpu::reference_forward(p, ref_out.data(), ref_lse.data());
  const double ref_tol = s.c.dtype == DType::f32 ? 1e-10 : 1e-9;
  expect_matches(want, [&](int64_t n) { return ref_out[n]; },
                 [&](int64_t n) { return ref_lse[n]; }, ref_tol, "float64 oracle");

  // The backward (the forward's out and lse) against the oracle's gradients under the same
  // lists; dq, dk, dv start as NaN.
  const Tensor dq = data.dq.view(), dk = data.dk.view(), dv = data.dv.view();
  const Tensor dout = data.dout.view();
  const Status back = backward(dout, q, k, v, out, lse, dq, dk, dv, options);
  ASSERT_TRUE(back.is_ok()) << back.message();
  detail::BackwardProblem bp = data.backward_problem();
  bp.fwd.block_sparse = p.block_sparse;
  std::vector<double> ref_dq(data.dq.numel()), ref_dk(data.dk.numel()), ref_dv(data.dv.numel());
  cpu::reference_backward(bp, ref_dq.data(), ref_dk.data(), ref_dv.data(), nullptr);
  const double grad_tol = s.c.dtype == DType::f32 ? 1e-4 : 6e-2;
  const std::pair<const HostTensor*, const std::vector<double>*> grads[] = {
      {&data.dq, &ref_dq}, {&data.dk, &ref_dk}, {&data.dv, &ref_dv}};
  int64_t bad = 0;
  for (const auto& [got, want_grad] : grads)
    for (int64_t n = 0; n < got->numel(); ++n)
      if (!(std::abs(got->get(n) - (*want_grad)[n]) <= grad_tol) && bad++ < 5)
        ADD_FAILURE() << "gradient element " << n << ": " << got->get(n) << ", want "
                      << (*want_grad)[n];
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Masks, BlockSparse, ::testing::ValuesIn(sparse_cases()),
                         [](const auto& info) { return info.param.name; });

// Every bad input is refused naming the caller's argument, with out and lse left as they were.
TEST(BlockSparseArgs, RejectsByNameAndWritesNothing) {
  const AttentionCase c = base(2, 200, 300, 2, 1);
  AttentionData data(c);
  const BlockMaskTensors good(c, documents({120, 180}), {});
  const Tensor q = data.q.view(), k = data.k.view(), v = data.v.view(), out = data.out.view();
  const Tensor lse = data.lse.view();
  const std::vector<double> out_before = data.out.values(), lse_before = data.lse.values();

  HostTensor f32_num(DType::f32, {2, 2, 2});
  const Tensor f32_view = f32_num.view();
  HostTensor short_num(DType::i32, {2, 2, 1});  // 200 rows need 2 query blocks
  const Tensor short_view = short_num.view();
  HostTensor three_heads(DType::i32, {2, 3, 2});
  const Tensor three_view = three_heads.view();
  // Values out of range, written into copies of the good lists.
  BlockMaskTensors bad_index(c, documents({120, 180}), {});
  bad_index.indices.set(0, 3);  // 300 keys are 3 blocks: index 3 is past them
  BlockMaskTensors bad_count(c, documents({120, 180}), {});
  bad_count.num.set(1, 4);  // 3 slots
  BlockMaskTensors twice(c, documents({120, 180}), {});
  // Query block 0 of (0, 0): documents 0 and 1 -> key block 0 is partial; list it full too.
  twice.full_num.set(0, 1), twice.full_indices.set(0, twice.indices.get(0));

  struct Bad {
    std::function<void(Options&)> change;
    const char* argument;
    Code code;
  };
  const Bad bad[] = {
      {[&](Options& o) { o.kv_num_blocks = &f32_view; }, "kv_num_blocks", Code::invalid_argument},
      {[&](Options& o) { o.kv_num_blocks = &short_view; }, "kv_num_blocks",
       Code::invalid_argument},
      {[&](Options& o) { o.kv_num_blocks = &three_view; }, "kv_num_blocks",
       Code::invalid_argument},
      {[&](Options& o) { o.kv_indices = nullptr; }, "kv_indices", Code::invalid_argument},
      {[&](Options& o) { o.kv_mask_bits = nullptr; }, "kv_mask_bits", Code::invalid_argument},
      {[&](Options& o) { o.kv_mask_bits = &good.num_view; }, "kv_mask_bits",
       Code::invalid_argument},
      {[&](Options& o) { o.full_kv_indices = nullptr; }, "full_kv_indices",
       Code::invalid_argument},
      {[&](Options& o) { o.kv_num_blocks = nullptr; }, "kv_indices", Code::invalid_argument},
      {[&](Options& o) { o = bad_index.attach(Options{}); }, "kv_indices",
       Code::invalid_argument},
      {[&](Options& o) { o = bad_count.attach(Options{}); }, "kv_num_blocks",
       Code::invalid_argument},
      {[&](Options& o) { o = twice.attach(Options{}); }, "full_kv_indices",
       Code::invalid_argument},
      {[&](Options& o) { o.sparse_block_kv = 0; }, "sparse_block_kv", Code::invalid_argument},
      // 64-row blocks: 200 rows need 4 query blocks, the lists have 2.
      {[&](Options& o) { o.sparse_block_q = 64; }, "kv_num_blocks", Code::invalid_argument},
  };
  for (const Bad& b : bad) {
    Options options = good.attach(Options{});
    b.change(options);
    const Status status = forward(q, k, v, out, &lse, options);
    EXPECT_EQ(status.code(), b.code) << b.argument << ": " << status.message();
    EXPECT_EQ(status.message().rfind(std::string(b.argument) + ":", 0), 0u)
        << "want the message to start with " << b.argument << ", got " << status.message();
  }
  // sparse_block_q = 100 with lists shaped for it: the CPU takes whole 64-row tiles only.
  const BlockMaskTensors odd(c, documents({120, 180}), {100, 128, true, false});
  Status status = forward(q, k, v, out, &lse, odd.attach(Options{}));
  EXPECT_EQ(status.code(), Code::not_supported) << status.message();
  EXPECT_NE(status.message().find("sparse_block_q"), std::string::npos) << status.message();
  const auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t n = 0; n < a.size(); ++n)
      if (!(std::isnan(a[n]) && std::isnan(b[n])) && a[n] != b[n]) return false;
    return true;
  };
  EXPECT_TRUE(same(data.out.values(), out_before)) << "a refused call wrote out";
  EXPECT_TRUE(same(data.lse.values(), lse_before)) << "a refused call wrote lse";
}

// With cu_seqlens the mask is the packed tokens' (a batch of 1, blocks of total_q rows and
// total_k keys): a mask per sequence, or one as long as the longest sequence, is refused by name.
TEST(BlockSparseArgs, VarlenTakesOneMaskOverThePackedTokens) {
  AttentionCase c = base(1, 1, 1, 2, 1);
  c.varlen_q = {120, 180}, c.varlen_k = {150, 250};  // 300 rows, 400 keys: 3 x 4 blocks
  AttentionData data(c);
  const Lengths lengths(data);
  const Visible everything = [](int64_t, int64_t, int64_t, int64_t) { return true; };
  const BlockMaskTensors per_sequence(base(2, 180, 250, 2, 1), everything, {});
  const BlockMaskTensors longest(base(1, 180, 250, 2, 1), everything, {});
  BlockMaskTensors bad_index(c, everything, {});
  bad_index.full_indices.set(0, 4);
  struct Bad {
    const BlockMaskTensors& mask;
    const char* argument;
    const char* words;
  } bad[] = {
      {per_sequence, "kv_num_blocks", "dim 0 must be 1 with cu_seqlens"},
      {longest, "kv_num_blocks", "ceil(total_q / sparse_block_q) = 3"},
      {bad_index, "full_kv_indices", "ceil(total_k / sparse_block_kv)"},
  };
  const Tensor q = data.q.view(), k = data.k.view(), v = data.v.view(), out = data.out.view();
  const Tensor lse = data.lse.view();
  for (const Bad& b : bad) {
    const Status status = forward(q, k, v, out, &lse, b.mask.attach(lengths.attach({}, c)));
    EXPECT_EQ(status.code(), Code::invalid_argument) << status.message();
    EXPECT_EQ(status.message().rfind(std::string(b.argument) + ":", 0), 0u) << status.message();
    EXPECT_NE(status.message().find(b.words), std::string::npos) << status.message();
  }
  for (int64_t n = 0; n < data.out.numel(); ++n)
    ASSERT_TRUE(std::isnan(data.out.get(n))) << "a refused call wrote out";
}

}  // namespace
}  // namespace hfa
