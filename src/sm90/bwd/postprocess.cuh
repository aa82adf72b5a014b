// After the main kernel: dQ (and, where a GQA group was split over CTAs, dK and dV) from their
// fp32 accumulators, and the sinks' gradient.
//   dq, dk, dv: per block of one (batch, head), the chunk scaled (dQ and dK by softmax_scale)
//       and rounded to the input dtype. Every allocated row is written: rows past the used
//       queries or keys get zeros.
//   dsinks[h] = −Σ over the batch and the rows of exp(sink − LSE)·D (a sink is one more logit
//       with no value, so dL/dsink = −P_sink · rowsum(dO∘O)); one CTA a head, a fixed order of
//       additions, so the result is the same bytes on every run.
#pragma once

#include "sm90/bwd/preprocess.cuh"

namespace hfa::sm90::bwd {

// One block's chunk of an fp32 accumulator (a Chunk of workspace.hpp: DqChunk or KeyChunk),
// scaled and rounded to Element, into rows [0, rows) of `out` (row stride in elements, `columns`
// of them stored): through shared memory, so that global stores are whole 16-byte runs of a
// row. Rows from `used` on get zeros. Every thread of the CTA calls it.
template <typename Chunk, typename Element>
__device__ __forceinline__ void round_chunk(const float* accumulator, float scale, Element* out,
                                            int64_t row_stride, int rows, int used, int columns) {
  constexpr int kRows = Chunk::kBlockRows, kColumns = Chunk::kBlockColumns;
  constexpr int kRowElements = kColumns + 8;  // a 16-byte pad a row: the scattered writes spread over banks
  __shared__ alignas(16) Element tile[kRows * kRowElements];

  const float4* chunk = reinterpret_cast<const float4*>(accumulator);
  for (int i = threadIdx.x; i < Chunk::kFloats / 4; i += kPrePostThreads) {
    const float4 v = chunk[i];
    if constexpr (Chunk::kRowPairs) {
      // Floats 4i .. 4i + 3 are (row, c), (row, c + 1), (row + 8, c), (row + 8, c + 1).
      const auto at = Chunk::coords(4 * i);
      Element* top = tile + at.row * kRowElements + at.column;
      *reinterpret_cast<uint32_t*>(top) = ptx::pack_pair<Element>(v.x * scale, v.y * scale);
      *reinterpret_cast<uint32_t*>(top + 8 * kRowElements) = ptx::pack_pair<Element>(v.z * scale, v.w * scale);
    } else {
      // No two floats share a row's 4 bytes: one element each, where the chunk places it.
      const float values[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const auto at = Chunk::coords(4 * i + r);
        tile[at.row * kRowElements + at.column] = ptx::to_element<Element>(values[r] * scale);
      }
    }
  }
  __syncthreads();

  constexpr int kPieces = kColumns / 8;  // 16-byte pieces of a row
  for (int i = threadIdx.x; i < rows * kPieces; i += kPrePostThreads) {
    const int r = i / kPieces, piece = i % kPieces;
    if (8 * piece >= columns) continue;
    const uint4 value = r < used ? *reinterpret_cast<const uint4*>(tile + r * kRowElements + 8 * piece)
                                 : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(out + r * row_stride + 8 * piece) = value;
  }
}

// dQ, per query block of one (batch, query head).
template <typename Config, typename Element>
__global__ void __launch_bounds__(kPrePostThreads) postprocess_kernel(const __grid_constant__ Params p) {
  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const int first = m_block * Config::kBlockM;
  const int allocated = allocated_queries(p, batch);
  if (first >= allocated) return;
  const Sequence seq = sequence_of(p, batch);
  const int64_t row0 = workspace_row<Config::kBlockM>(p, batch, head) + first;
  Element* dq = static_cast<Element*>(p.dq) + batch * p.dq_stride.batch +
                (seq.q_offset + first) * p.dq_stride.row + head * p.dq_stride.head;
  round_chunk<DqChunk<Config>>(
      p.ws.dq_accum + row0 * Config::kHeadDimQK, p.softmax_scale, dq, p.dq_stride.row,
      min(Config::kBlockM, allocated - first), seq.seqlen_q - first, p.hdim_qk);
}

// dK and dV from the key accumulators (where a GQA group's heads were split over CTAs), per key
// block of one (batch, kv head); rows past the used keys get zeros, as the main kernel's own
// epilogue writes them.
template <typename Config, typename Element>
__global__ void __launch_bounds__(kPrePostThreads) key_postprocess_kernel(const __grid_constant__ Params p) {
  const int n_block = blockIdx.x, kv_head = blockIdx.y, batch = blockIdx.z;
  const int first = n_block * Config::kBlockN;
  const int allocated = allocated_keys(p, batch);
  if (first >= allocated) return;
  const Sequence seq = sequence_of(p, batch);
  const int64_t chunk = key_chunk_index<Config::kBlockN>(p, batch, kv_head, n_block);
  const int rows = min(Config::kBlockN, allocated - first), used = seq.seqlen_k - first;
  const int64_t key = seq.k_offset + first;
  Element* dk = static_cast<Element*>(p.dk) + batch * p.dk_stride.batch + key * p.dk_stride.row +
                kv_head * p.dk_stride.head;
  Element* dv = static_cast<Element*>(p.dv) + batch * p.dv_stride.batch + key * p.dv_stride.row +
                kv_head * p.dv_stride.head;
  round_chunk<KeyChunk<Config, Config::kHeadDimQK>>(
      p.ws.dk_accum + chunk * Config::kBlockN * Config::kHeadDimQK, p.softmax_scale, dk,
      p.dk_stride.row, rows, used, p.hdim_qk);
  __syncthreads();  // round_chunk's shared tile is reused
  round_chunk<KeyChunk<Config, Config::kHeadDimV>>(
      p.ws.dv_accum + chunk * Config::kBlockN * Config::kHeadDimV, 1.0f, dv, p.dv_stride.row,
      rows, used, p.hdim_v);
}

template <typename Config>
__global__ void __launch_bounds__(kPrePostThreads) sink_gradient_kernel(const __grid_constant__ Params p) {
  const int head = blockIdx.x;
  const float sink_log2 = p.sinks[head] * kLog2e;
  float sum = 0.0f;
  for (int batch = 0; batch < p.batch; ++batch) {
    const Sequence seq = sequence_of(p, batch);
    const int64_t row0 = workspace_row<Config::kBlockM>(p, batch, head);
    for (int r = threadIdx.x; r < seq.seqlen_q; r += kPrePostThreads) {
      sum = fmaf(exp2f(sink_log2 - p.ws.lse_log2[row0 + r]), p.ws.dpsum[row0 + r], sum);
    }
  }
  __shared__ float partial[kPrePostThreads];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kPrePostThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) p.dsinks[head] = -partial[0];
}

}  // namespace hfa::sm90::bwd
