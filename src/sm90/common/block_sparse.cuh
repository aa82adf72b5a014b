// Block-sparse attention on the GPU (FlexAttention's BlockMask layout, common/block_sparse.hpp):
// the one walk over a query block's listed key blocks that the forward's producer (which K/V
// blocks to load, in which order) and its consumers (which blocks to mask, with which bits) both
// take; its transpose, the walk over a key block's listed query blocks that the backward takes
// (lists its preprocess builds, sparse_block.hpp's QueryBlockLists); and the bits of a partial
// block ANDed into an accumulator fragment, whichever side is its rows.
//
// The kernels that read a mask have tiles of exactly the mask's blocks (kSparseBlock, 128 × 128:
// the backend refuses other block sizes), so a tile is one query block and a K/V block one key
// block; the backward's hdim-128 tile takes a query block in two halves of 64 rows.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/block_sparse.hpp"
#include "sm90/common/sparse_block.hpp"
#include "sm90/ptx/fragment.cuh"

namespace hfa::sm90 {

// The key blocks one query block visits, by walk position: positions [0, full) are its full
// blocks, [full, end) its partial ones. The kernels walk positions from end − 1 down to begin,
// as they walk a dense BlockRange's blocks, so the partial blocks (which need masking) come
// first, as the masked blocks on a diagonal or at the seqlen_k tail do in a dense walk.
struct SparseKeyBlocks {
  int begin;
  int end;
  int full;
  const int32_t* full_list;     // full block of position s at full_list[s · full_step]
  const int32_t* partial_list;  // partial block of position full + s at partial_list[s · step]
  const int32_t* partial_bits;  // its bits at partial_bits + s · bits_step, row-major
  int64_t full_step;
  int64_t partial_step;
  int64_t bits_step;

  __device__ __forceinline__ int count() const { return end - begin; }
  __device__ __forceinline__ bool is_partial(int position) const { return position >= full; }
  // The key block (of kSparseBlock keys) at a walk position.
  __device__ __forceinline__ int key_block(int position) const {
    return is_partial(position) ? partial_list[(position - full) * partial_step]
                                : full_list[position * full_step];
  }
  // Row `row` (within the block) of the bits of the partial block at `position`.
  __device__ __forceinline__ const int32_t* bits_row(int position, int row) const {
    return partial_bits + (position - full) * bits_step + row * kSparseWordsPerRow;
  }
};

// The walk of query block `query_block` of sequence `batch`, query head `head`. The mask's
// coordinates are the sequence's (fixed length: the backend refuses a packed, varlen mask, whose
// blocks need not start at a sequence's first token).
__device__ __forceinline__ SparseKeyBlocks sparse_key_blocks(const detail::BlockSparse& mask,
                                                             int batch, int head,
                                                             int query_block) {
  const detail::BlockSparse::Origin origin = mask.origin(batch, 0, 0);
  SparseKeyBlocks walk;
  walk.begin = 0;
  walk.full = 0;
  walk.full_list = nullptr;
  walk.full_step = 0;
  if (mask.full_kv_num_blocks) {
    walk.full = *mask.full_kv_num_blocks.at(origin.batch, head, query_block);
    walk.full_list = mask.full_kv_indices.at(origin.batch, head, query_block);
    walk.full_step = mask.full_kv_indices.stride[3];
  }
  walk.end = walk.full + *mask.kv_num_blocks.at(origin.batch, head, query_block);
  walk.partial_list = mask.kv_indices.at(origin.batch, head, query_block);
  walk.partial_step = mask.kv_indices.stride[3];
  walk.partial_bits = mask.bits(origin.batch, head, query_block, 0);
  walk.bits_step = mask.kv_mask_bits.stride[3] * (kSparseBlock * kSparseWordsPerRow);
  return walk;
}

// The query tiles that see one key block, the backward's walk (QueryBlockLists, written by
// bwd/sparse_preprocess.cuh): positions [0, full) are tiles of its full mask blocks, [full, end)
// of its partial ones, each part ascending. The bits of a partial block are transposed: a row
// per key.
struct SparseQueryBlocks {
  int full;
  int end;
  const int32_t* queries;     // the query tile of position s at queries[s]
  const int32_t* bit_blocks;  // a partial one's bits at bits + bit_blocks[s] · kSparseBlockWords
  const int32_t* bits;

