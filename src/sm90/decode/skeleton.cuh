// The decode skeleton: what every split-KV decode CTA does, whatever its cache format and math.
//   scheduler (work.cuh)   — the CTA's sequence, kv-head, query rows and split of keys;
//   consumer               — Q into registers or shared memory, then, per stage of keys, the
//                            scores, the online softmax (softmax.cuh) and P·V;
//   producer               — the stages' cache rows: pages, cp.async copies, widening;
//   epilogue (epilogue.cuh) — the warps' partials merged, out and lse or the split's partial,
//                            which the combine kernel (combine_kernel.cuh) merges.
// A kernel names its consumer and producer (kernel.cuh, stream_kernel.cuh); a new consumer (MLA's)
// brings its own pair and its configuration, and keeps the rest.
//
// The consumer is built before the producer: it owns the registers that live through the loop
// (Q's fragments, O, the softmax state) and is declared first, as the kernels always declared
// them; the loop's phis, and so the SASS, follow that order.
#pragma once

#include <type_traits>

#include "sm90/decode/epilogue.cuh"
#include "sm90/decode/params.hpp"
#include "sm90/decode/work.cuh"

namespace hfa::sm90::decode {

// Consumer and Producer agree on a configuration C (rows per tile, keys per stage, warps,
// threads, head dim and where the stage buffers start) and on the stage the producer hands over
// (Producer::acquire's result, Consumer::consume's argument).
template <typename Consumer, typename Producer>
__device__ __forceinline__ void decode_cta(const Params& p, unsigned char* smem) {
  using C = typename Consumer::C;
  static_assert(std::is_same_v<C, typename Producer::C>, "one configuration");
  const DecodeWork work = decode_work<C::kRowsPerTile, C::kBlockN>(p);
  // A tile past the sequence's rows has no row: no output, and no partial the combine reads.
  if (!work.has_rows()) return;

  Consumer consumer(p, work, smem);
  Producer producer(p, work, smem);
  producer.start();
  for (int t = 0; t < work.n_tiles; ++t) consumer.consume(t, producer.acquire(t));
  producer.finish();

  // The stage buffers, idle now, take each warp's normalized partial and LSE.
  const WarpPartials<C::kWarps, C::kRowsPerTile, C::kHeadDim> partials(smem + C::kStagesOffset);
  consumer.write_partial(partials);
  __syncthreads();
  merge_warps_and_store<typename Consumer::Element, C::kHeadDim, C::kRowsPerTile, C::kWarps,
                        C::kThreads>(p, work.seq, work.batch, work.kv_head, work.first_row,
                                     work.rows, work.split, partials, consumer.v_multiplier,
                                     Consumer::column_of);
}

}  // namespace hfa::sm90::decode
