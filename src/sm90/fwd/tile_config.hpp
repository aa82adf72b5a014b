// Tile shapes and the CTA's division of labour for each forward configuration.
#pragma once

// Tuning switches, overridable at build time for experiments (-D...).
#ifndef HFA_SM90_D64_BLOCK_M
#define HFA_SM90_D64_BLOCK_M 192
#endif
#ifndef HFA_SM90_D64_BLOCK_N
#define HFA_SM90_D64_BLOCK_N 128
#endif
// K/V stages at hdim 64, whose blocks are short next to a load's latency (a block's two GEMMs
// are a quarter of hdim 256's): 2 (every other head dim's) to 4 fit beside two Q buffers and O.
// Measured (docs/decisions/008): 3 stages +0.3 … +3.2 % on the hdim 64 shapes by graph
// replay, grid cells +3 % on geometric mean (4 stages no better); the default since the GPU
// test suites ran on it.
#ifndef HFA_SM90_D64_STAGES
#define HFA_SM90_D64_STAGES 3
#endif
#ifndef HFA_SM90_D128_BLOCK_N
#define HFA_SM90_D128_BLOCK_N 176
#endif
#ifndef HFA_SM90_D128_CAUSAL_BLOCK_N
#define HFA_SM90_D128_CAUSAL_BLOCK_N 128
#endif
// Keys per K/V tile at hdim 256: 64, which leaves room for one slab of O (kBlockN below); 80
// (the most that fits, no O buffer) measured 1.07-1.25x slower on the hdim 256 shapes and
// within noise from 4k tokens on (docs/decisions/006).
#ifndef HFA_SM90_D256_BLOCK_N
#define HFA_SM90_D256_BLOCK_N 64
#endif
// Keys per K/V tile of FP8 at hdim 128 (per-tensor or per-head k and v scales, no softcap):
// 224, FlashAttention-3's (see kBlockN). Measured against 128 (docs/decisions/017):
// non-causal +1 / +8 / +7 % at 2k / 8k / 16k, causal −2 / −1 / +5 %; 192 about the same.
#ifndef HFA_SM90_FP8_D128_BLOCK_N
#define HFA_SM90_FP8_D128_BLOCK_N 224
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "common/head_dims.hpp"
#include "common/score_policy.hpp"
#include "sm90/common/sparse_block.hpp"
#include "sm90/common/wgmma_shape.hpp"

