// A consumer warpgroup's work on one tile: 64 rows of Q against every visible K/V block.
//
// Steady state, per block n (FlashAttention-3's intra-warpgroup overlap):
//   issue S = Q·K(n)ᵀ, issue O += P(n+1)·V(n+1), wait for S only, softmax S → P(n) while the
//   P·V GEMM still runs, wait for it, rescale O (with TileConfig::kBranchFreeStep O's rescale
//   comes between the next block's two issues instead).
// The issue of both GEMMs sits between a wait and a pass of the warp-scheduler barrier, so the
// consumer warpgroups take turns (ping-pong): one's GEMMs run while the others do softmax.
// FP8 (e4m3 q, k, v): the same walk on k32 steps, P as e4m3 codes, V transposed, and the codes'
// scales where fp8_scales.cuh puts them.
#pragma once

#include <type_traits>

#include "sm90/fwd/fp8_scales.cuh"
#include "sm90/fwd/mask.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/shared_storage.cuh"
#include "sm90/common/score_mods.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/ptx/fragment.cuh"
#include "sm90/ptx/named_barrier.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/wgmma.cuh"

namespace hfa::sm90::fwd {

template <typename Config>
struct ConsumerMainloop {
  using Element = typename Config::Element;
  using Storage = SharedStorage<Config>;
  using Ring = ptx::RingPosition<Config::kStages>;
  static constexpr int kMmaK = Config::kMmaK;
  static constexpr int kSAcc = Config::kBlockN / 2;   // S: 64 × kBlockN fp32 over 128 threads
  static constexpr int kOAcc = Config::kHeadDimV / 2;  // O: 64 × kHeadDimV fp32
  // P·1 (Config::kRowSumsByMma): 64 × 8 fp32, each column a whole row's sum over one block
  static constexpr int kSumAcc = kRowSumColumns / 2;
  // P: 64 × kBlockN elements, two 16-bit or four e4m3 a register
  static constexpr int kPRegs = Config::kBlockN * int(sizeof(Element)) / 8;
  static constexpr int kKSteps = Config::kSlabColumns / kMmaK;  // k-steps inside one slab
  static constexpr uint32_t kKStepBytes = kMmaKBytes;
  static constexpr uint32_t kVStepBytes = kMmaK * ptx::kSwizzleBytes;  // 16 rows of V (16-bit)
  static constexpr int kWarpgroups = Config::kConsumerWarpgroups;
  static constexpr uint32_t kPingPongThreads = 2 * kThreadsPerWarpgroup;

  const Params& p;
  Storage& smem;
  int warpgroup;  // among the consumers
  int thread;     // within the warpgroup
  Ring k_ring;
  Ring v_ring;
  ptx::RingPosition<Storage::kQStages> q_ring;
  uint32_t q_address = 0;  // the warpgroup's rows of the tile's Q buffer
  // FP8 only (fp8_scales.cuh): the tile's softmax scales, its kv head, and the q scales of the
  // thread's two rows when S carries them (Params::fp8_row_scales).
  ScoreScales scales{};
  int kv_head = 0;
  float q_rows[2] = {1.0f, 1.0f};

  // The first warpgroup issues first: another one opens its barrier once at start. FP8 takes
  // turns too, though its softmax phase outlasts its GEMMs: without turns, FP8 hdim 128 ran
  // 8-27 % slower from 8k keys (docs/decisions/019).
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
  // After the tile's last Q·Kᵀ: its Q buffer may take a later tile's Q.
  __device__ __forceinline__ void release_q() {
    release(smem.q_empty[q_ring.stage]);
    q_ring.advance();
  }

  // Where the tile's Q is, as one value a warp: the stage is shuffled from lane 0, so that the
  // Q descriptors derived from it live in uniform registers (as the warpgroup index does,
  // kernel.cuh).
  __device__ __forceinline__ uint32_t tile_q_address() const {
    const int stage = Storage::kQStages == 1 ? 0 : __shfl_sync(0xffffffffu, q_ring.stage, 0);
    return ptx::smem_address(smem.q[stage].data) +
           warpgroup * kRowsPerWarpgroup * ptx::kSwizzleBytes;
  }

