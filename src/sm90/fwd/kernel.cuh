// The forward kernel: one persistent CTA per SM, split by role.
//   warpgroup 0 — the producer: one thread issues every TMA load; registers given back. With
//     the FP8 V transpose in the kernel (VTransposingTileConfig), its other three warps
//     transpose each V block (v_transposer.cuh).
//   warpgroups 1.. — consumers: 64 query rows each, wgmma + online softmax + epilogue.
#pragma once

#include "sm90/fwd/epilogue.cuh"
#include "sm90/fwd/mainloop.cuh"
#include "sm90/fwd/producer.cuh"
#include "sm90/fwd/v_transposer.cuh"
#include "sm90/common/warpgroup.cuh"
#include "sm90/ptx/registers.cuh"

namespace hfa::sm90::fwd {

template <typename Config>
__global__ void __launch_bounds__(Config::kThreads, 1)
    forward_kernel(const __grid_constant__ Params p) {
  using Storage = SharedStorage<Config>;
  extern __shared__ uint8_t dynamic_smem[];
  Storage& smem = shared_storage<Storage>(dynamic_smem);

  const int warpgroup = warpgroup_index();
  const int thread = thread_in_warpgroup();
  constexpr int kWarpsPerConsumerGroup = kThreadsPerWarpgroup / 32;
  constexpr int kConsumers = Config::kConsumerWarpgroups;

  if (threadIdx.x == 0) {
    for (int stage = 0; stage < Storage::kQStages; ++stage) {
      smem.q_full[stage].init(1);
      smem.q_empty[stage].init(kConsumers * kWarpsPerConsumerGroup);
    }
    // V stages fill by TMA (one arrival with its bytes) or by the transposing warps (one
    // arrival each).
    constexpr int kVWriters = Config::kTransposesVInKernel ? Config::kTransposingWarps : 1;
    for (int stage = 0; stage < Config::kStages; ++stage) {
      smem.k_full[stage].init(1);
      smem.v_full[stage].init(kVWriters);
      smem.k_empty[stage].init(kConsumers * kWarpsPerConsumerGroup);
      smem.v_empty[stage].init(kConsumers * kWarpsPerConsumerGroup);
    }
    for (int slot = 0; slot < Storage::kTileSlots; ++slot) {
      smem.tile_full[slot].init(1);
      smem.tile_empty[slot].init(kConsumers * kWarpsPerConsumerGroup);
    }
    if constexpr (Config::kTransposesVInKernel) {
      for (int stage = 0; stage < Storage::kStagingStages; ++stage) {
        smem.staging.full[stage].init(1);
        smem.staging.empty[stage].init(Config::kTransposingWarps);
      }
    }
    ptx::fence_barrier_init();
    ptx::prefetch_tensor_map(&p.q_map);
    ptx::prefetch_tensor_map(&p.k_map);
    ptx::prefetch_tensor_map(&p.v_map);
    if constexpr (Storage::kStagesOut) {
      if (p.out_by_tma) ptx::prefetch_tensor_map(&p.out_map);
    }
  }
  fill_ones(smem);
  __syncthreads();

  if (warpgroup == 0) {
    ptx::release_registers<Config::kProducerRegisters>();
    if (thread == 0) Producer<Config>{p, smem}.run();
    if constexpr (Config::kTransposesVInKernel) {
      if (thread >= 32) VTransposer<Config>{smem, thread / 32 - 1, thread % 32}.run();
    }
    return;
  }

  ptx::claim_registers<Config::kConsumerRegisters>();
  ConsumerMainloop<Config> mainloop{p, smem, warpgroup - 1, thread};
  Epilogue<Config> epilogue{p, smem, warpgroup - 1, thread};
  mainloop.start_ping_pong();
  float o[ConsumerMainloop<Config>::kOAcc];
  OnlineSoftmax softmax;
  for (ptx::RingPosition<Storage::kTileSlots> slot;; slot.advance()) {
    smem.tile_full[slot.stage].wait(slot.phase);
    const int index = smem.tile_slot[slot.stage];
    if (thread % 32 == 0) smem.tile_empty[slot.stage].arrive();
    if (index >= p.num_tiles) break;
    const WorkTile tile = decode_tile<Config>(p, index);
    const TileBlocks<Config> blocks = block_range<Config>(p, tile);
    mainloop.run(tile, blocks, o, softmax);
    epilogue.store(tile, o, softmax, mainloop.scale_log2(), mainloop.value_scale(tile, blocks));
  }
  epilogue.finish();
}

}  // namespace hfa::sm90::fwd
