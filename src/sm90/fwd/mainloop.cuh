// A consumer warpgroup's work on one tile: 64 rows of Q against every visible K/V block.
//
// Steady state, per block n (FlashAttention-3's intra-warpgroup overlap):
//   issue S = Q·K(n)ᵀ, issue O += P(n+1)·V(n+1), wait for S only, softmax S → P(n) while the
//   P·V GEMM still runs, wait for it, rescale O.
// The issue of both GEMMs sits between a wait and a pass of the warp-scheduler barrier, so the
// consumer warpgroups take turns (ping-pong): one's GEMMs run while the others do softmax.
#pragma once

#include "sm90/fwd/mask.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/shared_storage.cuh"
#include "sm90/common/softcap.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/named_barrier.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/wgmma.cuh"

namespace hfa::sm90::fwd {

template <typename Config, typename Element>
struct ConsumerMainloop {
  using Storage = SharedStorage<Config, Element>;
  using Ring = ptx::RingPosition<Config::kStages>;
  static constexpr int kSAcc = Config::kBlockN / 2;   // S: 64 × kBlockN fp32 over 128 threads
  static constexpr int kOAcc = Config::kHeadDimV / 2;  // O: 64 × kHeadDimV fp32
  static constexpr int kPRegs = Config::kBlockN / 4;  // P: 64 × kBlockN 16-bit, two a register
  static constexpr int kKSteps = kSlabColumns / kMmaK;  // k16 steps inside one 128-byte slab
  static constexpr uint32_t kKStepBytes = kMmaK * sizeof(Element);
  static constexpr uint32_t kVStepBytes = kMmaK * ptx::kSwizzleBytes;  // 16 rows of V
  static constexpr int kWarpgroups = Config::kConsumerWarpgroups;
  static constexpr uint32_t kPingPongThreads = 2 * kThreadsPerWarpgroup;

  const Params& p;
  Storage& smem;
  int warpgroup;  // among the consumers
  int thread;     // within the warpgroup
  Ring k_ring;
  Ring v_ring;
  uint32_t q_phase = 0;