namespace hfa::sm90::fwd {

// One kernel configuration: the head dims it is compiled for, whether keys are limited by a
// window (causal is the window (∞, 0)) and whether scores are softcapped. A problem whose head dim is smaller than the
// configuration's runs on it padded: TMA fills the columns past the tensor's with zeros, which
// add nothing to Q·Kᵀ, and the epilogue stores only the real columns of O (see dispatch in
// backend.cpp).
// Softcap is a compile-time switch too: its tanh, kept in the same kernel behind a runtime
// test, raised register pressure enough to spill 8-16 bytes at hdim 256 even when off.
// Element is q's, k's and v's type, Out the type of out: the same 16-bit type (or f32, a partial
// result), or bf16/fp16 after e4m3 inputs (the FP8 forward, whose tiles are below).
// kShortRows_: a configuration for windowed problems whose rows see few keys (short causal
// sequences, launch.cuh's kShortRowsMaxKeys): a tile of fewer rows where the standard one is
// larger (has_short_rows_tile).
// kKeyBlockScales_ (FP8): k or v carries a scale per block of keys (a multiple of
// detail::kFp8KeyBlock, the API's granularity), so a tile holds exactly kFp8KeyBlock keys and
// takes one scale of each (fp8_scales.cuh). TileConfigFor sets it only where it changes the tile.
template <int kHeadDimQK_, int kHeadDimV_, bool kWindowed_, bool kSoftcap_, typename Element_,
          typename Out_ = Element_, bool kShortRows_ = false, bool kKeyBlockScales_ = false>
struct TileConfig {
  using Element = Element_;
  using Out = Out_;
  static constexpr int kHeadDimQK = kHeadDimQK_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr bool kWindowed = kWindowed_;
  static constexpr bool kSoftcap = kSoftcap_;
  // The score policy (src/common/score_policy.hpp) the kernel list's switches select: these
  // modifiers, and the window rule's masks where kWindowed (past seqlen_k always).
  using Mods = policy::ListedMods<kSoftcap>;
  // Whether keys come from a block-sparse mask's lists (BlockSparseTileConfig below).
  static constexpr bool kBlockSparse = false;
  static constexpr bool kFp8 = std::is_same_v<Element, __nv_fp8_e4m3>;
  static constexpr bool kShortRows = kShortRows_;
  static constexpr bool kKeyBlockScales = kKeyBlockScales_;
  // FP8: V reaches the kernel transposed by a pass before it (transpose_v.cuh); the layer
  // VTransposingTileConfig below transposes it in the kernel instead, in kTransposingWarps warps.
  static constexpr bool kTransposesVInKernel = false;
  static constexpr int kTransposingWarps = 0;
  // An f32 out is a partial result (accumulate): its configurations keep the standard tiles.
  // ptxas: no spills at hdim 64, 128, 192; 8 bytes at hdim 256 (the merge's loads of the running
  // out, once a tile).
  static constexpr bool kPartialOut = std::is_same_v<Out, float>;
  static_assert(kFp8 || kPartialOut || std::is_same_v<Element, Out>,
                "16-bit inputs give out in their type, or in f32");
  static_assert(!kPartialOut || (!kFp8 && !kShortRows && !kSoftcap),
                "an f32 out: 16-bit inputs, standard tiles, no softcap (kernel_list.def)");
  static_assert(!kShortRows || kWindowed, "short rows: a causal or windowed configuration");
  static_assert(!kKeyBlockScales || kFp8, "key block scales: an FP8 configuration");

  // Rows of Q per CTA. hdim 64 has cheap GEMMs per exponential, so a third consumer warpgroup
  // keeps the tensor cores fed while the other two compute softmax.
  // FP8 (hdim 128 and 256): 128 rows, by 128 keys (224 at hdim 128, kBlockN). e4m3 halves the
  // bytes of a tile, so shared memory is no limit (Q + 2 stages of K and transposed V: 80 KB at
  // 128 × 128, 160 KB at 256); registers are (S 64 + P 16 + O 128 at hdim 256), and 128 keys are
  // one 128-byte slab of transposed V.
  // Short rows (16-bit): 128 rows at hdim 64. A causal row of a short sequence sees few key
  // blocks, and a 192-row tile pays its first Q·Kᵀ, last P·V and diagonal mask over more rows
  // and leaves fewer tiles to balance (measured, CUDA-graph replay: 32 × 512 tokens 179 → 165
  // µs, 16 × 1024 267 → 237; from 2k tokens on 192 rows are as fast or faster, 10-13 % at 8k
  // and 16k: docs/decisions/007).
  static constexpr int kStandardBlockM = kHeadDimQK == 64 ? HFA_SM90_D64_BLOCK_M : 128;
  static constexpr int kBlockM = kShortRows ? 128 : kStandardBlockM;
  static_assert(!kShortRows || kBlockM < kStandardBlockM, "short rows: only where the tile shrinks");
  // Keys per K/V tile: as wide as registers (S and O accumulators plus P) and shared memory
  // (Q + 2 stages of K and V, ≤ 227 KB) allow. hdim 128 non-causal: 176 (S 88 + O 64 + P 44
  // registers; 208 KB). Windowed keeps 128 so the diagonal tiles waste less. hdim 192: 112
  // (220 KB); 192/128 (DeepSeek's): 128 (210 KB). hdim 256: 64 (192 KB, and 16 KB for a slab
  // of O; 80 would fill shared memory without it).
  // FP8: 128 (kFp8KeyBlock), but 224 at hdim 128 where the tile's scales allow it (above) and no
  // softcap: a tile's fixed work (row max reductions, the turn barriers, the GEMMs' issue and
  // waits) is then spread over 224 keys. S 112 + P 28 + O 64 registers, FlashAttention-3's tile;
  // at 256 keys ptxas spilled 192 bytes, with the softcap at 224 352 bytes.
  static constexpr bool kWideFp8Keys = kFp8 && kHeadDimQK == 128 && !kSoftcap && !kKeyBlockScales;
  static constexpr int kBlockN = kWideFp8Keys   ? HFA_SM90_FP8_D128_BLOCK_N
                                 : kFp8         ? detail::kFp8KeyBlock
                                 : kHeadDimQK == 64    ? HFA_SM90_D64_BLOCK_N
                                 : kHeadDimQK == 128 ? (kWindowed ? HFA_SM90_D128_CAUSAL_BLOCK_N
                                                                  : HFA_SM90_D128_BLOCK_N)
                                 : kHeadDimQK == 192 ? (kHeadDimV == 128 ? 128 : 112)
                                 : kHeadDimQK == 256 ? HFA_SM90_D256_BLOCK_N
                                                     : 0;
  static_assert(kBlockN > 0, "no forward tile for this head dim: add one here");
  static_assert(!kFp8 || kHeadDimQK >= 128, "FP8 rows of codes are whole 128-byte slabs");
  // K and V each double-buffered (load block j+1 during block j), or deeper at hdim 64.
  static constexpr int kStages = kHeadDimQK == 64 && !kFp8 ? HFA_SM90_D64_STAGES : 2;

