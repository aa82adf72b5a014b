// After the main kernel: dQ from its fp32 accumulator, and the sinks' gradient.
//   dq: per query block of one (batch, head), the chunk scaled by softmax_scale and rounded to
//       the input dtype, through shared memory so that global stores are whole 16-byte runs of
//       a row. Every allocated row is written: rows past the used queries get zeros.
//   dsinks[h] = −Σ over the batch and the rows of exp(sink − LSE)·D (a sink is one more logit
//       with no value, so dL/dsink = −P_sink · rowsum(dO∘O)); one CTA a head, a fixed order of
//       additions, so the result is the same bytes on every run.
#pragma once

#include "sm90/bwd/preprocess.cuh"

namespace hfa::sm90::bwd {

template <typename Config, typename Element>
__global__ void __launch_bounds__(kPrePostThreads) postprocess_kernel(const __grid_constant__ Params p) {
  using Dq = DqChunk<Config::kBlockM, Config::kHeadDimQK>;
  constexpr int kColumns = Config::kHeadDimQK;
  constexpr int kRowElements = kColumns + 8;  // a 16-byte pad a row: the scattered writes spread over banks
  __shared__ alignas(16) Element tile[Config::kBlockM * kRowElements];

  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const int allocated = allocated_queries(p, batch);
  if (m_block * Config::kBlockM >= allocated) return;
  const Sequence seq = sequence_of(p, batch);
  const int64_t row0 = workspace_row<Config::kBlockM>(p, batch, head) + m_block * Config::kBlockM;

  const float4* chunk = reinterpret_cast<const float4*>(p.ws.dq_accum + row0 * kColumns);
  for (int i = threadIdx.x; i < Dq::kFloats / 4; i += kPrePostThreads) {
    const float4 v = chunk[i];
    // Floats 4i .. 4i + 3 are (row, c), (row, c + 1), (row + 8, c), (row + 8, c + 1).
    const auto at = Dq::coords(4 * i);
    Element* top = tile + at.row * kRowElements + at.column;
    *reinterpret_cast<uint32_t*>(top) = ptx::pack_pair<Element>(v.x * p.softmax_scale, v.y * p.softmax_scale);
    *reinterpret_cast<uint32_t*>(top + 8 * kRowElements) =
        ptx::pack_pair<Element>(v.z * p.softmax_scale, v.w * p.softmax_scale);
  }
  __syncthreads();

  constexpr int kPieces = kColumns / 8;  // 16-byte pieces of a row
  const int rows = min(Config::kBlockM, allocated - m_block * Config::kBlockM);
  for (int i = threadIdx.x; i < rows * kPieces; i += kPrePostThreads) {
    const int r = i / kPieces, piece = i % kPieces;
    if (8 * piece >= p.hdim_qk) continue;
    const int query = m_block * Config::kBlockM + r;
    const uint4 value = query < seq.seqlen_q
                            ? *reinterpret_cast<const uint4*>(tile + r * kRowElements + 8 * piece)
                            : make_uint4(0, 0, 0, 0);
    Element* out = static_cast<Element*>(p.dq) + batch * p.dq_stride.batch +
                   (seq.q_offset + query) * p.dq_stride.row + head * p.dq_stride.head + 8 * piece;
    *reinterpret_cast<uint4*>(out) = value;
  }
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
