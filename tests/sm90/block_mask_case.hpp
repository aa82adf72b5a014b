// Block masks for the sm90 block-sparse tests (forward and backward): FlexAttention's BlockMask
// layout built from a predicate over (sequence, head, query, key) as create_block_mask builds
// one, the predicates the tests share, and the mask's device copy.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "common/attention_case.hpp"
#include "common/block_sparse.hpp"
#include "common/expected.hpp"
#include "sm90/gpu_test_support.hpp"

namespace hfa::test {

// Whether query i of (sequence b, query head h) may see key j by the mask, in the sequence's
// coordinates (a window, when the case has one, is ANDed on top).
using MaskPredicate = std::function<bool(int b, int h, int i, int j)>;

// A block mask in FlexAttention's layout, 128 × 128 blocks, built from a predicate as
// create_block_mask builds one: per (sequence, head, query block), a key block whose pairs inside
// the sequence are all visible is full, one with some visible is partial with its bits, one with
// none is not listed. Unused list slots hold −1 (never to be read). heads = 1: one mask for every
// query head (a stride-0 dim). with_full = false lists every block as partial.
struct BlockMask {
  static constexpr int kBlock = 128, kWords = kBlock / 32, kBlockWords = kBlock * kWords;
  int batch, heads, q_blocks, kv_blocks;
  // partial counts, partial lists, full counts, full lists, bits: the API's five tensors.
  std::vector<int32_t> tensors[5];

  BlockMask(const AttentionCase& c, int mask_heads, bool with_full, const MaskPredicate& visible)
      : batch(c.batch), heads(mask_heads), q_blocks((c.seqlen_q + kBlock - 1) / kBlock),
        kv_blocks((c.seqlen_k + kBlock - 1) / kBlock) {
    const int64_t rows = int64_t{batch} * heads * q_blocks;
    tensors[0].assign(rows, 0), tensors[2].assign(rows, 0);
    tensors[1].assign(rows * kv_blocks, -1), tensors[3].assign(rows * kv_blocks, -1);
    tensors[4].assign(rows * kv_blocks * kBlockWords, 0);
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int m = 0; m < q_blocks; ++m) {
          const int64_t row = (int64_t{b} * heads + h) * q_blocks + m;
          for (int n = 0; n < kv_blocks; ++n) {
            std::vector<uint32_t> words(kBlockWords, 0u);
            int seen = 0, pairs = 0;
            for (int r = 0; r < kBlock && m * kBlock + r < c.seqlen_q; ++r)
              for (int col = 0; col < kBlock && n * kBlock + col < c.seqlen_k; ++col) {
                ++pairs;
                if (!visible(b, h, m * kBlock + r, n * kBlock + col)) continue;
                ++seen;
                words[r * kWords + col / 32] |= 1u << (col % 32);
              }
            if (seen == 0) continue;
            if (seen == pairs && with_full) {
              tensors[3][row * kv_blocks + tensors[2][row]++] = n;
              continue;
            }
            const int64_t slot = row * kv_blocks + tensors[0][row]++;
            tensors[1][slot] = n;
            for (int w = 0; w < kBlockWords; ++w)
              tensors[4][slot * kBlockWords + w] = static_cast<int32_t>(words[w]);
          }
        }
    if (!with_full) tensors[2].clear(), tensors[3].clear();
  }

  // The backend's view of the five tensors at `data` (the host vectors or their device copies).
  detail::BlockSparse view(const int32_t* const (&data)[5]) const {
    auto of = [&](int t, int64_t last) {
      detail::BlockIndexView v;
      v.data = data[t];
      if (v.data == nullptr) return v;
      const int64_t extents[4] = {batch, heads, q_blocks, last};
      int64_t stride = 1;
      for (int d = (last > 0 ? 3 : 2); d >= 0; --d) {
        v.stride[d] = extents[d] == 1 ? 0 : stride;
        stride *= extents[d];
      }
      return v;
    };
    detail::BlockSparse s;
    s.kv_num_blocks = of(0, 0), s.kv_indices = of(1, kv_blocks);
    s.full_kv_num_blocks = of(2, 0), s.full_kv_indices = of(3, kv_blocks);
    s.kv_mask_bits = of(4, int64_t{kv_blocks} * kBlockWords);
    s.block_q = s.block_kv = kBlock;
    s.words_per_row = kWords;
    s.slots = kv_blocks;
    return s;
  }
  detail::BlockSparse host_view() const {
    const int32_t* data[5];
    for (int t = 0; t < 5; ++t) data[t] = tensors[t].empty() ? nullptr : tensors[t].data();
    return view(data);
  }
};

// A deterministic hash of a few ints to [0, 1): the random patterns below.
inline double unit_hash(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ b * 0xC2B2AE3D27D4EB4Full ^ c * 0x165667B19E3779F9ull ^
               d * 0xD6E8FEB86659FD93ull;
  x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29, x *= 0x94D049BB133111EBull;
  x ^= x >> 32;
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

// Random block kinds per (b, h, query block, key block): none, all visible, half of the pairs,
// a tenth of them; query block 1 of (0, 0) sees no key (its rows: O = 0, LSE = −inf), and so do
// the rows i ≡ 7 (mod 41), inside blocks that other rows see (empty rows of partial blocks).
inline bool random_blocks(int b, int h, int i, int j) {
  if (i % 41 == 7 || (b == 0 && h == 0 && i / 128 == 1)) return false;
  const double kind = unit_hash(b, h, i / 128, j / 128);
  const double pair = unit_hash(b + 100, h, i, j);
  if (kind < 0.3) return false;
  if (kind < 0.55) return true;
  return pair < (kind < 0.8 ? 0.5 : 0.1);
}

// Documents end to end in each sequence (the packed batches of FlexAttention's document masks):
// a key of the same document, at or before the query when causal.
inline MaskPredicate documents(std::vector<int> starts, bool causal) {
  return [starts, causal](int, int, int i, int j) {
    auto document = [&](int t) {
      int d = 0;
      while (d + 1 < static_cast<int>(starts.size()) && starts[d + 1] <= t) ++d;
      return d;
    };
    return document(i) == document(j) && (!causal || j <= i);
  };
}

// The five tensors of a BlockMask in device memory, and the backend's view of them.
class DeviceBlockMask {
 public:
  explicit DeviceBlockMask(const BlockMask& mask)
      : mask_(mask), copies_{DeviceCopy(mask.tensors[0]), DeviceCopy(mask.tensors[1]),
                             DeviceCopy(mask.tensors[2]), DeviceCopy(mask.tensors[3]),
                             DeviceCopy(mask.tensors[4])} {}

  void check_copies() const {
    for (const DeviceCopy& copy : copies_) HFA_CUDA_OK(copy.status());
  }
  detail::BlockSparse view() const {
    const int32_t* data[5];
    for (int t = 0; t < 5; ++t) data[t] = copies_[t].get<int32_t>();
    return mask_.view(data);
  }

 private:
  const BlockMask& mask_;
  DeviceCopy copies_[5];
};

// The float64 oracle's forward of a case under a mask's lists, P rounded to the inputs' dtype as
// the GPU rounds it.
inline ForwardExpectation expected_masked_forward(AttentionData& data, const BlockMask& mask) {
  detail::ForwardProblem problem = data.forward_problem();
  problem.block_sparse = mask.host_view();
  return expected_forward(data, problem, cpu::ProbabilityRounding::input_dtype);
}

}  // namespace hfa::test
