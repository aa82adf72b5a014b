// The block-sparse backward's preprocess: the forward's lists (per query block, the key blocks it
// sees) transposed into the lists the backward walks (per key block, the query blocks that see
// it: sparse_block.hpp's QueryBlockLists, in the workspace), on the problem's stream, so that the
// call stays graph-capturable and the API keeps taking the forward's lists alone (FlexAttention's
// BlockMask carries both; hfa's options carry the kv side). Three launches:
//   the pairs cleared (cudaMemsetAsync);
//   scatter: per (list, query block), each listed key block marks its pair, full or the forward's
//     slot, and each partial block's bits are transposed (a row per key) beside the lists;
//   compact: per (list, key block), its pairs walked in query order into its list of the main
//     kernel's query tiles (kBlockM rows), those of full blocks first, then those of partial
//     ones, each ascending, with their counts.
// A GPU call's lists are trusted, not validated (hfa/options.def), but a key block outside
// [0, k_blocks) is skipped and a count past the slots cut to them, rather than written out of
// the workspace.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/errors.hpp"
#include "sm90/bwd/params.hpp"
#include "sm90/bwd/workspace.hpp"
#include "sm90/common/launch.hpp"
#include "sm90/common/sparse_block.hpp"

namespace hfa::sm90::bwd {

// A pair's mark in QueryBlockLists::pairs: none (the memset's 0), a full block, or slot s of the
// forward's partial list as s + 1 (> 0).
inline constexpr int32_t kNoPair = 0;
inline constexpr int32_t kFullPair = -1;

inline constexpr int kScatterThreads = 128;  // a warp per partial block's bits at a time
inline constexpr int kCompactThreads = 32;   // a warp per key block: ballots give each entry its place

// One warp: the bits of a partial block at `in` (row r: query r, bit c: key c) into `out`
// transposed (row c: key c, bit r: query r). Lane l holds query row 32·w + l's words; a ballot
// over bit c of them is word w of key row c.
__device__ __forceinline__ void transpose_block_bits(const int32_t* in, int32_t* out, int lane) {
#pragma unroll 1
  for (int w = 0; w < kSparseWordsPerRow; ++w) {
    uint32_t row[kSparseWordsPerRow];
#pragma unroll
    for (int word = 0; word < kSparseWordsPerRow; ++word) {
      row[word] = static_cast<uint32_t>(in[(32 * w + lane) * kSparseWordsPerRow + word]);
    }
#pragma unroll
    for (int word = 0; word < kSparseWordsPerRow; ++word) {
      uint32_t mine = 0;  // key row 32·word + lane's word w
#pragma unroll
      for (int bit = 0; bit < 32; ++bit) {
        const uint32_t column = __ballot_sync(0xffffffffu, (row[word] >> bit) & 1u);
        if (lane == bit) mine = column;
      }
      out[(32 * word + lane) * kSparseWordsPerRow + w] = static_cast<int32_t>(mine);
    }
  }
}

// Grid (q_blocks, mask heads, mask batches). A template (of the configuration it serves) as the
// backward's other kernels are, so that each translation unit holds its own.
template <typename Config>
__global__ void __launch_bounds__(kScatterThreads) scatter_block_mask_kernel(
    const __grid_constant__ Params p) {
  const detail::BlockSparse& mask = p.block_sparse;
  const QueryBlockLists& lists = p.query_lists;
  const int m = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  int32_t* pairs = lists.pairs + lists.key_entry(batch, head, 0) * lists.q_blocks;
  auto mark = [&](int32_t key_block, int32_t pair) {
    if (key_block >= 0 && key_block < lists.k_blocks) pairs[int64_t{key_block} * lists.q_blocks + m] = pair;
  };
  if (mask.full_kv_num_blocks) {
    const int count = *mask.full_kv_num_blocks.at(batch, head, m);
    for (int s = threadIdx.x; s < count; s += kScatterThreads) {
      mark(*mask.full_kv_indices.at(batch, head, m, s), kFullPair);
    }
  }
  // At most the slots the workspace's bits have room for (the CPU's validation checks counts).
  const int count = min(*mask.kv_num_blocks.at(batch, head, m), lists.slots);
  for (int s = threadIdx.x; s < count; s += kScatterThreads) {
    mark(*mask.kv_indices.at(batch, head, m, s), s + 1);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int s = warp; s < count; s += kScatterThreads / 32) {
    transpose_block_bits(mask.bits(batch, head, m, s),
                         lists.bits + lists.bits_block(batch, head, int64_t{m} * lists.slots + s),
                         lane);
  }
}

// The sum of `value` over the warp's lanes below this one, and over all of them (*total).
__device__ __forceinline__ int lanes_below_sum(int value, int lane, int* total) {
  int inclusive = value;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const int below = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += below;
  }
  *total = __shfl_sync(0xffffffffu, inclusive, 31);
  return inclusive - value;
}