  __device__ __forceinline__ int count() const { return end; }
  __device__ __forceinline__ bool is_partial(int position) const { return position >= full; }
  // The query tile (of the backward's kBlockM rows) at a walk position.
  __device__ __forceinline__ int query_tile(int position) const { return queries[position]; }
  // Row `key` (within the block) of the transposed bits of the partial block at `position`.
  __device__ __forceinline__ const int32_t* bits_row(int position, int key) const {
    return bits + int64_t{bit_blocks[position]} * kSparseBlockWords + key * kSparseWordsPerRow;
  }
};

// The walk of key block `key_block` of sequence `batch` under query head `head`'s mask.
__device__ __forceinline__ SparseQueryBlocks sparse_query_blocks(const QueryBlockLists& lists,
                                                                 int batch, int head,
                                                                 int key_block) {
  const int64_t entry = lists.key_entry(batch, head, key_block);
  const int64_t first = entry * lists.q_tiles;
  const QueryListCounts counts = lists.counts[entry];
  SparseQueryBlocks walk;
  walk.full = counts.full;
  walk.end = counts.steps;
  walk.queries = lists.queries + first;
  walk.bit_blocks = lists.partial_bits + first;
  walk.bits = lists.bits + lists.bits_block(batch, head, 0);
  return walk;
}

// The bits of a thread's two rows of an accumulator fragment (ptx/fragment.cuh) in one partial
// block, kWords words of each row (the fragment's columns: 32 a word), each row's words shifted
// right by the thread's column_pair: then the bit of register i sits at a compile-time place,
// fragment_column(i, 0) % 32 of word fragment_column(i, 0) / 32. All set (nothing masked)
// unless loaded. The forward's fragments span a block's 128 keys (4 words); the backward's its
// 128 or 64 queries.
template <int kWords = kSparseWordsPerRow>
struct FragmentBits {
  uint32_t word[2][kWords];
};

template <int kWords = kSparseWordsPerRow>
__device__ __forceinline__ FragmentBits<kWords> all_visible_bits() {
  FragmentBits<kWords> bits;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int w = 0; w < kWords; ++w) bits.word[half][w] = ~0u;
  }
  return bits;
}

// rows[half]: the first of the words of the thread's row half (row0, row0 + 8) in the block
// that the fragment's columns cover.
template <int kWords = kSparseWordsPerRow>
__device__ __forceinline__ FragmentBits<kWords> load_fragment_bits(
    const int32_t* const (&rows)[2], int column_pair) {
  FragmentBits<kWords> bits;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      bits.word[half][w] = static_cast<uint32_t>(__ldg(rows[half] + w)) >> column_pair;
    }
  }
  return bits;
}

// Scores whose bit is clear become −inf (exp2 turns them into exact 0), the others stay: the
// AND of the block's bits into whatever mask s already carries. kAcc: a 64-row fragment's of
// 32 · kWords columns.
template <int kAcc, int kWords>
__device__ __forceinline__ void mask_clear_bits(float (&s)[kAcc], const FragmentBits<kWords>& bits) {
  static_assert(kAcc == kWords * 32 / 2, "one fragment of the words' columns");
#pragma unroll
  for (int i = 0; i < kAcc; ++i) {
    const int column = ptx::fragment_column(i, 0);
    const uint32_t word = bits.word[ptx::fragment_row_half(i)][column / 32];
    if (((word >> (column % 32)) & 1u) == 0) s[i] = -INFINITY;
  }
}

}  // namespace hfa::sm90