  __device__ __forceinline__ void issue_qk(float (&s)[kSAcc], int stage) {
    const uint64_t q = ptx::kmajor_descriptor(q_address);
    const uint64_t k = ptx::kmajor_descriptor(ptx::smem_address(smem.k[stage].data));
    ptx::fence_operands(s);
    ptx::fence();
#pragma unroll
    for (int slab = 0; slab < Config::kSlabsQK; ++slab) {
#pragma unroll
      for (int step = 0; step < kKSteps; ++step) {
        const uint32_t offset = step * kKStepBytes;
        const uint64_t a = ptx::advance(q, slab * Storage::QTile::kSlabBytes + offset);
        const uint64_t b = ptx::advance(k, slab * Storage::KTile::kSlabBytes + offset);
        ptx::mma_ss<Config::kBlockN, Element>(s, a, b, slab > 0 || step > 0);
      }
    }
    ptx::commit_group();
  }

  // V's descriptor at the tile's start: MN-major rows of V, or K-major transposed V (FP8); and
  // the byte offset of k-step `step` of P·V from there.
  __device__ __forceinline__ static uint64_t v_descriptor(uint32_t v_base) {
    if constexpr (Config::kFp8) {
      return ptx::kmajor_descriptor(v_base);
    } else {
      return ptx::mnmajor_descriptor(v_base, Storage::VTile::kSlabBytes);
    }
  }
  __device__ __forceinline__ static constexpr uint32_t v_step_offset(int step) {
    if constexpr (Config::kFp8) {
      return Storage::VTile::kmajor_step_offset(step);
    } else {
      return step * kVStepBytes;
    }
  }

  // O += P·V and, with kRowSumsByMma, sums = P·1 (one block's: softmax.add_block_sums carries
  // the sums across blocks in fp32), as one batch.
  __device__ __forceinline__ void issue_pv(float (&o)[kOAcc], float (&sums)[kSumAcc],
                                           uint32_t (&pm)[kPRegs], int stage) {
    const uint64_t v = v_descriptor(ptx::smem_address(smem.v[stage].data));
    ptx::fence_operands(o);
    ptx::fence_operands(sums);
    ptx::fence_operands(pm);
    ptx::fence();
#pragma unroll
    for (int step = 0; step < Config::kBlockN / kMmaK; ++step) {
      const uint64_t b = ptx::advance(v, v_step_offset(step));
      ptx::mma_rs<Config::kHeadDimV, Element>(
          o, *reinterpret_cast<const uint32_t(*)[4]>(&pm[4 * step]), b, true);
    }
    if constexpr (Config::kRowSumsByMma) {
      const uint64_t ones = ptx::kmajor_descriptor(ptx::smem_address(smem.ones.data));
#pragma unroll
      for (int step = 0; step < Config::kBlockN / kMmaK; ++step) {
        const uint64_t b = ptx::advance(ones, Storage::OnesTile::kmajor_step_offset(step));
        ptx::mma_rs<kRowSumColumns, Element>(
            sums, *reinterpret_cast<const uint32_t(*)[4]>(&pm[4 * step]), b, step > 0);
      }
    }
    ptx::commit_group();
  }

  // ---- FP8 scales (fp8_scales.cuh): loaded where their latency hides, applied where they fold.
  // The factors of one key block: of its scores, when they are not one number for the tile
  // (Params::fp8_row_scales), and of its values, when v has per-block scales (O then changes
  // units from block to block).
  struct BlockScales {
    float score[2] = {1.0f, 1.0f};  // of the thread's two rows
    float value = 1.0f;
  };