// Grid (k_blocks, mask heads, mask batches), one warp: two passes over the key block's pairs,
// a lane a mask query block, the first counting the tiles of its full blocks (the partial ones'
// go after them), the second placing each block's tiles (after the lanes' below it). kBlockM:
// the main kernel's query tile; a mask block's tiles past seqlen_q are left out.
template <int kBlockM>
__global__ void __launch_bounds__(kCompactThreads) compact_query_lists_kernel(
    const __grid_constant__ Params p) {
  constexpr int kTilesPerBlock = kSparseBlock / kBlockM;
  const QueryBlockLists& lists = p.query_lists;
  const int key_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const int lane = threadIdx.x;
  const int64_t entry = lists.key_entry(batch, head, key_block);
  const int32_t* pairs = lists.pairs + entry * lists.q_blocks;
  int32_t* queries = lists.queries + entry * lists.q_tiles;
  int32_t* partial_bits = lists.partial_bits + entry * lists.q_tiles;
  auto pair_of = [&](int m) { return m < lists.q_blocks ? pairs[m] : kNoPair; };
  // The tiles of mask query block m that hold a row of the sequence.
  auto tiles_of = [&](int m) {
    return min(kTilesPerBlock, (p.seqlen_q - m * kSparseBlock + kBlockM - 1) / kBlockM);
  };

  int full_tiles = 0;
  for (int first = 0; first < lists.q_blocks; first += 32) {
    const int m = first + lane;
    full_tiles += __reduce_add_sync(0xffffffffu, pair_of(m) == kFullPair ? tiles_of(m) : 0);
  }
  int full_at = 0, partial_at = full_tiles;
  for (int first = 0; first < lists.q_blocks; first += 32) {
    const int m = first + lane;
    const int32_t pair = pair_of(m);
    const int tiles = pair != kNoPair ? tiles_of(m) : 0;
    int fulls = 0, partials = 0;
    const int full_below = lanes_below_sum(pair == kFullPair ? tiles : 0, lane, &fulls);
    const int partial_below = lanes_below_sum(pair > 0 ? tiles : 0, lane, &partials);
    const int at = pair == kFullPair ? full_at + full_below : partial_at + partial_below;
    for (int t = 0; t < tiles; ++t) {
      queries[at + t] = m * kTilesPerBlock + t;
      if (pair > 0) partial_bits[at + t] = m * lists.slots + (pair - 1);
    }
    full_at += fulls;
    partial_at += partials;
  }
  if (lane == 0) lists.counts[entry] = {full_tiles, partial_at};
}

// The query lists of the launch's mask (layout: its workspace_layout, workspace its base) into
// params.query_lists, then built on `stream`.
template <typename Config>
Status build_query_lists(Params& params, const detail::ForwardProblem& problem,
                         const WorkspaceLayout& layout, uint8_t* workspace, cudaStream_t stream,
                         const char* family) {
  const SparseListShape shape = sparse_list_shape(problem);
  QueryBlockLists& lists = params.query_lists;
  lists.pairs = reinterpret_cast<int32_t*>(workspace + layout.pairs_offset);
  lists.counts = reinterpret_cast<QueryListCounts*>(workspace + layout.counts_offset);
  lists.queries = reinterpret_cast<int32_t*>(workspace + layout.queries_offset);
  lists.partial_bits = reinterpret_cast<int32_t*>(workspace + layout.partial_bits_offset);
  lists.bits = reinterpret_cast<int32_t*>(workspace + layout.bits_offset);
  lists.batch_stride = shape.batches > 1 ? shape.heads : 0;
  lists.head_stride = shape.heads > 1 ? 1 : 0;
  lists.q_blocks = shape.q_blocks;
  lists.k_blocks = shape.k_blocks;
  lists.q_tiles = sparse_query_tiles<Config>(problem);
  lists.slots = shape.slots;
  params.block_sparse = problem.block_sparse;
  if (shape.k_blocks == 0) return Status::ok();  // no key block: no tile reads a list

  const std::size_t pair_bytes = layout.counts_offset - layout.pairs_offset;
  if (cudaError_t error = cudaMemsetAsync(lists.pairs, 0, pair_bytes, stream); error != cudaSuccess)
    return cuda_status(family, "cannot clear the block-sparse pairs", error);
  if (shape.q_blocks > 0) {  // else every key block's list is empty (compact writes its counts)
    const dim3 scatter_grid(shape.q_blocks, shape.heads, shape.batches);
    scatter_block_mask_kernel<Config><<<scatter_grid, kScatterThreads, 0, stream>>>(params);
    HFA_RETURN_IF_ERROR(launch_status(family));
  }
  const dim3 compact_grid(shape.k_blocks, shape.heads, shape.batches);
  compact_query_lists_kernel<Config::kBlockM><<<compact_grid, kCompactThreads, 0, stream>>>(params);
  return launch_status(family);
}

}  // namespace hfa::sm90::bwd
