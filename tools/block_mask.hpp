// `hfa run --block-mask`: a block-sparse mask (hfa_options' kv_num_blocks ... rows, FlexAttention's
// BlockMask layout) built by the tool from a pattern, as create_block_mask builds one from a
// mask_mod. The mask covers each sequence (fixed length, one mask broadcast over the batch and
// the heads) or the packed tokens (varlen), the library's two layouts (hfa/options.def).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/block_sparse.hpp"
#include "memory.hpp"

namespace hfa::tool {

// The keys [first, last] a row sees; empty when first > last.
struct KeyRange {
  int64_t first = 0, last = -1;
};
using RowKeys = std::function<KeyRange(int64_t row)>;

// A pattern whose rows each see one run of keys, in the mask's coordinates:
//   document:L1,L2,...  documents of these lengths one after another, repeated to fill the
//                       sequence (so any length takes it): a row sees its own document's keys
//   causal-sliding:W    row i sees keys [i - W, i] (FlexAttention's sliding window, top-left
//                       aligned as a mask_mod's q_idx >= kv_idx is)
struct BlockMaskPattern {
  enum class Kind { none, document, causal_sliding } kind = Kind::none;
  std::vector<int64_t> lengths;  // document
  int64_t window = 0;            // causal-sliding

  explicit operator bool() const { return kind != Kind::none; }
  KeyRange keys(int64_t row) const;
  std::string describe() const;
};

// --block-mask's value; a UsageError naming the flag otherwise.
BlockMaskPattern parse_block_mask(const std::string& text);

// A mask's tensors on the host, shaped (1, 1, q_blocks, ...) for one (batch, head) broadcast
// to all, with the views the float64 reference reads.
struct HostBlockMask {
  int64_t q_blocks = 0, slots = 1, full_slots = 1;
  HostArray counts, indices, full_counts, full_indices, bits;
  detail::BlockSparse view;  // over the arrays above (the object must stay where it is)

  HostBlockMask() = default;
  HostBlockMask(const HostBlockMask&) = delete;
};

// The mask of `rows` x `keys` whose row i sees keys_of(i), in blocks of block_q x block_kv: a
// key block every row of a query block sees whole is full, one some row sees part of is partial
// (with its bits), the others unlisted.
void build_block_mask(const RowKeys& keys_of, int64_t rows, int64_t keys, int32_t block_q,
                      int32_t block_kv, HostBlockMask* mask);

}  // namespace hfa::tool
