// Before the main kernel, per query block of one (batch, head): D = rowsum(dO∘O) in fp32 (or the
// caller's, Params::softmax_d) and the LSE in log2 units into the workspace, the block's dQ
// accumulator chunk and turn counter cleared. Rows past the used queries (and a block's rows past the sequence) get D = 0 and
// LSE +inf, so the main kernel's P = exp2(s·scale − LSE) is 0 there with no test, and out, dout
// and lse are never read past seqused_q. A row that saw no key (LSE −inf) gets +inf too: its
// scores are all masked, and −inf − (−inf) would be NaN.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "sm90/bwd/params.hpp"
#include "sm90/bwd/workspace.hpp"
#include "sm90/common/math.hpp"
#include "sm90/common/sequence.cuh"

namespace hfa::sm90::bwd {

inline constexpr int kPrePostThreads = 256;

// 8 consecutive 16-bit values (16 bytes) as floats.
template <typename Element>
__device__ __forceinline__ void load8(const Element* at, float (&x)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(at);
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
      const float2 pair = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[i]));
      x[2 * i] = pair.x, x[2 * i + 1] = pair.y;
    } else {
      const float2 pair = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
      x[2 * i] = pair.x, x[2 * i + 1] = pair.y;
    }
  }
}

// D of one row, a warp's: lane l takes dims 8l .. 8l + 7 (hdim_v <= 256), then the warp sums.
template <typename Element>
__device__ __forceinline__ float row_dot(const Params& p, int batch, int head, int64_t token,
                                         int lane) {
  float d = 0.0f;
  if (8 * lane < p.hdim_v) {
    const Element* o = static_cast<const Element*>(p.out) + batch * p.out_stride.batch +
                       token * p.out_stride.row + head * p.out_stride.head + 8 * lane;
    const Element* g = static_cast<const Element*>(p.dout) + batch * p.dout_stride.batch +
                       token * p.dout_stride.row + head * p.dout_stride.head + 8 * lane;
    float ov[8], gv[8];
    load8(o, ov);
    load8(g, gv);
#pragma unroll
    for (int i = 0; i < 8; ++i) d = fmaf(ov[i], gv[i], d);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) d += __shfl_xor_sync(0xffffffffu, d, offset);
  return d;
}

// kGivenD: D comes from Params::softmax_d (a kernel of its own, so that the usual one's code is
// what it was before the option existed).
template <typename Config, typename Element, bool kGivenD>
__global__ void __launch_bounds__(kPrePostThreads) preprocess_kernel(const __grid_constant__ Params p) {
  using Dq = DqChunk<Config>;
  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  if (m_block * Config::kBlockM >= allocated_queries(p, batch)) return;
  const Sequence seq = sequence_of(p, batch);
  const int64_t row0 = workspace_row<Config::kBlockM>(p, batch, head) + m_block * Config::kBlockM;

  // A warp a row (rows are warp-uniform: row_dot's shuffles see every lane).
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < Config::kBlockM; r += kPrePostThreads / 32) {
    const int query = m_block * Config::kBlockM + r;
    float d = 0.0f, lse_log2 = INFINITY;
    if (query < seq.seqlen_q) {
      const int64_t token = seq.q_offset + query;
      if constexpr (kGivenD) {
        d = p.softmax_d[batch * p.softmax_d_batch_stride + head * p.softmax_d_head_stride + token];
      } else {
        d = row_dot<Element>(p, batch, head, token, lane);
      }
      const float lse = p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + token];
      lse_log2 = lse == -INFINITY ? INFINITY : lse * kLog2e;
    }
    if (lane == 0) {
      p.ws.dpsum[row0 + r] = d;
      p.ws.lse_log2[row0 + r] = lse_log2;
    }
  }

  float4* chunk = reinterpret_cast<float4*>(p.ws.dq_accum + row0 * Config::kHeadDimQK);
  for (int i = threadIdx.x; i < Dq::kFloats / 4; i += kPrePostThreads) chunk[i] = make_float4(0, 0, 0, 0);
  if (p.ws.dq_turns != nullptr && threadIdx.x == 0) p.ws.dq_turns[row0 / Config::kBlockM] = 0;
}

}  // namespace hfa::sm90::bwd
