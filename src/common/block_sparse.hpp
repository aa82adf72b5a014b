// Block-sparse attention (hfa_options' kv_num_blocks ... rows, FlexAttention's BlockMask layout)
// as the backends see it: views the API checked (api/validate_block_sparse.cpp), indexed by
// (mask batch, query head, query block, slot) with stride 0 over a broadcast dim. The mask's
// rows and keys are its own coordinates: a sequence's at fixed length, the packed tokens' with
// cu_seqlens (origin() maps one to the other).
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

namespace hfa::detail {

// An int32 tensor of rank <= 4 indexed by (b, h, m, s); a missing or broadcast dim has stride 0.
struct BlockIndexView {
  const int32_t* data = nullptr;
  int64_t stride[4] = {0, 0, 0, 0};

  HFA_HD explicit operator bool() const { return data != nullptr; }
  HFA_HD const int32_t* at(int64_t b, int64_t h, int64_t m, int64_t s = 0) const {
    return data + b * stride[0] + h * stride[1] + m * stride[2] + s * stride[3];
  }
};

struct BlockSparse {
  BlockIndexView kv_num_blocks, kv_indices;            // the partial blocks
  BlockIndexView full_kv_num_blocks, full_kv_indices;  // the full ones; null: none
  BlockIndexView kv_mask_bits;                         // (b, h, m, word): each partial block's bits
  int32_t block_q = 128;
  int32_t block_kv = 128;
  int32_t words_per_row = 4;  // ceil(block_kv / 32): int32 words of one row of a partial block
  // Varlen: one mask over the packed tokens (FlexAttention's batch of 1 holding the documents
  // end to end), its blocks counted from token 0 of q and k rather than from each sequence's.
  bool packed = false;
  // kv_indices' last extent: the partial blocks a row of blocks may hold (the sm90 backward sizes
  // its transposed bits by it). Last, so that the fields above keep their offsets in the kernels'
  // parameters.
  int64_t slots = 0;

  HFA_HD explicit operator bool() const { return static_cast<bool>(kv_num_blocks); }

  // Where row 0 and key 0 of sequence b sit in the mask: its own batch entry at (0, 0), or,
  // packed, entry 0 at the sequence's first token of q and of k (q_begin, k_begin).
  struct Origin {
    int64_t batch, row, key;
  };
  HFA_HD Origin origin(int64_t b, int64_t q_begin, int64_t k_begin) const {
    return packed ? Origin{0, q_begin, k_begin} : Origin{b, 0, 0};
  }

  // The words of row 0 of the partial block in slot s of query block m; row r starts
  // r·words_per_row words further.
  HFA_HD const int32_t* bits(int64_t b, int64_t h, int64_t m, int64_t s) const {
    return kv_mask_bits.at(b, h, m, s * block_q * words_per_row);
  }
  // Bit c of a row's words.
  HFA_HD static bool bit(const int32_t* row, int64_t c) {
    return (static_cast<uint32_t>(row[c >> 5]) >> (c & 31)) & 1u;
  }
};

}  // namespace hfa::detail