  __device__ __forceinline__ BlockScales block_scales(const WorkTile& tile, int n_block) const {
    BlockScales b;
    if constexpr (Config::kFp8) {
      if (p.fp8_row_scales) {
        const float k = key_block_scale<Config>(p.k_descale, tile, n_block, kv_head);
        b.score[0] = q_rows[0] * k;
        b.score[1] = q_rows[1] * k;
      }
      if (p.v_descale.block_rows > 0) {
        b.value = key_block_scale<Config>(p.v_descale, tile, n_block, kv_head);
      }
    }
    return b;
  }

  // Before O takes block n's P·V: O is in units of block n + 1's v scale (previous), and goes
  // to block n's.
  __device__ __forceinline__ void change_value_units(float (&rescale)[2],
                                                     const BlockScales& previous,
                                                     const BlockScales& block) const {
    if constexpr (Config::kFp8) {
      if (p.v_descale.block_rows > 0) {
        const float ratio = previous.value / block.value;
        rescale[0] *= ratio;
        rescale[1] *= ratio;
      }
    }
  }

  // What O's units are after the tile's last P·V: v's scale of the last block walked (FP8).
  __device__ __forceinline__ float value_scale(const WorkTile& tile,
                                               const TileBlocks<Config>& blocks) const {
    if constexpr (Config::kFp8) {
      const int last_block = p.v_descale.block_rows > 0 ? blocks.begin : 0;
      return key_block_scale<Config>(p.v_descale, tile, last_block, kv_head);
    }
    return 1.0f;
  }

  // The softmax's scales: the tile's with FP8, the problem's otherwise.
  __device__ __forceinline__ float scale_log2() const {
    return Config::kFp8 ? scales.scale_log2 : p.scale_log2;
  }
  __device__ __forceinline__ float softcap_prescale() const {
    return Config::kFp8 ? scales.softcap_prescale : p.softcap_prescale;
  }

  // The tile row (packed with PackGQA) of the thread's first row, the second 8 below; and the
  // key of its first column in block n_block, the others at fragment_column(i, 0) from it.
  __device__ __forceinline__ int fragment_row0(const WorkTile& tile,
                                               const ptx::FragmentCoords& at) const {
    return tile.m_block * Config::kBlockM + warpgroup * kRowsPerWarpgroup + at.row0;
  }
  __device__ __forceinline__ static int fragment_key0(int n_block, const ptx::FragmentCoords& at) {
    return n_block * Config::kBlockN + at.column_pair;
  }

  // The FP8 tile's scales that stay for the whole tile.
  __device__ __forceinline__ void start_tile(const WorkTile& tile) {
    static_assert(Config::kFp8);
    kv_head = (tile.head << p.pack_shift) / p.heads_per_kv;
    scales = score_scales(p, tile, kv_head);
    if (p.fp8_row_scales) {
      const int row0 = fragment_row0(tile, ptx::fragment_coords(thread));
      q_rows[0] = q_row_scale(p, tile, row0);
      q_rows[1] = q_row_scale(p, tile, row0 + 8);
    }
  }

  // A positional policy's modifiers of the thread's two rows (ALiBi: their heads' slopes, which
  // differ under PackGQA), loaded once a tile before its first GEMM, which hides the loads'
  // latency. The other kernels keep nothing: even an unused member of this struct moved the FP8
  // kernels' spill slots.
  struct RowMods {
    typename Config::Mods half[2];
  };
  struct NoRowMods {};
  using TileRowMods = std::conditional_t<Config::Mods::kPositional, RowMods, NoRowMods>;

  __device__ __forceinline__ TileRowMods row_mods_of(const WorkTile& tile) const {
    TileRowMods mods{};
    if constexpr (Config::Mods::kPositional) {
      const int row0 = fragment_row0(tile, ptx::fragment_coords(thread));
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        mods.half[half] = row_score_mods<typename Config::Mods>(
            p.alibi, tile.batch, head_of_row(p, tile, row0 + 8 * half));
      }
    }
    return mods;
  }

