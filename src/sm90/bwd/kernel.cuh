// The backward's main kernel: one CTA per key block (scheduler.cuh), split by role.
//   warpgroup 0 — the producer: the loader thread (TMA) and, where dQ goes through shared
//                 memory, the dQ writer thread; registers given back.
//   warpgroups 1, 2 — consumers: the steps of mainloop.cuh (mainloop_transposed.cuh where the
//                 gradients are transposed), then the dK/dV epilogue.
#pragma once

#include <type_traits>

#include "sm90/bwd/epilogue.cuh"
#include "sm90/bwd/mainloop.cuh"
#include "sm90/bwd/mainloop_transposed.cuh"
#include "sm90/bwd/producer.cuh"
#include "sm90/common/warpgroup.cuh"
#include "sm90/ptx/registers.cuh"

namespace hfa::sm90::bwd {

template <typename Config, typename Element, int kWarpgroup>
using MainloopOf = std::conditional_t<Config::kTransposedGradients,
                                      TransposedGradientMainloop<Config, Element, kWarpgroup>,
                                      ConsumerMainloop<Config, Element, kWarpgroup>>;

template <typename Config, typename Element, int kWarpgroup>
__device__ __forceinline__ void consume(const Params& p, SharedStorage<Config, Element>& smem,
                                        const KeyTile& tile, const TileSteps<Config>& blocks,
                                        int thread) {
  using Mainloop = MainloopOf<Config, Element, kWarpgroup>;
  Mainloop mainloop{p, smem, thread};
  float dk[Mainloop::kDkAcc], dv[Mainloop::kDvAcc];
#pragma unroll
  for (int i = 0; i < Mainloop::kDkAcc; ++i) dk[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < Mainloop::kDvAcc; ++i) dv[i] = 0.0f;
  if (blocks.count() > 0) {
    smem.kv_full.wait(0);
    mainloop.zero_key_padding(tile);
    if constexpr (Config::kBlockSparse) {
      for_each_sparse_step<Config>(
          p, tile, blocks,
          [&](int head, int m, const SparseQueryBlocks& list, int position) {
            mainloop.load_sparse_mask(list, position, m);
            mainloop.step(tile, head, m, dk, dv);
          });
    } else if constexpr (Config::kTakesTurns) {
      // dQ a step late (mainloop.cuh): warpgroup 0 takes the first turn, and the last step's
      // dQ follows the walk.
      mainloop.begin_turns();
      for_each_step<Config>(p, tile, blocks,
                            [&](int head, int m) { mainloop.lagged_step(tile, head, m, dk, dv); });
      mainloop.end_turns();
    } else {
      for_each_step<Config>(p, tile, blocks,
                            [&](int head, int m) { mainloop.step(tile, head, m, dk, dv); });
    }
  }
  Epilogue<Config, Element, kWarpgroup>{p, smem, thread}.run(dk, dv, tile);
}

template <typename Config, typename Element>
__global__ void __launch_bounds__(Config::kThreads, 1) backward_kernel(const __grid_constant__ Params p) {
  using Storage = SharedStorage<Config, Element>;
  static_assert(shared_memory_fits<Storage>, "shared memory: 227 KB a CTA at most");
  extern __shared__ uint8_t dynamic_smem[];
  Storage& smem = shared_storage<Storage>(dynamic_smem);
  constexpr int kWarpsPerConsumers = Config::kConsumerWarpgroups * kThreadsPerWarpgroup / 32;

  const KeyTile tile = Scheduler<Config>::tile(p, blockIdx.x);
  if (tile.n_block * Config::kBlockN >= tile.allocated_k) return;  // no key of this sequence
  const TileSteps<Config> blocks = Scheduler<Config>::query_range(p, tile);
  const int warpgroup = warpgroup_index();
  const int thread = thread_in_warpgroup();

  if (threadIdx.x == 0) {
    smem.kv_full.init(1);
    for (int stage = 0; stage < Config::kStagesQ; ++stage) {
      smem.q_full[stage].init(1);
      smem.q_empty[stage].init(Config::kStageReleasers);
    }
    for (int stage = 0; stage < Config::kStagesDO; ++stage) {
      smem.do_full[stage].init(1);
      smem.do_empty[stage].init(Config::kStageReleasers);
    }
    if constexpr (!Config::kDqFromRegisters) {
      for (int stage = 0; stage < Config::kStagesDq; ++stage) {
        smem.dq_full[stage].init(kWarpsPerConsumers);
        smem.dq_empty[stage].init(1);
      }
    }
    if constexpr (Config::kTakesTurns) {
      for (auto& warpgroup : smem.step_done) {
        for (ptx::Mbarrier& stage : warpgroup) stage.init(kThreadsPerWarpgroup / 32);
      }
    }
    ptx::fence_barrier_init();
    ptx::prefetch_tensor_map(&p.q_map);
    ptx::prefetch_tensor_map(&p.k_map);
    ptx::prefetch_tensor_map(&p.v_map);
    ptx::prefetch_tensor_map(&p.do_map);
  }
  __syncthreads();

  if (warpgroup == 0) {
    ptx::release_registers<Config::kProducerRegisters>();
    if (blocks.count() > 0) {
      if (thread == 0) Loader<Config, Element>{p, smem}.run(tile, blocks);
      if constexpr (!Config::kDqFromRegisters) {  // else the consumers add it
        if (thread == 32) DqWriter<Config, Element>{p, smem}.run(tile, blocks);
      }
    }
    return;
  }

  ptx::claim_registers<Config::kConsumerRegisters>();
  if (warpgroup == 1) consume<Config, Element, 0>(p, smem, tile, blocks, thread);
  else consume<Config, Element, 1>(p, smem, tile, blocks, thread);
}

}  // namespace hfa::sm90::bwd