  static constexpr int kConsumerWarpgroups = kBlockM / kRowsPerWarpgroup;
  static constexpr int kThreads = kThreadsPerWarpgroup * (kConsumerWarpgroups + 1);
  // The consumer warpgroups take turns on the tensor cores (mainloop.cuh), so a tile has two at
  // least. One warpgroup a CTA and two CTAs an SM, turns taken between the CTAs, measured slower
  // on the short causal shapes it was for (docs/decisions/009).
  static_assert(kConsumerWarpgroups >= 2, "the consumers take turns: two warpgroups at least");
  // setmaxnreg budgets: the producer only issues TMA; consumers hold S, P and O in registers.
  // setmaxnreg.inc only hands out what the CTA's warps gave back with setmaxnreg.dec, so the
  // split must balance the launch allocation (launch bounds: 168 registers a thread at 384
  // threads, 128 at 512): 128·(168 − 40) = 256·(232 − 168), 128·(128 − 32) = 384·(160 − 128).
  // A split that asks for more (seen: 32/240) leaves the consumers waiting in setmaxnreg forever.
  // The producer gets 40, not FlashAttention-3's 24: at 24 its loop spilled 12-24 bytes to local
  // memory at hdim 128 and 256. At 232 the consumers spill nothing outside the softcap kernels
  // (at 224 they spilled 56 bytes at hdim 256), so there is nothing to move either way.
  // FP8 at hdim 256 holds S 64 + P 16 + O 128: at 232 ptxas serialized its wgmmas (C7512) and
  // spilled 60 bytes, so it takes FlashAttention-3's 24/240 split, 128·(168 − 24) =
  // 256·(240 − 168). It still spills 32-192 bytes (the softcap kernels most), measured 1189
  // TFLOP/s at 16k non-causal all the same. FP8 at hdim 128 on 224-key tiles (S 112 + P 28 + O
  // 64) takes the same split: its 32 bytes of spills are the producer's, at 24 registers, one
  // 8-byte store and load a K/V block and a few a tile (executed SASS under ncu); windowed
  // spills 68 bytes (not located).
  static constexpr bool kWideFp8 = kFp8 && (kHeadDimV > 128 || kBlockN > 128);
  static constexpr int kProducerRegisters = kWideFp8 ? 24 : kConsumerWarpgroups == 2 ? 40 : 32;
  static constexpr int kConsumerRegisters = kWideFp8                    ? 240
                                            : kConsumerWarpgroups == 2 ? 232
                                                                       : 160;

