#include "block_mask.hpp"

#include <algorithm>
#include <sstream>
#include <vector>

#include "args.hpp"

namespace hfa::tool {

KeyRange BlockMaskPattern::keys(int64_t row) const {
  if (kind == Kind::causal_sliding) return {row - window, row};
  int64_t period = 0;
  for (int64_t length : lengths) period += length;
  int64_t start = row - row % period;  // of this repetition of the documents
  for (int64_t length : lengths) {
    if (row < start + length) return {start, start + length - 1};
    start += length;
  }
  return {};  // unreachable: the documents tile the period
}

std::string BlockMaskPattern::describe() const {
  if (kind == Kind::causal_sliding) return "causal-sliding:" + std::to_string(window);
  std::ostringstream text;
  text << "document";
  for (std::size_t d = 0; d < lengths.size(); ++d) text << (d == 0 ? ':' : ',') << lengths[d];
  return text.str();
}

BlockMaskPattern parse_block_mask(const std::string& text) {
  constexpr int64_t kMaxExtent = int64_t{1} << 30;
  const std::size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon), value = colon == std::string::npos
                                                              ? std::string()
                                                              : text.substr(colon + 1);
  BlockMaskPattern pattern;
  if (kind == "document" && !value.empty()) {
    pattern.kind = BlockMaskPattern::Kind::document;
    for (std::size_t begin = 0; begin <= value.size();) {
      const std::size_t comma = std::min(value.find(',', begin), value.size());
      pattern.lengths.push_back(
          parse_integer("--block-mask", value.substr(begin, comma - begin), 1, kMaxExtent));
      begin = comma + 1;
    }
  } else if (kind == "causal-sliding" && !value.empty()) {
    pattern.kind = BlockMaskPattern::Kind::causal_sliding;
    pattern.window = parse_integer("--block-mask", value, 0, kMaxExtent);
  } else {
    throw UsageError("--block-mask: expected document:L1,L2,... or causal-sliding:W, got '" +
                     text + "'");
  }
  return pattern;
}

namespace {

constexpr double kMaxBitsBytes = double{1 << 30};

// One query block's lists: key blocks every row sees whole, and those some row sees part of.
struct BlockLists {
  std::vector<int32_t> full, partial;
};

// The columns of key block kb that row i sees, clipped to the keys: [first, last] within the
// block, empty when first > last.
KeyRange columns_seen(const KeyRange& row, int64_t kb, int32_t block_kv, int64_t keys) {
  const int64_t begin = kb * block_kv, end = std::min(begin + block_kv, keys);
  return {std::max(row.first, begin) - begin, std::min(row.last, end - 1) - begin};
}

BlockLists lists_of(const std::vector<KeyRange>& rows, int32_t block_kv, int64_t keys) {
  BlockLists lists;
  int64_t first = keys, last = -1;  // the keys some row sees
  for (const KeyRange& r : rows)
    if (r.first <= r.last) first = std::min(first, r.first), last = std::max(last, r.last);
  for (int64_t kb = first / block_kv; last >= 0 && kb <= last / block_kv; ++kb) {
    const int64_t width = std::min<int64_t>(block_kv, keys - kb * block_kv);
    bool whole = true, some = false;
    for (const KeyRange& r : rows) {
      const KeyRange seen = columns_seen(r, kb, block_kv, keys);
      whole = whole && seen.first == 0 && seen.last == width - 1;
      some = some || seen.first <= seen.last;
    }
    if (whole) lists.full.push_back(static_cast<int32_t>(kb));
    else if (some) lists.partial.push_back(static_cast<int32_t>(kb));
  }
  return lists;
}

detail::BlockIndexView view_of(const HostArray& array, int64_t last_extent) {
  detail::BlockIndexView view;
  view.data = static_cast<const int32_t*>(array.data());
  view.stride[2] = last_extent;  // (1, 1, q_blocks, last): batch and heads broadcast
  view.stride[3] = 1;
  return view;
}

}  // namespace

