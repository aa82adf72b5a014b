// The stream decode kernel: up to 8 query rows per kv-head over a cache whose pages hold whole
// 16-key tiles, in every storage format. The serving hot path: a GQA group of 4-8 heads reads
// one token's keys.
//
// The tile kernel (kernel.cuh) multiplies a 16-row query tile by keys widened into a bf16/fp16
// tile in shared memory; with 4 real rows three quarters of its mma and fragment work is padding,
// and the widening pass (code → registers → shared → ldmatrix) costs more instructions per key
// than the copy of the codes. This kernel turns the products around: Sᵀ = K·Qᵀ and Oᵀ = Vᵀ·Pᵀ,
// 16 keys as the mma's M and the ≤ 8 query rows as its N, and widens codes straight into mma
// fragments (stream_consumer.cuh, stream_fragments.cuh). Per 16 keys a warp issues 16 mma (the
// tile kernel 32) and no shared-memory stores.
//
// Copies: cp.async of 16-key tiles, one block-table read per tile; each of the 4 warps copies
// and consumes its own tiles of a stage, so warps meet only at the final merge
// (stream_producer.cuh).
//
// The body is the decode skeleton (skeleton.cuh) with the stream kernel's parts.
#pragma once

#include "sm90/decode/config.hpp"
#include "sm90/decode/params.hpp"
#include "sm90/decode/skeleton.cuh"
#include "sm90/decode/stream_consumer.cuh"
#include "sm90/decode/stream_producer.cuh"

namespace hfa::sm90::decode {

template <typename Element, Storage kStorage>
__global__ void __launch_bounds__(StreamConfig<kStorage>::kThreads, StreamConfig<kStorage>::kMinBlocksPerSM)
    stream_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  decode_cta<StreamConsumer<Element, kStorage>, StreamProducer<Element, kStorage>>(p, smem);
}

}  // namespace hfa::sm90::decode
