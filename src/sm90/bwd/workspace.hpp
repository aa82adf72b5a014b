// The backward's workspace: where each (batch, query head)'s padded run of rows lives, how big it
// all is, and the order of dQ's fp32 accumulator within a query block's chunk. The host sizes it,
// the preprocess fills it, the main kernel adds into it, the postprocess reads it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/host_device.hpp"
#include "common/problem.hpp"
#include "sm90/bwd/params.hpp"
#include "sm90/common/wgmma_shape.hpp"

namespace hfa::sm90::bwd {

// Fixed length: each (batch, head) has ceil(seqlen_q / kBlockM) blocks of rows. Varlen: one run
// a head, where sequence b starts at (cu_seqlens_q[b] + b·kBlockM) rounded down to a multiple of
// kBlockM — past the end of sequence b − 1's last block — so every sequence's blocks are aligned
// chunks; the run then has round_up(total_q + batch·kBlockM, kBlockM) rows.
template <int kBlockM>
HFA_HD inline int64_t varlen_run_start(int64_t cu_seqlens_q_of_b, int64_t b) {
  return (cu_seqlens_q_of_b + b * kBlockM) / kBlockM * kBlockM;
}

template <int kBlockM>
inline int64_t padded_rows(const detail::ForwardProblem& p) {
  if (p.is_varlen()) return (p.total_q + int64_t(p.batch) * kBlockM + kBlockM - 1) / kBlockM * kBlockM;
  return (int64_t(p.seqlen_q) + kBlockM - 1) / kBlockM * kBlockM;
}

struct WorkspaceLayout {
  int64_t padded_rows;  // Workspace::padded_rows
  int64_t rows;         // all (batch, head) runs together
  std::size_t lse_offset, dpsum_offset, dq_offset, turns_offset, bytes;
};

inline constexpr std::size_t kWorkspaceAlignment = 256;

inline std::size_t align_up(std::size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

template <int kBlockM, int kHeadDimQK>
WorkspaceLayout workspace_layout(const detail::BackwardProblem& problem) {
  const detail::ForwardProblem& p = problem.fwd;
  WorkspaceLayout w{};
  w.padded_rows = padded_rows<kBlockM>(p);
  w.rows = w.padded_rows * p.heads_q * (p.is_varlen() ? 1 : p.batch);
  const std::size_t rows = std::size_t(w.rows);
  w.lse_offset = 0;
  w.dpsum_offset = align_up(w.lse_offset + rows * sizeof(float));
  w.dq_offset = align_up(w.dpsum_offset + rows * sizeof(float));
  w.turns_offset = align_up(w.dq_offset + rows * kHeadDimQK * sizeof(float));
  const std::size_t turns = p.deterministic ? rows / kBlockM * sizeof(int32_t) : 0;
  w.bytes = align_up(w.turns_offset + turns);
  return w;
}

// Row 0 of (batch, head)'s run, a multiple of kBlockM.
template <int kBlockM>
HFA_HD inline int64_t workspace_row(const Params& p, int batch, int head) {
  if (p.cu_seqlens_q != nullptr) {
    return head * p.ws.padded_rows + varlen_run_start<kBlockM>(p.cu_seqlens_q[batch], batch);
  }
  return (int64_t(batch) * p.heads_q + head) * p.ws.padded_rows;
}

// Query block m_block of (batch, head): its chunk of dQ's accumulator and its turn counter.
template <int kBlockM>
HFA_HD inline int64_t dq_chunk_index(const Params& p, int batch, int head, int m_block) {
  return workspace_row<kBlockM>(p, batch, head) / kBlockM + m_block;
}

// A query block's chunk of dQ's accumulator: kBlockM × kHeadDimQK floats as 64 × 64 parts, part
// (row tile, slab) at (row_tile · slabs + slab) · 4096, each in the wgmma accumulator order of the
// warpgroup that computes it — float (g·128 + t)·4 + r is register 4g + r of thread t — so a
// warpgroup writes its registers as consecutive 16-byte runs (no bank conflicts) and the main
// kernel adds a whole chunk with one bulk reduce.
template <int kBlockM, int kHeadDimQK>
struct DqChunk {
  static constexpr int kSlabs = kHeadDimQK / kSlabColumns;
  static constexpr int kPartFloats = kRowsPerWarpgroup * kSlabColumns;
  static constexpr int kFloats = kBlockM * kHeadDimQK;
  static constexpr uint32_t kBytes = kFloats * sizeof(float);

  HFA_HD static constexpr int part(int row_tile, int slab) { return (row_tile * kSlabs + slab) * kPartFloats; }

  // The (row, column) in the block of float f of the chunk.
  struct Coords {
    int row, column;
  };
  HFA_HD static constexpr Coords coords(int f) {
    const int part_index = f / kPartFloats, in_part = f % kPartFloats;
    const int group = in_part / (kThreadsPerWarpgroup * 4);
    const int thread = in_part / 4 % kThreadsPerWarpgroup;
    const int r = in_part % 4;
    const int row = 16 * (thread / 32) + (thread % 32) / 4 + 8 * (r / 2);
    const int column = 8 * group + 2 * (thread % 4) + r % 2;
    return {part_index / kSlabs * kRowsPerWarpgroup + row, part_index % kSlabs * kSlabColumns + column};
  }
};

}  // namespace hfa::sm90::bwd