  // FP8: probabilities go to e4m3 as exp2(x − max + 8), in [0, 256] rather than [0, 1], so
  // small ones keep more bits before underflow (FlashAttention-3's max offset); the 2⁸ cancels
  // in O's normalization and is taken out of the LSE.
  static constexpr int kMaxOffset = kFp8 ? 8 : 0;
  // FP8: the softmax's row sums as one more GEMM beside P·V, P·1 (m64n8k32 against a tile of
  // ones), instead of an FADD a score. At hdim 128 the exponentials, the GEMMs and the issue
  // slots each take about 1/16 clock a score (SASS: 8.2 instructions a score, MUFU 16 a clock
  // an SM), so an instruction a score is worth moving to the tensor cores (6 % more P·V work).
  // The sums are then of P as rounded to e4m3, the P that P·V multiplies.
  static constexpr bool kRowSumsByMma = kFp8;
  // The main loop's step (mainloop.cuh, docs/decisions/043). With kBranchFreeStep, masked and
  // unmasked blocks take separate copies of the step, so the softmax has no branch; O's rescale
  // sits between the next step's Q·Kᵀ and P·V issues, and the wait for the running P·V after
  // the first row's exponentials. Without it, one copy: the mask test inside the softmax, O's
  // rescale after the P·V wait. Measured against one copy (H100, TFLOP/s, 2k / 8k): bf16 hdim
  // 128 +2.3 … +4.2 % non-causal, −0.8 … +2.3 % causal; hdim 256 −2.0 … +2.0 % (kept, its
  // softmax phase shortened as hdim 128's did); hdim 64 even non-causal, −2.2 / −2.4 % causal,
  // and FP8 hdim 128 −2.1 … −3.5 %, so both keep one copy. So does a softcapped tile wider than
  // 128 keys (hdim 128 non-causal: S 88 + P 44 + O 64 registers), where ptxas spilled 68 bytes
  // with the copies apart and 8 with one. hdim 192 was not measured: its SASS is hdim 128's
  // (the same MUFUs before the P·V wait, the same few instructions after the last one).
  static constexpr bool kBranchFreeStep =
      !kFp8 && kHeadDimQK != 64 && !(kSoftcap && kBlockN > 128);