  // The first warpgroup issues first: another one opens its barrier once at start.
  __device__ __forceinline__ void start_ping_pong() {
    if (warpgroup == kWarpgroups - 1) {
      ptx::named_barrier_arrive(ptx::barrier_id(ptx::NamedBarrier::warp_scheduler, 0),
                                kPingPongThreads);
    }
  }
  __device__ __forceinline__ void wait_turn() {
    ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::warp_scheduler, warpgroup),
                            kPingPongThreads);
  }
  __device__ __forceinline__ void pass_turn() {
    const int next = (warpgroup + 1) % kWarpgroups;
    ptx::named_barrier_arrive(ptx::barrier_id(ptx::NamedBarrier::warp_scheduler, next),
                              kPingPongThreads);
  }

  // One lane per warp signals that the warpgroup is done with a buffer (arrival count 4 per
  // warpgroup): cheaper than 128 arrivals, and no warp is assumed to speak for another.
  __device__ __forceinline__ void release(ptx::Mbarrier& empty) {
    if (thread % 32 == 0) empty.arrive();
  }

  __device__ __forceinline__ void issue_qk(float (&s)[kSAcc], int stage) {
    const uint32_t q_base = ptx::smem_address(smem.q.data) +
                            warpgroup * kRowsPerWarpgroup * ptx::kSwizzleBytes;
    const uint32_t k_base = ptx::smem_address(smem.k[stage].data);
    ptx::fence_operands(s);
    ptx::fence();
#pragma unroll
    for (int slab = 0; slab < Config::kSlabsQK; ++slab) {
#pragma unroll
      for (int step = 0; step < kKSteps; ++step) {
        const uint32_t offset = step * kKStepBytes;
        const uint64_t a = ptx::kmajor_descriptor(q_base + slab * Storage::QTile::kSlabBytes + offset);
        const uint64_t b = ptx::kmajor_descriptor(k_base + slab * Storage::KTile::kSlabBytes + offset);
        ptx::mma_ss<Config::kBlockN, Element>(s, a, b, slab > 0 || step > 0);
      }
    }
    ptx::commit_group();
  }

  __device__ __forceinline__ void issue_pv(float (&o)[kOAcc], uint32_t (&pm)[kPRegs], int stage) {
    const uint32_t v_base = ptx::smem_address(smem.v[stage].data);
    ptx::fence_operands(o);
    ptx::fence_operands(pm);
    ptx::fence();
#pragma unroll
    for (int step = 0; step < Config::kBlockN / kMmaK; ++step) {
      const uint64_t b = ptx::mnmajor_descriptor(v_base + step * kVStepBytes, Storage::VTile::kSlabBytes);
      ptx::mma_rs<Config::kHeadDimV, Element>(
          o, *reinterpret_cast<const uint32_t(*)[4]>(&pm[4 * step]), b, true);
    }
    ptx::commit_group();
  }

  // Softcaps S, masks it where block n_block needs it (after the softcap: tanh(−inf) is not
  // −inf), then turns it into unnormalized probabilities.
  __device__ __forceinline__ void softmax_step(float (&s)[kSAcc], OnlineSoftmax& softmax,
                                               float (&rescale)[2], const WorkTile& tile,
                                               int n_block, const ptx::FragmentCoords& at) {
    if constexpr (Config::kSoftcap) apply_softcap(s, p.softcap_prescale);
    if (block_needs_mask<Config>(p, tile, n_block)) {
      const int row0 = tile.m_block * Config::kBlockM + warpgroup * kRowsPerWarpgroup + at.row0;
      apply_mask<Config::kWindowed>(s, row0, n_block * Config::kBlockN + at.column_pair, tile.seq, p);
      softmax.update<Config::kRescaleThreshold, 0>(s, p.scale_log2, rescale);
    } else {
      softmax.update<Config::kRescaleThreshold, Config::kExp2EmulateEvery>(s, p.scale_log2, rescale);
    }
  }

  // Keys past seqused_k may hold anything in v, NaN included: their probabilities are 0, but
  // 0·NaN is NaN in the tensor cores. Before the P·V of a sequence's last key block, each
  // consumer warpgroup zeroes those rows itself (zeros over zeros: no race between them). The
  // walk goes from the last block down, so that is the first V block of the tile.
  __device__ __forceinline__ void zero_v_padding(int stage, int n_block, const Sequence& seq) {
    const int valid = seq.seqlen_k - n_block * Config::kBlockN;
    if (p.seqused_k == nullptr || valid >= Config::kBlockN) return;
    zero_rows_from(smem.v[stage], valid, thread, kThreadsPerWarpgroup);
    ptx::fence_proxy_async_smem();
    ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::v_padding_zeroed, warpgroup),
                            kThreadsPerWarpgroup);
  }

  // Leaves the unnormalized O of the tile in o and the row statistics in softmax.
  __device__ void run(const WorkTile& tile, const BlockRange& blocks, float (&o)[kOAcc],
                      OnlineSoftmax& softmax) {
    softmax.reset();
    smem.q_full.wait(q_phase);
    q_phase ^= 1;
    // With seqused_k, the first V block (the sequence's last keys) is made safe before the
    // walk, while no accumulator is live: in the main loop it cost registers (spills at hdim
    // 256).
    if (p.seqused_k != nullptr && blocks.count() > 0) {
      smem.v_full[v_ring.stage].wait(v_ring.phase);
      zero_v_padding(v_ring.stage, blocks.end - 1, tile.seq);
    }
#pragma unroll
    for (int i = 0; i < kOAcc; ++i) o[i] = 0.0f;
    if (blocks.count() == 0) {
      release(smem.q_empty);
      return;
    }

    const ptx::FragmentCoords at = ptx::fragment_coords(thread);
    float s[kSAcc];
    uint32_t pm[kPRegs];
    float rescale[2];

    int n = blocks.end - 1;
    smem.k_full[k_ring.stage].wait(k_ring.phase);
    wait_turn();
    issue_qk(s, k_ring.stage);
    pass_turn();
    ptx::wait_group<0>();
    ptx::fence_operands(s);
    release(smem.k_empty[k_ring.stage]);
    k_ring.advance();
    if (blocks.count() == 1) release(smem.q_empty);  // that was the tile's last Q·Kᵀ
    softmax_step(s, softmax, rescale, tile, n, at);
    ptx::accumulator_to_operand<Element>(s, pm);

    for (--n; n >= blocks.begin; --n) {
      smem.k_full[k_ring.stage].wait(k_ring.phase);
      wait_turn();
      issue_qk(s, k_ring.stage);
      smem.v_full[v_ring.stage].wait(v_ring.phase);
      issue_pv(o, pm, v_ring.stage);
      pass_turn();
      ptx::wait_group<1>();  // S is ready; P·V may still run
      ptx::fence_operands(s);
      release(smem.k_empty[k_ring.stage]);
      k_ring.advance();
      if (n == blocks.begin) release(smem.q_empty);  // the next tile's Q may load now
      softmax_step(s, softmax, rescale, tile, n, at);
      ptx::wait_group<0>();
      ptx::fence_operands(o);
      ptx::fence_operands(pm);
      release(smem.v_empty[v_ring.stage]);
      v_ring.advance();
      if (Config::kRescaleThreshold == 0 || any_rescale(rescale)) scale_rows(o, rescale);
      ptx::accumulator_to_operand<Element>(s, pm);
    }

    smem.v_full[v_ring.stage].wait(v_ring.phase);
    issue_pv(o, pm, v_ring.stage);
    ptx::wait_group<0>();
    ptx::fence_operands(o);
    release(smem.v_empty[v_ring.stage]);
    v_ring.advance();
  }
};

}  // namespace hfa::sm90::fwd
