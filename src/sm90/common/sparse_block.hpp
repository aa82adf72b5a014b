// The block of a block-sparse mask that the sm90 kernels are compiled for, host and device: the
// backend refuses other sparse_block_q / sparse_block_kv, the kernels' tiles are this block.
#pragma once

namespace hfa::sm90 {

// FlexAttention's default BlockMask block, 128 queries × 128 keys.
inline constexpr int kSparseBlock = 128;
// int32 words of one row of a partial block's bits.
inline constexpr int kSparseWordsPerRow = kSparseBlock / 32;

}  // namespace hfa::sm90