  static constexpr int kSlabColumns = kSlabColumnsOf<Element>;
  static constexpr int kMmaK = kMmaKOf<Element>;
  static constexpr int kSlabsQK = kHeadDimQK / kSlabColumns;
  static_assert(kHeadDimQK % kSlabColumns == 0 && kHeadDimV % kSlabColumns == 0);
  static_assert(kBlockN % kMmaK == 0 && kBlockN % 8 == 0);
  // Transposed V and the ones of P·1 (FP8) are K-major tiles of whole 128-key slabs: a tile of
  // fewer keys than its slabs hold loads the next tile's first keys into the rest (or zeros past
  // the end) and leaves them out of P·V.
  static constexpr int kBlockNSlabbed = (kBlockN + kSlabColumns - 1) / kSlabColumns * kSlabColumns;
  static_assert(register_split_fits(kThreads, kProducerRegisters, kConsumerRegisters,
                                    kConsumerWarpgroups),
                "setmaxnreg: consumers would claim registers the producer never gave back");
};

// The configuration, key block scales set only where they change the tile, so that no kernel is
// compiled twice under two names.
template <int kHeadDimQK, int kHeadDimV, bool kWindowed, bool kSoftcap, typename Element,
          typename Out, bool kShortRows, bool kKeyBlockScales>
using TileConfigFor =
    TileConfig<kHeadDimQK, kHeadDimV, kWindowed, kSoftcap, Element, Out, kShortRows,
               kKeyBlockScales && TileConfig<kHeadDimQK, kHeadDimV, kWindowed, kSoftcap, Element,
                                             Out, kShortRows>::kBlockN != detail::kFp8KeyBlock>;

// A configuration whose scores take ALiBi (score_policy.hpp; without softcap, ListedMods): the
// plain configuration's tiles and registers under the ALiBi policy. A layer over it rather than
// one more switch of TileConfig, so that the kernels compiled before keep their names and code.
template <typename Plain>
struct AlibiTileConfig : Plain {
  static_assert(!Plain::kSoftcap && !Plain::kFp8 && !Plain::kPartialOut,
                "ALiBi: 16-bit inputs and out, no softcap (backend.cpp refuses the rest)");
  using Mods = policy::ListedMods<false, true>;
};

// An FP8 configuration that transposes V in the kernel (v_transposer.cuh), for short problems:
// the producer's TMA thread loads V as stored (keys × dims) into a staging ring, and the
// producer warpgroup's other three warps, idle otherwise, write each staged block into the V
// stage the consumers read, transposed (dims × keys) and zero past the sequence's used keys. No
// pass over v before the kernel and no workspace for it: the pass costs a constant ~50-60 µs a
// call (a read and a write of v through DRAM and a second launch), a loss of 10-20 % at 2k
// tokens, where the transposing warps' shared-memory traffic and issue slots cost the consumers
// 5-9 % a block at 16k (docs/decisions/037). launch.hpp's fp8_transposes_v_in_kernel says
// where. The staging ring takes shared memory the pass's kernel has for Q's second buffer or a
// whole O buffer: SharedStorage picks what fits. Not with softcap (no layer for it: the softcapped
// FP8 kernels keep the pass, and their compile time stays one kernel each).
// A layer like ALiBi's, so that the kernels compiled before keep their names and code.
template <typename Plain>
struct VTransposingTileConfig : Plain {
  static_assert(Plain::kFp8 && !Plain::kSoftcap, "in-kernel V transpose: FP8 without softcap");
  static constexpr bool kTransposesVInKernel = true;
  // The producer warpgroup's warps but the first, whose lane 0 issues every TMA load.
  static constexpr int kTransposingWarps = kThreadsPerWarpgroup / 32 - 1;
};

// A configuration that reads a block-sparse mask (common/block_sparse.hpp; sm90/common/
// block_sparse.cuh): its tiles walk the mask's lists of key blocks instead of a BlockRange, and
// AND a partial block's bits into the element mask. Its tile is one mask block, 128 × 128: the
// windowed configuration (a window may still bound the keys, ANDed with the mask, and tiles of
// unequal cost want the dynamic schedule), with short rows at hdim 64 (128 of them instead of
// 192). A layer like ALiBi's, so that the kernels compiled before keep their names and code.
template <typename Plain>
struct BlockSparseTileConfig : Plain {
  static_assert(Plain::kWindowed && !Plain::kSoftcap && !Plain::kFp8 && !Plain::kPartialOut,
                "block-sparse: the windowed 16-bit configuration, no softcap, no f32 out");
  static_assert(Plain::kBlockM == kSparseBlock && Plain::kBlockN == kSparseBlock,
                "block-sparse: a tile of one mask block (sm90/common/sparse_block.hpp)");
  static constexpr bool kBlockSparse = true;
};

// Whether a short-rows configuration exists for this head dim and element type (its tile is
// smaller than the standard one): hdim 64, 16-bit, while its standard tile has more rows than 128.
template <int kHeadDimQK, typename Element>
inline constexpr bool has_short_rows_tile =
    !std::is_same_v<Element, __nv_fp8_e4m3> && kHeadDimQK == 64 && HFA_SM90_D64_BLOCK_M > 128;

}  // namespace hfa::sm90::fwd