  // ---- Block-sparse (Config::kBlockSparse): the key block at a walk position and, when it is a
  // partial one, the bits of the thread's two rows, loaded at the top of a step as the FP8
  // scales are (their latency hides behind the GEMMs). Dense walks' positions are their blocks.
  struct SparseVisit {
    int key_block = 0;
    bool partial = false;
    FragmentBits<> bits;
  };
  struct DenseVisit {};
  using BlockVisit = std::conditional_t<Config::kBlockSparse, SparseVisit, DenseVisit>;

  __device__ __forceinline__ BlockVisit visit_at(const TileBlocks<Config>& blocks, int position,
                                                 const ptx::FragmentCoords& at) const {
    BlockVisit visit{};
    if constexpr (Config::kBlockSparse) {
      visit.key_block = blocks.key_block(position);
      visit.partial = blocks.is_partial(position);
      visit.bits = all_visible_bits();
      if (visit.partial) {
        const int row = warpgroup * kRowsPerWarpgroup + at.row0;  // within the mask's block
        const int32_t* const rows[2] = {blocks.bits_row(position, row),
                                        blocks.bits_row(position, row + 8)};
        visit.bits = load_fragment_bits(rows, at.column_pair);
      }
    }
    return visit;
  }

  // Whether the block at walk position n needs the element mask: keys some row of the tile must
  // not see by the window or the sequence's end, or a block-sparse mask's partial block.
  __device__ __forceinline__ bool block_masked(const WorkTile& tile, int n,
                                               const BlockVisit& visit) const {
    if constexpr (Config::kBlockSparse) {
      return visit.partial || block_needs_mask<Config>(p, tile, visit.key_block);
    } else {
      return block_needs_mask<Config>(p, tile, n);
    }
  }

  // Which blocks a copy of the softmax or of the step is for: unmasked, masked (the test taken
  // once a step, before the GEMMs' issue: Config::kBranchFreeStep), or either (the test inside
  // the softmax, after the score modifiers).
  enum class BlockMask { unmasked, masked, either };

  // Applies the score policy's modifiers to S (softcap or ALiBi), masks it where its key block
  // needs it (after the modifiers: tanh(−inf) is not −inf; a partial block of a block-sparse mask
  // ANDs its bits into the window's and the sequence's mask; a full one takes the unmasked path
  // like any inner block), then turns it into unnormalized probabilities.
  // n: the walk position, which is the key block unless block-sparse (visit.key_block). The
  // dense kernels take n as it is: even an inlined identity call there moved their SASS.
  // kMask masked or unmasked: the softmax has no branch of its own, and ptxas schedules the step
  // from the S wait to its end as one stretch, the second row's maximum, the conversion of P and
  // the FADDs between the exponentials (docs/decisions/043); between: see OnlineSoftmax::update.
  // either: the softmax is inlined into both arms of the test, as when the unmasked one took
  // other exponentials (exp2 on the FMA pipes, docs/decisions/002): one call after the if
  // compiled to other SASS.
  template <BlockMask kMask, typename Between = void (*)(float)>
  __device__ __forceinline__ void softmax_block(float (&s)[kSAcc], OnlineSoftmax& softmax,
                                                float (&rescale)[2], const WorkTile& tile, int n,
                                                const ptx::FragmentCoords& at,
                                                const BlockScales& block,
                                                const TileRowMods& row_mods,
                                                const BlockVisit& visit,
                                                Between&& between = [](float) {}) {
    int n_block = n;
    if constexpr (Config::kBlockSparse) n_block = visit.key_block;
    if constexpr (Config::kFp8) {
      if (p.fp8_row_scales) scale_rows(s, block.score);
    }
    using Mods = typename Config::Mods;
    if constexpr (Mods::kPositional) {
      float diagonal_column[2];
      fragment_diagonal(diagonal_column, fragment_row0(tile, at), fragment_key0(n_block, at),
                        tile.seq, p);
      apply_score_mods(s, row_mods.half, diagonal_column);
    } else {
      apply_score_mods(s, score_mods<Mods>(softcap_prescale()));
    }
    constexpr int kOffset = Config::kMaxOffset;
    constexpr bool kSumRows = !Config::kRowSumsByMma;
    if constexpr (kMask == BlockMask::either) {
      if (block_masked(tile, n, visit)) {
        mask_block(s, tile, n_block, at, visit);
        softmax.update<kOffset, kSumRows, false>(s, scale_log2(), rescale, between);
      } else {
        softmax.update<kOffset, kSumRows, false>(s, scale_log2(), rescale, between);
      }
    } else {
      if constexpr (kMask == BlockMask::masked) mask_block(s, tile, n_block, at, visit);
      softmax.update<kOffset, kSumRows, true>(s, scale_log2(), rescale, between);
    }
  }

