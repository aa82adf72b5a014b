// The block of a block-sparse mask that the sm90 kernels are compiled for, host and device: the
// backend refuses other sparse_block_q / sparse_block_kv, the kernels' tiles are this block (or,
// in the backward at hdim 128, a whole number of tiles of it). And the backward's view of a mask
// transposed, which its preprocess writes into the workspace (bwd/sparse_preprocess.cuh).
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

namespace hfa::sm90 {

// FlexAttention's default BlockMask block, 128 queries × 128 keys.
inline constexpr int kSparseBlock = 128;
// int32 words of one row of a partial block's bits.
inline constexpr int kSparseWordsPerRow = kSparseBlock / 32;
// int32 words of a partial block's bits.
inline constexpr int kSparseBlockWords = kSparseBlock * kSparseWordsPerRow;

// The counts of one key block's query list: its entries (the backward's steps), the full ones
// first.
struct QueryListCounts {
  int32_t full;
  int32_t steps;
};

// A block-sparse mask as the backward walks it: per key block, the query blocks that see it
// (FlexAttention's q_num_blocks / q_indices and full_q_*), which hfa's options do not carry (its
// rows are the forward's kv lists), built on the device from the forward's lists, in the units
// the backward steps in: query tiles of its kBlockM rows (a mask block's 128 rows are one tile
// or two), the last block's tiles past seqlen_q left out. `lists` lists of lists, one per (mask
// batch, mask head): a dim the five tensors all broadcast is one list (batch_stride or
// head_stride 0). Within a list, per key block kb (a query block is full or partial for it,
// never both, so q_tiles entries hold both kinds):
//   counts[kb]                      QueryListCounts
//   queries[kb · q_tiles + i]       its query tiles in walk order, i < steps: those of full
//                                   blocks (i < full), then those of partial ones, each ascending
//   partial_bits[kb · q_tiles + i]  for a partial entry i, its bit block: m · slots + s for the
//                                   forward's slot s of mask query block m
// and the bits of every partial block of the forward's lists, transposed, at the forward's
// (query block, slot): bits[(m · slots + s) · kSparseBlockWords ...], a block's 128 rows being
// its keys and bit r of a row (word r / 32, least significant first) its query r, so that a
// score tile with keys as rows masks by the same fragment rule as the forward's (block_sparse.cuh).
// pairs: the preprocess's scratch, one int32 per (key block, mask query block).
struct QueryBlockLists {
  int32_t* pairs;
  QueryListCounts* counts;
  int32_t* queries;
  int32_t* partial_bits;
  int32_t* bits;
  int64_t batch_stride;  // lists per mask batch: the mask's heads, or 0 (one batch for all)
  int64_t head_stride;   // 1, or 0 (one head for all)
  int32_t q_blocks;      // of the sequence: ceil(seqlen_q / kSparseBlock)
  int32_t k_blocks;      // ceil(seqlen_k / kSparseBlock)
  int32_t q_tiles;       // ceil(seqlen_q / the backward's kBlockM): entries of a key block's list
  int32_t slots;         // the forward's partial slots (kv_indices' last extent)

  HFA_HD int64_t list(int64_t batch, int64_t head) const {
    return batch * batch_stride + head * head_stride;
  }
  // Entry (list, key block) of counts; of queries and partial_bits times q_tiles.
  HFA_HD int64_t key_entry(int64_t batch, int64_t head, int key_block) const {
    return list(batch, head) * k_blocks + key_block;
  }
  // The transposed bits of bit block m · slots + s of a list: its row 0.
  HFA_HD int64_t bits_block(int64_t batch, int64_t head, int64_t block) const {
    return (list(batch, head) * q_blocks * int64_t{slots} + block) * kSparseBlockWords;
  }
};

}  // namespace hfa::sm90
