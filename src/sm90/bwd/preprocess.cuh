// Before the main kernel, per query block of one (batch, head): D = rowsum(dO∘O) in fp32 (or the
// caller's, Params::softmax_d) and the LSE in log2 units into the workspace, the block's dQ
// accumulator chunk and turn counter cleared. Rows past the used queries (and a block's rows
// past the sequence) get D = 0 and LSE +inf, so the main kernel's P = exp2(s·scale − LSE) is 0
// there with no test, and out, dout and lse are never read past seqused_q. A row that saw no key (LSE −inf) gets +inf too: its
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
__device__ __forceinline__ void unpack8(const uint4& raw, float (&x)[8]) {
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

// The preprocess's rows: each row's 16-byte pieces over kLanesPerRow consecutive lanes (a
// power of two: its first hdim_v / 8 read), 32 / kLanesPerRow rows a warp, every row of the
// thread's share loaded before any is summed, so that all of a warp's loads are in flight at
// once. (A warp a row, a row at a time, ran at 0.72 of FlashAttention-3's preprocess at hdim 64:
// 127 against 92 µs at 1k tokens, 16 × 32 heads; docs/decisions/040.)
template <typename Config>
struct PreprocessRows {
  static constexpr int kPieces = Config::kHeadDimV / 8;
  static constexpr int kLanesPerRow = kPieces <= 8 ? 8 : kPieces <= 16 ? 16 : 32;
  static constexpr int kRowsPerTurn = kPrePostThreads / kLanesPerRow;
  static constexpr int kTurns = (Config::kBlockM + kRowsPerTurn - 1) / kRowsPerTurn;
};

// kGivenD: D comes from Params::softmax_d (a kernel of its own, so that the usual one's code is
// what it was before the option existed).
template <typename Config, typename Element, bool kGivenD>
__global__ void __launch_bounds__(kPrePostThreads) preprocess_kernel(const __grid_constant__ Params p) {
  using Dq = DqChunk<Config>;
  using Rows = PreprocessRows<Config>;
  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  if (m_block * Config::kBlockM >= allocated_queries(p, batch)) return;
  const Sequence seq = sequence_of(p, batch);
  const int64_t row0 = workspace_row<Config::kBlockM>(p, batch, head) + m_block * Config::kBlockM;

  // Every lane loads, all turns before any use: rows past the sequence read its last row and
  // pieces past hdim_v its last piece (both discarded below), so that no load waits behind a
  // branch. A block with no row of the sequence loads nothing.
  const int piece = threadIdx.x % Rows::kLanesPerRow;
  const int first_row = threadIdx.x / Rows::kLanesPerRow;
  const int rows = seq.seqlen_q - m_block * Config::kBlockM;  // of the sequence, in this block
  const int column = min(8 * piece, p.hdim_v - 8);
  const Element* out = static_cast<const Element*>(p.out) + batch * p.out_stride.batch +
                       head * p.out_stride.head + column;
  const Element* dout = static_cast<const Element*>(p.dout) + batch * p.dout_stride.batch +
                        head * p.dout_stride.head + column;
  uint4 o_raw[Rows::kTurns], g_raw[Rows::kTurns];
  float lse[Rows::kTurns], d[Rows::kTurns];
  if (rows > 0) {
#pragma unroll
    for (int turn = 0; turn < Rows::kTurns; ++turn) {
      const int r = min(first_row + turn * Rows::kRowsPerTurn, rows - 1);
      const int64_t token = seq.q_offset + m_block * Config::kBlockM + r;
      lse[turn] = p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + token];
      if constexpr (kGivenD) {
        d[turn] = p.softmax_d[batch * p.softmax_d_batch_stride +
                              head * p.softmax_d_head_stride + token];
      } else {
        o_raw[turn] = *reinterpret_cast<const uint4*>(out + token * p.out_stride.row);
        g_raw[turn] = *reinterpret_cast<const uint4*>(dout + token * p.dout_stride.row);
      }
    }
  }
#pragma unroll
  for (int turn = 0; turn < Rows::kTurns; ++turn) {
    const int r = first_row + turn * Rows::kRowsPerTurn;
    const bool valid = r < rows;
    if constexpr (!kGivenD) {
      float ov[8], gv[8];
      unpack8<Element>(o_raw[turn], ov);
      unpack8<Element>(g_raw[turn], gv);
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) dot = fmaf(ov[i], gv[i], dot);
      d[turn] = valid && 8 * piece < p.hdim_v ? dot : 0.0f;
#pragma unroll
      for (int offset = Rows::kLanesPerRow / 2; offset > 0; offset /= 2) {
        d[turn] += __shfl_xor_sync(0xffffffffu, d[turn], offset);
      }
    }
    if (piece == 0 && r < Config::kBlockM) {
      // A row past the sequence, or one that saw no key (LSE −inf), gets +inf.
      const bool seen = valid && lse[turn] != -INFINITY;
      p.ws.dpsum[row0 + r] = valid ? d[turn] : 0.0f;
      p.ws.lse_log2[row0 + r] = seen ? lse[turn] * kLog2e : INFINITY;
    }
  }

  float4* chunk = reinterpret_cast<float4*>(p.ws.dq_accum + row0 * Config::kHeadDimQK);
  for (int i = threadIdx.x; i < Dq::kFloats / 4; i += kPrePostThreads) chunk[i] = make_float4(0, 0, 0, 0);
  if (p.ws.dq_turns != nullptr && threadIdx.x == 0) p.ws.dq_turns[row0 / Config::kBlockM] = 0;
}

}  // namespace hfa::sm90::bwd