  // The element mask of key block n_block: the window's and the sequence's, and a block-sparse
  // mask's bits. A member function, not a lambda in softmax_block: the lambda reordered the ring
  // updates in the FP8 kernels' PTX, and their SASS moved off main's.
  // A partial block that neither the window nor the sequence's end cuts takes its bits alone:
  // the bounds' compares per element made a partial block cost 1.6x a full one at hdim 64.
  __device__ __forceinline__ void mask_block(float (&s)[kSAcc], const WorkTile& tile, int n_block,
                                             const ptx::FragmentCoords& at,
                                             const BlockVisit& visit) const {
    if constexpr (Config::kBlockSparse) {
      if (!block_needs_mask<Config>(p, tile, n_block)) {
        mask_clear_bits(s, visit.bits);
        return;
      }
    }
    apply_mask<Config::kWindowed>(s, fragment_row0(tile, at), fragment_key0(n_block, at), tile.seq,
                                  p);
    if constexpr (Config::kBlockSparse) mask_clear_bits(s, visit.bits);
  }

  // Keys past seqused_k may hold anything in v, NaN included: their probabilities are 0, but
  // 0·NaN is NaN in the tensor cores. Before the P·V of a sequence's last key block, each
  // consumer warpgroup zeroes those rows itself (zeros over zeros: no race between them). The
  // walk goes from the last block down, so that is the first V block of the tile.
  __device__ __forceinline__ void zero_v_padding(int stage, int n_block, const Sequence& seq) {
    static_assert(!Config::kFp8, "FP8: the transposed copy of V has zeros there already");
    const int valid = seq.seqlen_k - n_block * Config::kBlockN;
    if (p.seqused_k == nullptr || valid >= Config::kBlockN) return;
    zero_rows_from(smem.v[stage], valid, thread, kThreadsPerWarpgroup);
    ptx::fence_proxy_async_smem();
    ptx::named_barrier_sync(ptx::barrier_id(ptx::NamedBarrier::v_padding_zeroed, warpgroup),
                            kThreadsPerWarpgroup);
  }

  // O's rescale by a block's factors (rescale): once the P·V before is done, before the block's
  // own is issued. A warp whose rows all kept their max skips it (the factor is then exactly 1;
  // SASS: 64 FMULs a block at hdim 128, an instruction a score for FP8; measured +2-3 % on the
  // FP8 grid at hdim 128 and 256, docs/decisions/015).
  __device__ __forceinline__ void rescale_o(float (&o)[kOAcc], const float (&rescale)[2]) {
    if (any_rescale(rescale)) scale_rows(o, rescale);
  }

