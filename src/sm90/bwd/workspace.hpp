// The backward's workspace: where each (batch, query head)'s padded run of rows lives, how big it
// all is, and the order of the fp32 accumulators within a block's chunk. The host sizes it, the
// preprocess fills it, the main kernel adds into it, the postprocess reads it.
//
// Block-sparse (TileConfig::kBlockSparse), last: the mask's query lists per key block and its
// partial blocks' bits transposed, which the preprocess builds from the forward's lists
// (sparse_block.hpp's QueryBlockLists, sparse_preprocess.cuh).
//
// Query side, always: the LSE (log2), D and dQ's accumulator per (batch, query head) run of
// query rows. Key side, where the CTAs of a GQA group split its query heads (Params::
// heads_per_tile): dK's and dV's accumulators per (batch, kv head) run of key rows, which every
// CTA of the group adds into and the key postprocess rounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/host_device.hpp"
#include "common/problem.hpp"
#include "sm90/bwd/params.hpp"
#include "sm90/common/wgmma_shape.hpp"

namespace hfa::sm90::bwd {

// A run holds a sequence's rows padded to whole blocks of kBlock. Fixed length: each (batch,
// head) has ceil(seqlen / kBlock) blocks. Varlen: one run a head, where sequence b starts at
// (cu_seqlens[b] + b·kBlock) rounded down to a multiple of kBlock — past the end of sequence
// b − 1's last block — so every sequence's blocks are aligned chunks; the run then has
// round_up(total + batch·kBlock, kBlock) rows.
template <int kBlock>
HFA_HD inline int64_t varlen_run_start(int64_t cu_seqlens_of_b, int64_t b) {
  return (cu_seqlens_of_b + b * kBlock) / kBlock * kBlock;
}

template <int kBlock>
inline int64_t padded_run_rows(int64_t seqlen, int64_t total, int batch, bool varlen) {
  if (varlen) return (total + int64_t(batch) * kBlock + kBlock - 1) / kBlock * kBlock;
  return (seqlen + kBlock - 1) / kBlock * kBlock;
}

// Row 0 of (batch, head)'s run, a multiple of kBlock; `heads` of the tensor the run mirrors.
template <int kBlock>
HFA_HD inline int64_t run_row(const int32_t* cu_seqlens, int64_t padded_rows, int heads, int batch,
                              int head) {
  if (cu_seqlens != nullptr) return head * padded_rows + varlen_run_start<kBlock>(cu_seqlens[batch], batch);
  return (int64_t(batch) * heads + head) * padded_rows;
}

// Whether the key-side accumulators exist: a GQA group whose query heads may be split over CTAs.
// The deterministic mode keeps a group in one CTA (its dK and dV adds would land in any order).
inline bool has_key_accumulators(const detail::BackwardProblem& problem) {
  return problem.fwd.heads_q > problem.fwd.heads_kv && !problem.fwd.deterministic;
}

// The extents of a block-sparse mask's transposed lists (QueryBlockLists): one list per (mask
// batch, mask head), where a dim is the mask's own unless all five tensors broadcast it.
struct SparseListShape {
  int64_t batches, heads;
  int32_t q_blocks, k_blocks, slots;
  int64_t lists() const { return batches * heads; }
};

inline SparseListShape sparse_list_shape(const detail::ForwardProblem& p) {
  const detail::BlockSparse& m = p.block_sparse;
  const detail::BlockIndexView views[] = {m.kv_num_blocks, m.kv_indices, m.full_kv_num_blocks,
                                          m.full_kv_indices, m.kv_mask_bits};
  bool per_batch = false, per_head = false;
  for (const detail::BlockIndexView& v : views) {
    if (!v) continue;
    per_batch |= v.stride[0] != 0;
    per_head |= v.stride[1] != 0;
  }
  return {per_batch ? p.batch : 1, per_head ? p.heads_q : 1,
          (p.seqlen_q + kSparseBlock - 1) / kSparseBlock,
          (p.seqlen_k + kSparseBlock - 1) / kSparseBlock, static_cast<int32_t>(m.slots)};
}

// Query tiles of kBlockM rows a sequence has: the entries of one key block's query list.
template <typename Config>
int32_t sparse_query_tiles(const detail::ForwardProblem& p) {
  return (p.seqlen_q + Config::kBlockM - 1) / Config::kBlockM;
}

struct WorkspaceLayout {
  int64_t padded_rows;  // Workspace::padded_rows
  int64_t padded_keys;  // Workspace::padded_keys (0 without key accumulators)
  std::size_t lse_offset, dpsum_offset, dq_offset, turns_offset, dk_offset, dv_offset, bytes;
  // Block-sparse only (0 otherwise): QueryBlockLists' arrays, from sparse_offset on.
  std::size_t sparse_offset, pairs_offset, counts_offset, queries_offset, partial_bits_offset,
      bits_offset;
};

inline constexpr std::size_t kWorkspaceAlignment = 256;

inline std::size_t align_up(std::size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

template <typename Config>
WorkspaceLayout workspace_layout(const detail::BackwardProblem& problem) {
  const detail::ForwardProblem& p = problem.fwd;
  const bool varlen = p.is_varlen();
  const std::size_t runs_q = std::size_t(p.heads_q) * (varlen ? 1 : p.batch);
  const std::size_t runs_k = std::size_t(p.heads_kv) * (varlen ? 1 : p.batch);
  WorkspaceLayout w{};
  w.padded_rows = padded_run_rows<Config::kBlockM>(p.seqlen_q, p.total_q, p.batch, varlen);
  if (has_key_accumulators(problem)) {
    w.padded_keys = padded_run_rows<Config::kBlockN>(p.seqlen_k, p.total_k, p.batch, varlen);
  }
  const std::size_t rows = runs_q * std::size_t(w.padded_rows);
  const std::size_t keys = runs_k * std::size_t(w.padded_keys);
  w.lse_offset = 0;
  w.dpsum_offset = align_up(w.lse_offset + rows * sizeof(float));
  w.dq_offset = align_up(w.dpsum_offset + rows * sizeof(float));
  w.turns_offset = align_up(w.dq_offset + rows * Config::kHeadDimQK * sizeof(float));
  const std::size_t turns = p.deterministic ? rows / Config::kBlockM * sizeof(int32_t) : 0;
  w.dk_offset = align_up(w.turns_offset + turns);
  w.dv_offset = align_up(w.dk_offset + keys * Config::kHeadDimQK * sizeof(float));
  w.bytes = align_up(w.dv_offset + keys * Config::kHeadDimV * sizeof(float));
  if constexpr (Config::kBlockSparse) {
    const SparseListShape shape = sparse_list_shape(p);
    const std::size_t key_entries = std::size_t(shape.lists()) * shape.k_blocks;
    const std::size_t pair_ints = key_entries * shape.q_blocks;
    const std::size_t list_ints = key_entries * sparse_query_tiles<Config>(p);
    const std::size_t bit_words =
        std::size_t(shape.lists()) * shape.q_blocks * shape.slots * kSparseBlockWords;
    w.sparse_offset = w.pairs_offset = w.bytes;
    w.counts_offset = align_up(w.pairs_offset + pair_ints * sizeof(int32_t));
    w.queries_offset = align_up(w.counts_offset + key_entries * sizeof(QueryListCounts));
    w.partial_bits_offset = align_up(w.queries_offset + list_ints * sizeof(int32_t));
    w.bits_offset = align_up(w.partial_bits_offset + list_ints * sizeof(int32_t));
    w.bytes = align_up(w.bits_offset + bit_words * sizeof(int32_t));
  }
  return w;
}

// Row 0 of (batch, query head)'s run of query rows.
template <int kBlockM>
HFA_HD inline int64_t workspace_row(const Params& p, int batch, int head) {
  return run_row<kBlockM>(p.cu_seqlens_q, p.ws.padded_rows, p.heads_q, batch, head);
}

// Query block m_block of (batch, head): its chunk of dQ's accumulator and its turn counter.
template <int kBlockM>
HFA_HD inline int64_t dq_chunk_index(const Params& p, int batch, int head, int m_block) {
  return workspace_row<kBlockM>(p, batch, head) / kBlockM + m_block;
}

// Key block n_block of (batch, kv head): its chunk of dK's and dV's accumulators.
template <int kBlockN>
HFA_HD inline int64_t key_chunk_index(const Params& p, int batch, int kv_head, int n_block) {
  return run_row<kBlockN>(p.cu_seqlens_k, p.ws.padded_keys, p.heads_kv, batch, kv_head) / kBlockN +
         n_block;
}

// Where float f of a warpgroup's fp32 accumulator (64 rows × any columns) goes when the
// warpgroup writes its registers as consecutive 16-byte runs — float (g·128 + t)·4 + r is
// register 4g + r of thread t — the order of the chunks below: no bank conflicts, whole L2
// lines. Rows and columns are the accumulator's (fragment.cuh).
struct AccumulatorPosition {
  int row, column;
};
HFA_HD inline constexpr AccumulatorPosition accumulator_position(int f) {
  const int group = f / (kThreadsPerWarpgroup * 4);
  const int thread = f / 4 % kThreadsPerWarpgroup;
  const int r = f % 4;
  return {16 * (thread / 32) + (thread % 32) / 4 + 8 * (r / 2), 8 * group + 2 * (thread % 4) + r % 2};
}

// The (row, column) in its block of a chunk's float.
struct ChunkCoords {
  int row, column;
};

// A block's chunk of an fp32 accumulator: kRows × kColumns floats as 64 × 64 parts, part
// (row tile, slab) at (row_tile · slabs + slab) · 4096, each in the accumulator order of the
// warpgroup that computes it (accumulator_position), so that a whole chunk can be added with
// one bulk reduce.
template <int kRows, int kColumns>
struct FragmentChunk {
  static constexpr int kBlockRows = kRows, kBlockColumns = kColumns;
  static constexpr int kSlabs = kColumns / kSlabColumns;
  static constexpr int kPartFloats = kRowsPerWarpgroup * kSlabColumns;
  static constexpr int kFloats = kRows * kColumns;
  static constexpr uint32_t kBytes = kFloats * sizeof(float);
  // Floats 2j and 2j + 1 are neighbours in a row of the block (columns c, c + 1).
  static constexpr bool kRowPairs = true;

  HFA_HD static constexpr int part(int row_tile, int slab) { return (row_tile * kSlabs + slab) * kPartFloats; }

  // accumulator_position spelled out (checked below): through the call, the postprocess kernels
  // compiled to other machine code (the additions associated in another order).
  HFA_HD static constexpr ChunkCoords coords(int f) {
    const int part_index = f / kPartFloats, in_part = f % kPartFloats;
    const int group = in_part / (kThreadsPerWarpgroup * 4);
    const int thread = in_part / 4 % kThreadsPerWarpgroup;
    const int r = in_part % 4;
    const int row = 16 * (thread / 32) + (thread % 32) / 4 + 8 * (r / 2);
    const int column = 8 * group + 2 * (thread % 4) + r % 2;
    return {part_index / kSlabs * kRowsPerWarpgroup + row, part_index % kSlabs * kSlabColumns + column};
  }
};

// FragmentChunk's parts are in accumulator_position's order.
constexpr bool fragment_chunk_in_accumulator_order() {
  using Part = FragmentChunk<kRowsPerWarpgroup, kSlabColumns>;
  for (int f = 0; f < Part::kFloats; ++f) {
    const ChunkCoords c = Part::coords(f);
    const AccumulatorPosition a = accumulator_position(f);
    if (c.row != a.row || c.column != a.column) return false;
  }
  return true;
}
static_assert(fragment_chunk_in_accumulator_order());

// A chunk computed transposed (dQ where TileConfig::kDqTransposed or kTransposedGradients; dK
// and dV where kTransposedGradients): part `slab` is the transposed accumulator of the
// warpgroup that computes that 64-column slab of the head dim — its 64 dims as rows, all kRows
// queries (keys) as columns — in accumulator order, so float f lands at the block's row =
// its accumulator column and column = slab · 64 + its accumulator row. One part spans every
// row of the block: the row tile is always 0.
template <int kRows, int kColumns>
struct TransposedFragmentChunk {
  static constexpr int kBlockRows = kRows, kBlockColumns = kColumns;
  static constexpr int kSlabs = kColumns / kSlabColumns;
  static constexpr int kPartFloats = kSlabColumns * kRows;
  static constexpr int kFloats = kRows * kColumns;
  static constexpr uint32_t kBytes = kFloats * sizeof(float);
  // Floats 2j and 2j + 1 are neighbours in a column of the block (rows q, q + 1).
  static constexpr bool kRowPairs = false;
  static_assert(kColumns % kSlabColumns == 0 && kRows % 8 == 0, "whole 8-column groups of dQᵀ");

  HFA_HD static constexpr int part(int row_tile, int slab) { return (row_tile * kSlabs + slab) * kPartFloats; }

  HFA_HD static constexpr ChunkCoords coords(int f) {
    const AccumulatorPosition at = accumulator_position(f % kPartFloats);
    return {at.column, f / kPartFloats * kSlabColumns + at.row};
  }
};

// dQ's chunk in the configuration's layout: what the consumers write, the writer adds, the
// preprocess clears and the postprocess reads back.
template <typename Config>
using DqChunk =
    std::conditional_t<Config::kDqTransposed || Config::kTransposedGradients,
                       TransposedFragmentChunk<Config::kBlockM, Config::kHeadDimQK>,
                       FragmentChunk<Config::kBlockM, Config::kHeadDimQK>>;

// dK's or dV's chunk (kColumns: its head dim) of a key block's accumulator where a GQA group is
// split over CTAs: what the epilogue adds and the key postprocess reads back.
template <typename Config, int kColumns>
using KeyChunk = std::conditional_t<Config::kTransposedGradients,
                                    TransposedFragmentChunk<Config::kBlockN, kColumns>,
                                    FragmentChunk<Config::kBlockN, kColumns>>;

}  // namespace hfa::sm90::bwd