void build_block_mask(const RowKeys& keys_of, int64_t rows, int64_t keys, int32_t block_q,
                      int32_t block_kv, HostBlockMask* mask) {
  const int64_t q_blocks = std::max<int64_t>(1, (rows + block_q - 1) / block_q);
  const int64_t words = (block_kv + 31) / 32;
  std::vector<BlockLists> blocks(static_cast<std::size_t>(q_blocks));
  std::vector<std::vector<KeyRange>> seen(static_cast<std::size_t>(q_blocks));
  int64_t slots = 1, full_slots = 1;  // extents of at least 1: an empty list is a count of 0
  for (int64_t m = 0; m < q_blocks; ++m) {
    for (int64_t i = m * block_q; i < std::min(rows, (m + 1) * block_q); ++i) {
      const KeyRange r = keys_of(i);
      seen[m].push_back({std::max<int64_t>(r.first, 0), std::min(r.last, keys - 1)});
    }
    blocks[m] = lists_of(seen[m], block_kv, keys);
    slots = std::max<int64_t>(slots, static_cast<int64_t>(blocks[m].partial.size()));
    full_slots = std::max<int64_t>(full_slots, static_cast<int64_t>(blocks[m].full.size()));
  }

  // The bits are block_q x block_kv per partial block: large blocks can ask for more than a
  // run should hold, which is refused by the flags' names before anything is allocated.
  const int64_t block_words = block_q * words;
  const double bits_bytes = 4.0 * static_cast<double>(q_blocks) * slots * block_words;
  if (bits_bytes > kMaxBitsBytes) {
    std::ostringstream message;
    message << "--block-mask: its partial blocks' bits would take " << bits_bytes * 1e-9
            << " GB; lower --sparse-block-q or --sparse-block-kv";
    throw UsageError(message.str());
  }
  mask->q_blocks = q_blocks, mask->slots = slots, mask->full_slots = full_slots;
  mask->counts = HostArray(DType::i32, q_blocks);
  mask->full_counts = HostArray(DType::i32, q_blocks);
  mask->indices = HostArray(DType::i32, q_blocks * slots);
  mask->full_indices = HostArray(DType::i32, q_blocks * full_slots);
  mask->bits = HostArray(DType::i32, q_blocks * slots * block_words);  // zeroed
  auto* counts = static_cast<int32_t*>(mask->counts.data());
  auto* full_counts = static_cast<int32_t*>(mask->full_counts.data());
  auto* indices = static_cast<int32_t*>(mask->indices.data());
  auto* full_indices = static_cast<int32_t*>(mask->full_indices.data());
  auto* bits = static_cast<uint32_t*>(mask->bits.data());
  for (int64_t m = 0; m < q_blocks; ++m) {
    const BlockLists& lists = blocks[m];
    counts[m] = static_cast<int32_t>(lists.partial.size());
    full_counts[m] = static_cast<int32_t>(lists.full.size());
    std::copy(lists.full.begin(), lists.full.end(), full_indices + m * full_slots);
    for (std::size_t s = 0; s < lists.partial.size(); ++s) {
      indices[m * slots + s] = lists.partial[s];
      uint32_t* block = bits + (m * slots + static_cast<int64_t>(s)) * block_words;
      for (std::size_t r = 0; r < seen[m].size(); ++r) {
        const KeyRange c = columns_seen(seen[m][r], lists.partial[s], block_kv, keys);
        for (int64_t col = c.first; col <= c.last; ++col)
          block[static_cast<int64_t>(r) * words + col / 32] |= 1u << (col % 32);
      }
    }
  }

  detail::BlockSparse& v = mask->view;
  v = {};
  v.kv_num_blocks = view_of(mask->counts, 1);
  v.kv_indices = view_of(mask->indices, slots);
  v.full_kv_num_blocks = view_of(mask->full_counts, 1);
  v.full_kv_indices = view_of(mask->full_indices, full_slots);
  v.kv_mask_bits = view_of(mask->bits, slots * block_words);
  v.block_q = block_q;
  v.block_kv = block_kv;
  v.words_per_row = static_cast<int32_t>(words);
  v.slots = slots;
}

}  // namespace hfa::tool