  // One step of the walk at position n ≥ blocks.begin (every block but the tile's first): S =
  // Q·K(n)ᵀ issued beside block n + 1's P·V, the softmax of S under that P·V, then P(n) into
  // registers for the next step's P·V. last: n is the walk's last position (blocks.begin), whose
  // Q·Kᵀ is the tile's last.
  // With Config::kBranchFreeStep (kMask masked or unmasked), O's rescale by block n + 1's factors
  // comes between the two issues: under the GEMMs, out of the softmax's critical path, where its
  // skip branch splits nothing (ncu, bf16 hdim 128 causal 8k: after the step's last
  // exponential the rescale and the conversion took ~100 issue slots, FlashAttention-3's ~0;
  // docs/decisions/043). K's release then waits for the first row's exponentials (see the
  // witness below). Otherwise (kMask either) O is rescaled by block n's factors at the step's
  // end, after the P·V wait, and K is released as soon as S is ready.
  template <BlockMask kMask>
  __device__ __forceinline__ void step(const WorkTile& tile, int n, bool last,
                                       const ptx::FragmentCoords& at, const TileRowMods& row_mods,
                                       const BlockScales& previous, const BlockScales& block,
                                       const BlockVisit& visit, float (&s)[kSAcc],
                                       uint32_t (&pm)[kPRegs], float (&o)[kOAcc],
                                       float (&sums)[kSumAcc], float (&rescale)[2],
                                       OnlineSoftmax& softmax) {
    constexpr bool kApart = kMask != BlockMask::either;
    smem.k_full[k_ring.stage].wait(k_ring.phase);
    wait_turn();
    issue_qk(s, k_ring.stage);
    if constexpr (kApart) rescale_o(o, rescale);
    smem.v_full[v_ring.stage].wait(v_ring.phase);
    issue_pv(o, sums, pm, v_ring.stage);
    pass_turn();
    ptx::wait_group<1>();  // S is ready; P·V may still run
    ptx::fence_operands(s);
    if constexpr (!kApart) {
      release(smem.k_empty[k_ring.stage]);
      k_ring.advance();
    }
    if (last) release_q();  // a later tile's Q may load now
    if constexpr (kApart) {
      softmax_block<kMask>(s, softmax, rescale, tile, n, at, block, row_mods, visit,
                           [&](float witness) {
        // K's release after the first row's exponentials, ordered after them through its lane
        // test: the wait for the P·V below comes after this arrive, so ptxas cannot hoist the
        // wait above the exponentials (it otherwise does, and the softmax would wait for the
        // P·V it should overlap). The test is on witness's bits, which are never all ones
        // (exponentials and their sums are ≥ 0 or the positive canonical NaN): ptxas knows a
        // sum of exponentials is not below 0 and folded a float comparison away.
        if (thread % 32 == 0 && __float_as_uint(witness) != 0xFFFFFFFFu) {
          smem.k_empty[k_ring.stage].arrive();
        }
        k_ring.advance();
      });
    } else {
      softmax_block<kMask>(s, softmax, rescale, tile, n, at, block, row_mods, visit);
    }
    ptx::wait_group<0>();
    ptx::fence_operands(o);
    ptx::fence_operands(sums);
    ptx::fence_operands(pm);
    release(smem.v_empty[v_ring.stage]);
    v_ring.advance();
    if constexpr (Config::kRowSumsByMma) softmax.add_block_sums(sums, rescale);
    change_value_units(rescale, previous, block);
    if constexpr (!kApart) rescale_o(o, rescale);
    ptx::accumulator_to_operand<Element>(s, pm);
  }

