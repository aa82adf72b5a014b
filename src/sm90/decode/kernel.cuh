// The tile decode kernel: one CTA per (split, kv-head × 16-row tile, sequence). The query rows
// of a GQA group (group · seqlen_q of them) are the rows of the tile, so each K/V byte is read
// once for all of them. It serves what the stream kernel (stream_kernel.cuh) does not: more
// than 8 query rows per kv-head, page sizes that are not multiples of 16, head dims 64 and 256.
// With varlen queries the grid's row tiles cover the longest sequence and a sequence's CTAs past
// its own rows exit at once.
//
// The kernel is compiled per head dim (64, 128, 256: config.hpp), which sizes every tile.
// Memory is the limit, so the kernel is a pipeline of cp.async copies: 64 keys of K and V codes
// (and scales) per stage, (stages - 1) stages in flight, two CTAs per SM (one at hdim 256).
// Each of the 4 warps owns 16 keys of every stage end to end: it reads their pages, copies
// them, widens them and multiplies them, with its own online softmax, so the warps never wait
// for each other inside the loop (only __syncwarp). Page numbers are read one iteration ahead
// of the copies that need them, so the block table's latency hides behind a tile of compute.
// Quantized codes are widened per stage into a bf16/fp16 tile (dequant.cuh) that the same
// ldmatrix + mma.sync code reads as a plain cache's tile. The warps merge through shared
// memory at the end (epilogue.cuh), then write the output, or the split's partial when the
// keys are split across CTAs.
//
// The body is the decode skeleton (skeleton.cuh) with the tile kernel's parts: its producer
// (tile_producer.cuh) and consumer (tile_consumer.cuh).
#pragma once

#include "sm90/decode/config.hpp"
#include "sm90/decode/params.hpp"
#include "sm90/decode/skeleton.cuh"
#include "sm90/decode/tile_consumer.cuh"
#include "sm90/decode/tile_producer.cuh"

namespace hfa::sm90::decode {

template <typename Element, Storage kStorage, int kHeadDim>
__global__ void __launch_bounds__(Config<kStorage, kHeadDim>::kThreads,
                                  Config<kStorage, kHeadDim>::kMinBlocksPerSM)
    decode_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  decode_cta<TileConsumer<Element, kStorage, kHeadDim>, TileProducer<Element, kStorage, kHeadDim>>(
      p, smem);
}

}  // namespace hfa::sm90::decode
