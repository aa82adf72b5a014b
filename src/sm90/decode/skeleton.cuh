// The decode skeleton: what every split-KV decode CTA does, whatever its cache format and math.
//   scheduler (work.cuh)   — the CTA's sequence, kv-head, query rows and split of keys (or,
//                            warp-specialized, the pieces of its part of a balanced schedule);
//   consumer               — Q into registers or shared memory, then, per stage of keys, the
//                            scores, the online softmax (softmax.cuh) and P·V;
//   producer               — the stages' cache rows: pages, cp.async copies, widening;
//   epilogue (epilogue.cuh) — the warps' partials merged, out and lse or the split's partial,
//                            which the combine kernel (combine_kernel.cuh) merges.
// A kernel names its consumer and producer (kernel.cuh, stream_kernel.cuh); a new consumer (MLA's)
// brings its own pair and its configuration, and keeps the rest.
//
// decode_cta runs every thread as consumer and producer in turn (the warps split the keys and
// merge at the end). decode_cta_warp_specialized gives the roles to different warps: producer
// warps that only load, consumer warpgroups that only compute and that split O's columns rather
// than the keys, so each row's output is whole in one CTA and leaves without a merge (MLA's
// wgmma kernel, mla_kernel.cuh); its CTA may be persistent, walking several pieces.
//
// The consumer is built before the producer: it owns the registers that live through the loop
// (Q's fragments, O, the softmax state) and is declared first, as the kernels always declared
// them; the loop's phis, and so the SASS, follow that order.
#pragma once

#include <type_traits>

#include "sm90/common/swizzled_tile.cuh"
#include "sm90/decode/epilogue.cuh"
#include "sm90/decode/params.hpp"
#include "sm90/decode/work.cuh"
#include "sm90/ptx/grid_dependency.cuh"
#include "sm90/ptx/mbarrier.cuh"
#include "sm90/ptx/registers.cuh"

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

// The warp-specialized CTA. C names the shared storage (C::Storage), the threads that consume
// (the first C::kConsumerThreads: whole warpgroups, as wgmma needs; the producer warpgroups
// follow), the registers each role keeps (setmaxnreg: the producers give back what the
// consumers claim), the position in the stages both roles walk (C::Ring), how many tiles a
// consumer step takes (C::kTilesPerStep, from tile t; fewer at the piece's end) and
// C::init_barriers, which thread 0 runs before any role starts. The CTA walks its pieces of work
// (WorkWalk, work.cuh: one, or a persistent CTA's part of the balanced schedule), each role
// building its part of a piece where the piece before left the ring, so that the producer
// loads the next piece's tiles while the consumers finish the last. The producer gets what it
// loads from (Producer::Source: a tensor map, say) besides the parameters; it leaves when its
// last load is issued, and the consumers wait for every byte on their own barriers. The
// consumer's finish() is the epilogue: its rows' outputs (out and lse, or the piece's partial),
// which the combine kernels read, and the ring's last stage given back.
template <typename Consumer, typename Producer>
__device__ __forceinline__ void decode_cta_warp_specialized(
    const Params& p, const typename Producer::Source& source, unsigned char* smem) {
  using C = typename Consumer::C;
  static_assert(std::is_same_v<C, typename Producer::C>, "one configuration");
  auto& storage = shared_storage<typename C::Storage>(smem);
  if (threadIdx.x == 0) C::init_barriers(storage);
  ptx::fence_barrier_init();
  __syncthreads();
  // Launched dependent on the schedule kernel (the balanced schedule, mla_launch.cuh): its
  // schedule is complete past this wait. Launched plainly (the uniform plan), it returns at once.
  ptx::wait_for_prior_grid();

  // Every thread walks the same pieces: no barrier below is left waiting for a role.
  WorkWalk<C::kRowsPerTile, C::kBlockN> walk(p);
  DecodeWork work;
  typename C::Ring ring;
  if (int(threadIdx.x) >= C::kConsumerThreads) {
    ptx::release_registers<C::kProducerRegisters>();
    while (walk.next(&work)) {
      Producer producer(p, work, storage, source, ring);
      producer.run();
      ring = producer.ring;
    }
    return;
  }
  ptx::claim_registers<C::kConsumerRegisters>();
  while (walk.next(&work)) {
    Consumer consumer(p, work, storage, ring);
    consumer.start();
    for (int t = 0; t < work.n_tiles; t += C::kTilesPerStep) consumer.consume(t);
    consumer.finish();
    ring = consumer.ring;
  }
  // The combine after this grid may launch now (its CTAs take the SMs this grid leaves, and
  // wait for the whole grid before they read a partial).
  ptx::allow_dependent_launch();
}

}  // namespace hfa::sm90::decode