  // Leaves the unnormalized O of the tile in o and the row statistics in softmax.
  // Walks positions of `blocks` from end − 1 down; blocks.key_block(n) is the K/V block of
  // position n (n itself unless block-sparse), what the producer loaded for it.
  __device__ void run(const WorkTile& tile, const TileBlocks<Config>& blocks, float (&o)[kOAcc],
                      OnlineSoftmax& softmax) {
    softmax.reset();
    if constexpr (Config::kFp8) start_tile(tile);
    const TileRowMods row_mods = row_mods_of(tile);
    smem.q_full[q_ring.stage].wait(q_ring.phase);
    q_address = tile_q_address();
    // With seqused_k, the first V block (the sequence's last keys) is made safe before the
    // walk, while no accumulator is live: in the main loop it cost registers (spills at hdim
    // 256). A block-sparse list may put the last keys anywhere: the backend refuses seqused_k.
    if constexpr (!Config::kFp8 && !Config::kBlockSparse) {
      if (p.seqused_k != nullptr && blocks.count() > 0) {
        smem.v_full[v_ring.stage].wait(v_ring.phase);
        zero_v_padding(v_ring.stage, blocks.end - 1, tile.seq);
      }
    }
#pragma unroll
    for (int i = 0; i < kOAcc; ++i) o[i] = 0.0f;
    float sums[kSumAcc];
#pragma unroll
    for (int i = 0; i < kSumAcc; ++i) sums[i] = 0.0f;
    if (blocks.count() == 0) {
      release_q();
      return;
    }

    const ptx::FragmentCoords at = ptx::fragment_coords(thread);
    float s[kSAcc];
    uint32_t pm[kPRegs];
    float rescale[2];

    int n = blocks.end - 1;
    // FP8's per-block scales are loaded at the top of each step: the wgmma asm orders memory, so
    // they stay ahead of the GEMM waits and arrive while the GEMMs run (measured: loaded after
    // the wait, they cost 1.6x at hdim 128). A block-sparse walk's block and bits likewise.
    BlockScales block{};
    if constexpr (Config::kFp8) block = block_scales(tile, n);
    BlockVisit visit{};
    if constexpr (Config::kBlockSparse) visit = visit_at(blocks, n, at);
    smem.k_full[k_ring.stage].wait(k_ring.phase);
    wait_turn();
    issue_qk(s, k_ring.stage);
    pass_turn();
    ptx::wait_group<0>();
    ptx::fence_operands(s);
    release(smem.k_empty[k_ring.stage]);
    k_ring.advance();
    if (blocks.count() == 1) release_q();  // that was the tile's last Q·Kᵀ
    if constexpr (Config::kBranchFreeStep) {
      if (block_masked(tile, n, visit)) {
        softmax_block<BlockMask::masked>(s, softmax, rescale, tile, n, at, block, row_mods, visit);
      } else {
        softmax_block<BlockMask::unmasked>(s, softmax, rescale, tile, n, at, block, row_mods,
                                           visit);
      }
      rescale[0] = rescale[1] = 1.0f;  // O is still zero
    } else {
      softmax_block<BlockMask::either>(s, softmax, rescale, tile, n, at, block, row_mods, visit);
    }
    ptx::accumulator_to_operand<Element>(s, pm);

    for (--n; n >= blocks.begin; --n) {
      const BlockScales previous = block;
      if constexpr (Config::kFp8) block = block_scales(tile, n);
      if constexpr (Config::kBlockSparse) visit = visit_at(blocks, n, at);
      // The walk's last position is compared here, not inside step: there its operands swapped
      // and the FP8 kernels' SASS moved off main's (one UISETP).
      const bool last = n == blocks.begin;
      // kBranchFreeStep: two copies of the step, one a masking mode, the test taken before the
      // GEMMs' issue and none inside the softmax.
      if constexpr (Config::kBranchFreeStep) {
        if (block_masked(tile, n, visit)) {
          step<BlockMask::masked>(tile, n, last, at, row_mods, previous, block, visit, s, pm, o,
                                  sums, rescale, softmax);
        } else {
          step<BlockMask::unmasked>(tile, n, last, at, row_mods, previous, block, visit, s, pm, o,
                                    sums, rescale, softmax);
        }
      } else {
        step<BlockMask::either>(tile, n, last, at, row_mods, previous, block, visit, s, pm, o,
                                sums, rescale, softmax);
      }
    }

    if constexpr (Config::kBranchFreeStep) rescale_o(o, rescale);  // the last block's factors
    smem.v_full[v_ring.stage].wait(v_ring.phase);
    issue_pv(o, sums, pm, v_ring.stage);
    ptx::wait_group<0>();
    ptx::fence_operands(o);
    ptx::fence_operands(sums);
    release(smem.v_empty[v_ring.stage]);
    v_ring.advance();
    if constexpr (Config::kRowSumsByMma) softmax.add_block_sums(sums, {1.0f, 1.0f});
  }
};

}  // namespace hfa::sm90::fwd
