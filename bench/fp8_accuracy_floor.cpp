// Where the FP8 forward's error comes from (issue 12), measured by emulation on the CPU.
//
// The setup is bench/fp8_accuracy.py's, which measured the GPU (FlashAttention-3's Table 3):
// batch 1, seqlen 4096, 8 heads, d 128; q, k, v ~ N(0, 1) with 0.1 % of the entries replaced by
// N(0, 100); the RMSE of out against float64 attention of the UNQUANTIZED inputs, scale
// 1/sqrt(d), non-causal. The inputs come from this file's own generator (the same distributions,
// other bits). The RMSE is taken over a random sample of query rows of every head (--rows)
// against all keys, so that a run takes minutes on one core, and pooled over several draws of the
// inputs (--draws, seeds --seed, --seed + 1, ...): the error is dominated by the few rows where
// outliers of q and k meet, so one draw's RMSE moves by several percent with its outliers, and
// the GPU's number is one draw. The tables give the pooled RMSE and the range of the draws' own;
// the JSON also gives the sampling's standard error over rows.
//
// Each row of the output is one model of the computation (the JSON case's "model"):
//   floor        float64 attention of the dequantized e4m3 inputs (code · scale): the best any
//                kernel arithmetic can do once q, k and v are e4m3;
//   kernel       the sm90 FP8 forward's arithmetic, step by step (below); with a "remedy", the
//                same with one change;
//   qk-only, v-only, p-only, qk+p, qk+v, exact-inputs
//                the kernel with only those sources of error left in; the others are exact (the
//                inputs in fp32, P not rounded: a decomposition, not something a wgmma takes);
//   bf16-kernel  the bf16 forward's arithmetic, against the GPU's bf16 number.
// Codes and scales come from hfa's own quantizer code (src/quant, as src/cpu/quantize_fp8.cpp
// uses it), so they are the bytes the GPU kernel reads (checked once by hand against
// cpu::quantize_fp8, every granularity with and without the rotation: identical).
//
// The kernel's arithmetic (src/sm90/fwd/mainloop.cuh, softmax.cuh, fp8_scales.cuh, epilogue.cuh):
//   - S = q codes · k codes accumulated in fp32 k32 step by k32 step (the products of two e4m3
//     codes are exact; each step's sum is taken exactly here). Per-block scales: S times
//     fp32(q row scale · k block scale); per tensor or head, q·k's scale folded into scale_log2.
//   - Online softmax per tile of 128 keys, walked from the last tile to the first: P =
//     exp2(S·scale_log2 − (max·scale_log2 − 8)), so P reaches 2^8 (kMaxOffset), rounded to e4m3
//     (RNE, saturating) for P·V; the row sum adds P as rounded (the kernel's P·1 on the tensor
//     cores, tile_config.hpp's kRowSumsByMma; each tile's sum exact here, then added in fp32).
//     The remedy "sums-of-unrounded-p" is the kernel before that change: the sum of fp32 P.
//   - O += P codes · V codes in fp32, kept in units of the current tile's v scale: the factor
//     that rescales O for a new max also carries the ratio of consecutive tiles' v scales. At the
//     end O · (v scale / row sum), rounded to bf16.
// Not emulated: MUFU's approximate exp2 and the approximate division (relative errors near
// 2^-22), and the order in which a quad's lanes add their row sums; the "exact-inputs" row shows
// how far below the errors measured here such fp32 details are.
//
// The reduced-precision accumulator rows are a MODEL, not a measurement of the hardware:
// DeepSeek-V3's report says Hopper's FP8 wgmma keeps about 14 bits of the accumulator; here each
// k32 step's exact sum is added to the accumulator and the result truncated (toward zero) to 14
// significant bits, in both GEMMs; "two-level" adds each 128-key tile's P·V, accumulated that
// way from zero, into an fp32 O (FlashAttention-3's promotion).
//
// Build and run from the repository root (CPU only; the quantizer is header-only, no libhfa):
//   g++ -O3 -march=native -std=c++20 -fopenmp -Isrc bench/fp8_accuracy_floor.cpp -o fp8_floor
//   HFA_COMMIT=$(git rev-parse --short HEAD) OMP_NUM_THREADS=1 ./fp8_floor
// Options: --quick (512 tokens, 2 heads, 64 rows a head, 2 draws: a second), --rows N (sampled
// query rows a head, 512), --draws N (4), --seed N (the first draw's, 1), --out DIR
// (bench/results), --commit SHA (else HFA_COMMIT), --gpu FILE|none (fp8_accuracy.py's GPU result
// to set beside the emulation, when its shape is this run's;
// bench/results/2026-12-01-fp8-accuracy-53157ab.json). Writes
// <out>/<date>-fp8-accuracy-floor-<commit>.{json,md}. The default run takes about 5 minutes of
// one core.
#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <numbers>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/half_float.hpp"
#include "quant/e4m3.hpp"
#include "quant/fp8_input.hpp"
#include "quant/hadamard.hpp"

namespace {

namespace quant = hfa::quant;

constexpr int kHeadDim = 128;
constexpr int kScaleBlock = 128;    // rows per block of per-block scales (fp8_accuracy.py's)
constexpr uint64_t kSignsSeed = 0;  // fp8_accuracy.py's hadamard_signs(d, seed=0)
constexpr double kOutlierRate = 1e-3;
constexpr double kOutlierSigma = 10.0;
constexpr int kModelAccumulatorBits = 14;
constexpr float kLog2e = 1.4426950408889634f;  // sm90/common/math.hpp's
const char* const kDefaultGpuResult = "bench/results/2026-12-01-fp8-accuracy-53157ab.json";

// ---- inputs ------------------------------------------------------------------------------------

// xoshiro256** seeded through splitmix64, with a Box–Muller normal: the same numbers from every
// compiler and standard library, which <random>'s distributions do not promise.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& word : state_) word = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t result = std::rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = std::rotl(state_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
  double normal() {
    const double radius = std::sqrt(-2.0 * std::log(1.0 - uniform()));  // 1 − u: never log(0)
    return radius * std::cos(2.0 * std::numbers::pi * uniform());
  }

 private:
  static uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_[4];
};

// A tensor of one sequence, stored [head][row][d] (each head's rows contiguous, so that one
// head's operands are one block of memory).
struct Shape {
  int seqlen;
  int heads;
  size_t rows() const { return size_t(heads) * size_t(seqlen); }
  size_t size() const { return rows() * kHeadDim; }
  size_t row(int head, int i) const { return size_t(head) * size_t(seqlen) + size_t(i); }
};

// N(0, 1), 0.1 % of the entries replaced by N(0, 100): fp8_accuracy.py's outlier_inputs.
std::vector<double> outlier_inputs(const Shape& shape, Rng& rng) {
  std::vector<double> x(shape.size());
  for (double& value : x) {
    value = rng.normal();
    if (rng.uniform() < kOutlierRate) value = kOutlierSigma * rng.normal();
  }
  return x;
}

// ---- rounding ----------------------------------------------------------------------------------

float bf16(float x) { return hfa::detail::bf16_to_float(hfa::detail::float_to_bf16(x)); }
float e4m3(float x) { return quant::e4m3_decode(quant::e4m3_encode(x)); }

// x with only its `bits` leading significand bits (toward zero): the accumulator model.
double truncate_significand(double x, int bits) {
  const uint64_t dropped = (uint64_t{1} << (53 - bits)) - 1;
  return std::bit_cast<double>(std::bit_cast<uint64_t>(x) & ~dropped);
}

// ---- quantization (hfa_quantize_fp8) -------------------------------------------------------

enum class Scaling { tensor, head, block };
constexpr Scaling kScalings[] = {Scaling::tensor, Scaling::head, Scaling::block};

const char* scaling_name(Scaling s) {
  return s == Scaling::tensor ? "tensor" : s == Scaling::head ? "head" : "block";
}

struct Fp8Tensor {
  std::vector<uint8_t> codes;  // [head][row][d]
  std::vector<float> scale;    // [head][row]: the scale of the row's group
  int scale_rows;              // rows of a head that share a scale
};

// src/cpu/quantize_fp8.cpp's two passes with the same helpers, so the codes are the ones the GPU
// reads: each group's amax of the (rotated) fp32 rows, scale = amax / 448 (fp8_input_scale), then
// code = e4m3(y / scale). Groups as the FP8 forward's descales: one, one per (batch, head), or one
// per block of `block_rows` rows of a head. signs: rotate every row first (nullptr: don't).
Fp8Tensor quantize(const std::vector<float>& x, const Shape& shape, Scaling scaling, int block_rows,
                   const float* signs) {
  const int blocks = (shape.seqlen + block_rows - 1) / block_rows;
  auto group = [&](int head, int i) -> size_t {
    if (scaling == Scaling::tensor) return 0;
    if (scaling == Scaling::head) return size_t(head);
    return size_t(i / block_rows) * size_t(shape.heads) + size_t(head);  // (batch, block, head)
  };
  const size_t groups = scaling == Scaling::tensor ? 1
                        : scaling == Scaling::head ? size_t(shape.heads)
                                                   : size_t(blocks) * size_t(shape.heads);
  std::vector<float> y = x;
  if (signs != nullptr) {
    for (size_t r = 0; r < shape.rows(); ++r)
      quant::hadamard_rotate(&y[r * kHeadDim], kHeadDim, signs);
  }
  std::vector<uint32_t> largest(groups, 0);  // magnitude bits, as the quantizer takes the max
  for (int head = 0; head < shape.heads; ++head) {
    for (int i = 0; i < shape.seqlen; ++i) {
      uint32_t& g = largest[group(head, i)];
      g = std::max(g,
                   quant::abs_bits(quant::amax_abs(&y[shape.row(head, i) * kHeadDim], kHeadDim)));
    }
  }
  Fp8Tensor t{std::vector<uint8_t>(shape.size()), std::vector<float>(shape.rows()),
              scaling == Scaling::block ? block_rows : shape.seqlen};
  for (int head = 0; head < shape.heads; ++head) {
    for (int i = 0; i < shape.seqlen; ++i) {
      const size_t r = shape.row(head, i);
      const float scale =
          quant::fp8_input_scale(quant::amax_from_abs_bits(largest[group(head, i)]));
      t.scale[r] = scale;
      for (int c = 0; c < kHeadDim; ++c) {
        t.codes[r * kHeadDim + c] = quant::fp8_input_encode(y[r * kHeadDim + c], scale);
      }
    }
  }
  return t;
}

// ---- one head's operands -----------------------------------------------------------------------

// The rows one GEMM reads for one head: e4m3 code values with their scales, or plain values with
// scale 1 (value = values · scale).
struct Operand {
  std::vector<double> values;  // [row][d]
  std::vector<float> scale;    // [row]
  int scale_rows;              // rows that share one scale
  const double* row(int i) const { return values.data() + size_t(i) * kHeadDim; }
};

Operand fp8_operand(const Fp8Tensor& t, const Shape& shape, int head) {
  Operand op{std::vector<double>(size_t(shape.seqlen) * kHeadDim), std::vector<float>(shape.seqlen),
             t.scale_rows};
  const size_t first = shape.row(head, 0);
  for (size_t e = 0; e < op.values.size(); ++e) {
    op.values[e] = quant::e4m3_decode(t.codes[first * kHeadDim + e]);
  }
  std::copy_n(t.scale.begin() + std::ptrdiff_t(first), shape.seqlen, op.scale.begin());
  return op;
}

// x's rows of one head through `round` (identity, fp32 or bf16), scale 1.
template <typename Round>
Operand plain_operand(const std::vector<double>& x, const Shape& shape, int head, Round round) {
  Operand op{std::vector<double>(size_t(shape.seqlen) * kHeadDim),
             std::vector<float>(shape.seqlen, 1.0f), shape.seqlen};
  const size_t first = shape.row(head, 0) * kHeadDim;
  for (size_t e = 0; e < op.values.size(); ++e) op.values[e] = round(x[first + e]);
  return op;
}

// ---- the arithmetic ----------------------------------------------------------------------------

enum class POperand { fp32, e4m3, bf16 };  // what P is rounded to for P·V (fp32: not at all)
enum class Accumulator { fp32, truncated, truncated_two_level };

// How a forward kernel computes from its operands on: tile width, wgmma k, P's rounding, the max
// offset of P's exponentials, and the accumulator.
struct Pipeline {
  POperand p;
  int max_offset;
  int tile;   // keys per K/V tile (the online softmax's step)
  int mma_k;  // keys per wgmma step of P·V
  Accumulator acc;
  bool sums_rounded_p = false;  // the row sums add P as rounded for P·V (else the fp32 P)
};

// The k of one wgmma: 32 for e4m3 operands, 16 for 16-bit ones (both GEMMs).
constexpr int kFp8MmaK = 32;
constexpr int kBf16MmaK = 16;
// The FP8 forward at hdim 128 (tile_config.hpp: kFp8KeyBlock 128, kMaxOffset 8) and the bf16
// forward at hdim 128, non-causal (kBlockN 176, no offset).
constexpr Pipeline kFp8Kernel{POperand::e4m3, 8, 128, kFp8MmaK, Accumulator::fp32, true};
constexpr Pipeline kBf16Kernel{POperand::bf16, 0, 176, kBf16MmaK, Accumulator::fp32};

// One thread's buffers for one row.
struct Scratch {
  std::vector<double> scores, weights, partial, tile_acc;
  std::vector<float> p, o;
  explicit Scratch(int keys)
      : scores(keys), weights(keys), partial(kHeadDim), tile_acc(kHeadDim), p(keys), o(kHeadDim) {}
};

// acc + partial into an accumulator: fp32, or the truncating model.
double accumulate(double acc, double partial, bool truncated) {
  return truncated ? truncate_significand(acc + partial, kModelAccumulatorBits)
                   : static_cast<double>(static_cast<float>(acc + partial));
}

// float64 softmax(q·kᵀ · scale)·v of query `row`, each operand in its units (value =
// values · scale): the reference (plain float64 inputs) and the floor (dequantized e4m3).
void exact_attention(const Operand& q, const Operand& k, const Operand& v, int row, int keys,
                     Scratch& w, double* out) {
  const double scale = 1.0 / std::sqrt(double(kHeadDim));
  const double* qr = q.row(row);
  double top = -INFINITY;
  for (int j = 0; j < keys; ++j) {
    const double* kr = k.row(j);
    double dot = 0.0;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < kHeadDim; ++c) dot += qr[c] * kr[c];
    w.scores[j] = dot * q.scale[row] * k.scale[j] * scale;
    top = std::max(top, w.scores[j]);
  }
  double sum = 0.0;
  for (int j = 0; j < keys; ++j) {
    const double p = std::exp(w.scores[j] - top);
    sum += p;
    w.weights[j] = p * v.scale[j];
  }
  std::fill_n(out, kHeadDim, 0.0);
  for (int j = 0; j < keys; ++j) {
    const double* vr = v.row(j);
    const double p = w.weights[j];
#pragma omp simd
    for (int c = 0; c < kHeadDim; ++c) out[c] += p * vr[c];
  }
  for (int c = 0; c < kHeadDim; ++c) out[c] /= sum;
}

// S of query `row` as the kernel's softmax sees it, into s, and the scale_log2 that goes with it
// (fp8_scales.cuh): per-block scales multiply S per score, one scale a head folds into
// scale_log2. qk_mma_k: the k of Q·Kᵀ's wgmma steps; truncated: the accumulator model.
float kernel_scores(const Operand& q, const Operand& k, int row, int keys, int qk_mma_k,
                    bool truncated, float* s) {
  const double* qr = q.row(row);
  for (int j = 0; j < keys; ++j) {
    const double* kr = k.row(j);
    double acc = 0.0;
    for (int c0 = 0; c0 < kHeadDim; c0 += qk_mma_k) {
      double partial = 0.0;
#pragma omp simd reduction(+ : partial)
      for (int c = c0; c < c0 + qk_mma_k; ++c) partial += qr[c] * kr[c];
      acc = accumulate(acc, partial, truncated);
    }
    s[j] = static_cast<float>(acc);
  }
  // scale_log2 = softmax_scale · log2(e), both fp32 (validate.cpp, sm90/common/launch.hpp).
  const float scale_log2 = (1.0f / std::sqrt(float(kHeadDim))) * kLog2e;
  // Params::fp8_row_scales: q's or k's scales differ inside a tile.
  if (q.scale_rows < keys || k.scale_rows < keys) {
    for (int j = 0; j < keys; ++j) s[j] *= q.scale[row] * k.scale[j];
    return scale_log2;
  }
  return scale_log2 * (q.scale[row] * k.scale[0]);
}

// The FP8 (or bf16) forward's online softmax and P·V on one row of S (kernel_scores'), then the
// epilogue: out = bf16(O · v scale / row sum). rotated_signs: v was rotated by the quantizer's
// Hadamard with these signs, and O is rotated back (in float64, after the normalization, as an
// epilogue could) before its rounding; nullptr: not rotated.
void kernel_softmax_pv(const float* s, float scale_log2, const Operand& v, int keys,
                       const Pipeline& pipe, const float* rotated_signs, Scratch& w, double* out) {
  const int tiles = (keys + pipe.tile - 1) / pipe.tile;
  // v's scale rides on O when it is one number a tile (mainloop.cuh's change_value_units).
  // Smaller blocks of v are folded into P·V exactly here: what a kernel would do some other way
  // (e.g. one factor a score before P's rounding), not what this one does.
  const bool units = v.scale_rows % pipe.tile == 0;
  auto unit = [&](int tile) { return units ? v.scale[size_t(tile) * pipe.tile] : 1.0f; };
  const bool truncated = pipe.acc != Accumulator::fp32;
  const bool two_level = pipe.acc == Accumulator::truncated_two_level;
  float* o = w.o.data();
  std::fill_n(o, kHeadDim, 0.0f);

  // O += P·V of one tile's keys, wgmma step by wgmma step.
  auto pv = [&](int tile) {
    const int begin = tile * pipe.tile, end = std::min(begin + pipe.tile, keys);
    std::fill(w.tile_acc.begin(), w.tile_acc.end(), 0.0);
    for (int j0 = begin; j0 < end; j0 += pipe.mma_k) {
      std::fill(w.partial.begin(), w.partial.end(), 0.0);
      for (int j = j0; j < std::min(j0 + pipe.mma_k, end); ++j) {
        const double p = units ? double(w.p[j]) : double(w.p[j]) * v.scale[j];
        const double* vr = v.row(j);
#pragma omp simd
        for (int c = 0; c < kHeadDim; ++c) w.partial[c] += p * vr[c];
      }
      for (int c = 0; c < kHeadDim; ++c) {
        if (two_level) {
          w.tile_acc[c] = accumulate(w.tile_acc[c], w.partial[c], true);
        } else {
          o[c] = static_cast<float>(accumulate(o[c], w.partial[c], truncated));
        }
      }
    }
    if (two_level) {
      for (int c = 0; c < kHeadDim; ++c) o[c] = static_cast<float>(o[c] + w.tile_acc[c]);
    }
  };

  // softmax.cuh's OnlineSoftmax::update; nvcc contracts max · scale_log2 − offset to an FFMA.
  const float offset = float(pipe.max_offset);
  float row_max = -INFINITY, row_sum = 0.0f;
  for (int tile = tiles - 1; tile >= 0; --tile) {
    const int begin = tile * pipe.tile, end = std::min(begin + pipe.tile, keys);
    float tile_max = -INFINITY;
    for (int j = begin; j < end; ++j) tile_max = std::max(tile_max, s[j]);
    const float new_max = std::max(row_max, tile_max);
    const float max_scaled = std::fma(new_max, scale_log2, -offset);
    float rescale = std::exp2(std::fma(row_max, scale_log2, -offset) - max_scaled);  // first: 0
    row_max = new_max;
    double rounded_sum = 0.0;  // of rounded P: exact (P·1's k32 steps of e4m3 codes)
    float sum = 0.0f;          // of the fp32 P, in fp32
    for (int j = begin; j < end; ++j) {
      const float p = std::exp2(std::fma(s[j], scale_log2, -max_scaled));
      w.p[j] = pipe.p == POperand::e4m3 ? e4m3(p) : pipe.p == POperand::bf16 ? bf16(p) : p;
      if (pipe.sums_rounded_p) {
        rounded_sum += w.p[j];
      } else {
        sum += p;
      }
    }
    if (pipe.sums_rounded_p) sum = float(rounded_sum);
    row_sum = std::fma(row_sum, rescale, sum);
    if (tile != tiles - 1) {
      // The previous tile's P·V lands in O before O is rescaled (mainloop.cuh's steady state).
      pv(tile + 1);
      rescale *= unit(tile + 1) / unit(tile);
      for (int c = 0; c < kHeadDim; ++c) o[c] *= rescale;
    }
  }
  pv(0);
  // softmax.cuh's finalize (no sink: 1 / row sum) and the epilogue's v scale.
  const float normalizer = (1.0f / row_sum) * unit(0);
  for (int c = 0; c < kHeadDim; ++c) out[c] = o[c] * normalizer;
  if (rotated_signs != nullptr) {
    // v = D·H·y / sqrt(d) undoes y = H·D·v / sqrt(d) (H symmetric, H·H = d·I).
    for (int h = 1; h < kHeadDim; h *= 2) {
      for (int i = 0; i < kHeadDim; ++i) {
        if ((i & h) == 0) {
          const double low = out[i], high = out[i + h];
          out[i] = low + high;
          out[i + h] = low - high;
        }
      }
    }
    for (int c = 0; c < kHeadDim; ++c) out[c] *= rotated_signs[c] / std::sqrt(double(kHeadDim));
  }
  for (int c = 0; c < kHeadDim; ++c) out[c] = bf16(static_cast<float>(out[c]));
}

// ---- what is computed --------------------------------------------------------------------------

// Q·Kᵀ's operands (per head), by index.
enum ScoreSource : int {
  kScoreRef,   // float64
  kScoreFp32,  // the fp32 inputs (what the quantizer reads)
  kScoreBf16,
  kScoreFp8,  // + 2 · scaling + hadamard
  kScoreSources = kScoreFp8 + 6
};
// V's, by index.
enum ValueSource : int {
  kValueRef,
  kValueFp32,
  kValueBf16,
  kValueFp8,  // + scaling (V's block is kScaleBlock)
  kValueFp8Block64 = kValueFp8 + 3,
  kValueFp8Block32,
  kValueFp8Rotated,  // per block of 128, rotated by the q/k signs
  kValueSources
};

int fp8_score(Scaling s, bool hadamard) { return kScoreFp8 + 2 * int(s) + int(hadamard); }
int fp8_value(Scaling s) { return kValueFp8 + int(s); }

struct Variant {
  std::string model;    // the JSON case's "model"
  std::string scaling;  // q's, k's and v's ("" for unquantized inputs)
  bool hadamard;        // on q and k
  std::string remedy;   // the change from the kernel ("" for none)
  int score, value;     // ScoreSource, ValueSource
  bool floor;           // float64 attention (else: the pipeline below)
  Pipeline pipe;
  bool qk_truncated = false;  // Q·Kᵀ through the accumulator model
  bool v_rotated = false;
};

std::vector<Variant> variants() {
  std::vector<Variant> list;
  for (Scaling s : kScalings) {
    for (bool h : {false, true}) {
      list.push_back(
          {"floor", scaling_name(s), h, "", fp8_score(s, h), fp8_value(s), true, kFp8Kernel});
      list.push_back(
          {"kernel", scaling_name(s), h, "", fp8_score(s, h), fp8_value(s), false, kFp8Kernel});
      Pipeline unrounded = kFp8Kernel;
      unrounded.p = POperand::fp32;
      list.push_back(
          {"qk-only", scaling_name(s), h, "", fp8_score(s, h), kValueFp32, false, unrounded});
    }
  }
  Pipeline unrounded = kFp8Kernel;
  unrounded.p = POperand::fp32;
  for (Scaling s : kScalings) {
    list.push_back(
        {"v-only", scaling_name(s), false, "", kScoreFp32, fp8_value(s), false, unrounded});
  }
  const int base = fp8_score(Scaling::block, true), base_v = fp8_value(Scaling::block);
  list.push_back({"p-only", "", false, "", kScoreFp32, kValueFp32, false, kFp8Kernel});
  list.push_back({"qk+p", "block", true, "", base, kValueFp32, false, kFp8Kernel});
  list.push_back({"qk+v", "block", true, "", base, base_v, false, unrounded});
  list.push_back({"exact-inputs", "", false, "", kScoreFp32, kValueFp32, false, unrounded});
  // float64 attention of e4m3 q and k with v exact: what e4m3 q and k alone cost, whatever the
  // kernel does with them.
  for (bool h : {false, true}) {
    list.push_back({"floor-qk-only", "block", h, "", fp8_score(Scaling::block, h), kValueRef, true,
                    kFp8Kernel});
  }

  // One change each from the kernel at per-block scales with q and k rotated.
  list.push_back(
      {"kernel", "block", true, "v-block-64", base, kValueFp8Block64, false, kFp8Kernel});
  list.push_back(
      {"kernel", "block", true, "v-block-32", base, kValueFp8Block32, false, kFp8Kernel});
  for (int offset : {0, 4}) {
    Pipeline p = kFp8Kernel;
    p.max_offset = offset;
    list.push_back(
        {"kernel", "block", true, "max-offset-" + std::to_string(offset), base, base_v, false, p});
  }
  Pipeline unrounded_sums = kFp8Kernel;
  unrounded_sums.sums_rounded_p = false;
  list.push_back({"kernel", "block", true, "sums-of-unrounded-p", base, base_v, false,
                  unrounded_sums});
  Variant rotated{"kernel", "block", true, "v-hadamard", base, kValueFp8Rotated, false, kFp8Kernel};
  rotated.v_rotated = true;
  list.push_back(rotated);
  Pipeline bf16_pv{POperand::bf16, 0, kFp8Kernel.tile, kBf16MmaK, Accumulator::fp32};
  list.push_back({"kernel", "block", true, "pv-bf16", base, kValueBf16, false, bf16_pv});
  // q and k in bf16 (not rotated: bf16 needs no outlier spreading), v and P e4m3.
  list.push_back({"kernel", "block", false, "qk-bf16", kScoreBf16, base_v, false, kFp8Kernel});
  for (Accumulator acc : {Accumulator::truncated, Accumulator::truncated_two_level}) {
    Pipeline p = kFp8Kernel;
    p.acc = acc;
    const char* name =
        acc == Accumulator::truncated ? "acc-14bit-model" : "acc-14bit-two-level-model";
    Variant v{"kernel", "block", true, name, base, base_v, false, p};
    v.qk_truncated = true;
    list.push_back(v);
  }
  list.push_back({"bf16-kernel", "", false, "", kScoreBf16, kValueBf16, false, kBf16Kernel});
  return list;
}

// ---- the GPU's result, to set beside the emulation ---------------------------------------------

// Just enough JSON to read a bench result: objects, arrays, strings (\" and \\ escapes), numbers,
// true, false, null.
struct Json {
  enum class Kind { null, boolean, number, string, array, object } kind = Kind::null;
  bool boolean = false;
  double number = 0.0;
  std::string string;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;
  const Json* get(const std::string& key) const {
    for (const auto& [name, value] : members) {
      if (name == key) return &value;
    }
    return nullptr;
  }
};

class JsonReader {
 public:
  explicit JsonReader(std::string text) : text_(std::move(text)) {}
  bool read(Json& value) { return parse(value) && (skip(), at_ == text_.size()); }

 private:
  void skip() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool eat(char c) {
    skip();
    if (at_ < text_.size() && text_[at_] == c) return ++at_, true;
    return false;
  }
  bool word(const char* w) {
    const size_t n = std::char_traits<char>::length(w);
    if (text_.compare(at_, n, w) != 0) return false;
    at_ += n;
    return true;
  }
  bool parse_string(std::string& out) {
    if (!eat('"')) return false;
    while (at_ < text_.size() && text_[at_] != '"') {
      if (text_[at_] == '\\' && ++at_ == text_.size()) return false;
      out += text_[at_++];
    }
    return at_++ < text_.size();
  }
  bool parse(Json& value) {
    skip();
    if (at_ >= text_.size()) return false;
    const char c = text_[at_];
    if (c == '{') {
      value.kind = Json::Kind::object;
      ++at_;
      if (eat('}')) return true;
      do {
        std::string key;
        Json member;
        if (!parse_string(key) || !eat(':') || !parse(member)) return false;
        value.members.emplace_back(std::move(key), std::move(member));
      } while (eat(','));
      return eat('}');
    }
    if (c == '[') {
      value.kind = Json::Kind::array;
      ++at_;
      if (eat(']')) return true;
      do {
        value.items.emplace_back();
        if (!parse(value.items.back())) return false;
      } while (eat(','));
      return eat(']');
    }
    if (c == '"') return value.kind = Json::Kind::string, parse_string(value.string);
    if (word("true")) return value.kind = Json::Kind::boolean, value.boolean = true, true;
    if (word("false")) return value.kind = Json::Kind::boolean, true;
    if (word("null")) return true;
    const char* begin = text_.data() + at_;
    const auto [end, error] = std::from_chars(begin, text_.data() + text_.size(), value.number);
    if (error != std::errc()) return false;
    value.kind = Json::Kind::number;
    at_ += size_t(end - begin);
    return true;
  }
  std::string text_;
  size_t at_ = 0;
};

// fp8_accuracy.py's RMSEs: by (scaling, hadamard) for e4m3, ("", false) for bf16.
struct GpuResult {
  std::string file, commit, device;
  std::vector<int> shape;  // (batch, seqlen, heads, d)
  struct Row {
    std::string scaling;
    bool hadamard;
    double rmse;
  };
  std::vector<Row> rows;
  const double* find(const std::string& scaling, bool hadamard) const {
    for (const Row& r : rows) {
      if (r.scaling == scaling && r.hadamard == hadamard) return &r.rmse;
    }
    return nullptr;
  }
};

bool read_gpu_result(const std::string& path, GpuResult& gpu) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  Json root;
  if (!JsonReader(text.str()).read(root) || root.get("rows") == nullptr) return false;
  gpu.file = path.substr(path.find_last_of('/') + 1);  // its name only: no machine's paths
  if (const Json* c = root.get("commit")) gpu.commit = c->string;
  if (const Json* d = root.get("device")) gpu.device = d->string;
  if (const Json* settings = root.get("settings"); settings != nullptr && settings->get("shape")) {
    for (const Json& extent : settings->get("shape")->items)
      gpu.shape.push_back(int(extent.number));
  }
  for (const Json& row : root.get("rows")->items) {
    const Json* c = row.get("case");
    const Json* rmse = row.get("hfa");
    if (c == nullptr || rmse == nullptr || rmse->kind != Json::Kind::number) continue;
    const Json* dtype = c->get("dtype");
    if (dtype != nullptr && dtype->string == "bf16") {
      gpu.rows.push_back({"", false, rmse->number});
    } else if (const Json* s = c->get("scaling"); s != nullptr && c->get("hadamard") != nullptr) {
      gpu.rows.push_back({s->string, c->get("hadamard")->boolean, rmse->number});
    }
  }
  return true;
}

// ---- the run -----------------------------------------------------------------------------------

struct Options {
  int seqlen = 4096, heads = 8, rows = 512, draws = 4;
  uint64_t seed = 1;
  std::string out = "bench/results", commit, gpu = kDefaultGpuResult;
};

struct Result {
  double rmse;                // over every draw's sampled rows
  double standard_error;      // of that RMSE, from the sampling of rows
  std::vector<double> draws;  // each draw's RMSE
};

// The squared errors summed over d of each variant for every sampled row of one draw of the
// inputs (seed), into squared[variant][first + head · rows + r].
void run_draw(const Options& opt, const std::vector<Variant>& list, uint64_t seed,
              std::vector<std::vector<double>>& squared, size_t first) {
  const Shape shape{opt.seqlen, opt.heads};
  Rng rng(seed);
  const std::vector<double> q = outlier_inputs(shape, rng), k = outlier_inputs(shape, rng),
                            v = outlier_inputs(shape, rng);
  auto to_fp32 = [](const std::vector<double>& x) {
    return std::vector<float>(x.begin(), x.end());
  };
  const std::vector<float> qf = to_fp32(q), kf = to_fp32(k), vf = to_fp32(v);
  float signs[kHeadDim];
  for (int i = 0; i < kHeadDim; ++i) signs[i] = quant::hadamard_sign(kSignsSeed, i);

  // In ScoreSource's and ValueSource's order.
  std::vector<Fp8Tensor> q8, k8, v8;
  for (Scaling s : kScalings) {
    for (bool h : {false, true}) {
      q8.push_back(quantize(qf, shape, s, kScaleBlock, h ? signs : nullptr));
      k8.push_back(quantize(kf, shape, s, kScaleBlock, h ? signs : nullptr));
    }
    v8.push_back(quantize(vf, shape, s, kScaleBlock, nullptr));
  }
  v8.push_back(quantize(vf, shape, Scaling::block, 64, nullptr));
  v8.push_back(quantize(vf, shape, Scaling::block, 32, nullptr));
  v8.push_back(quantize(vf, shape, Scaling::block, kScaleBlock, signs));

  // The sampled rows: a head's first opt.rows of a seeded shuffle.
  Rng pick(seed ^ 0x5eed5eed5eedull);
  std::vector<std::vector<int>> sampled(opt.heads);
  for (auto& rows : sampled) {
    std::vector<int> all(opt.seqlen);
    std::iota(all.begin(), all.end(), 0);
    for (int i = 0; i < opt.rows; ++i) {
      std::swap(all[i], all[i + int(pick.next() % uint64_t(opt.seqlen - i))]);
    }
    rows.assign(all.begin(), all.begin() + opt.rows);
    std::sort(rows.begin(), rows.end());
  }

  for (int head = 0; head < opt.heads; ++head) {
    auto identity = [](double x) { return x; };
    auto fp32 = [](double x) { return double(float(x)); };
    auto to_bf16 = [](double x) { return double(bf16(float(x))); };
    std::vector<Operand> qs, ks, vs;
    qs.push_back(plain_operand(q, shape, head, identity));
    ks.push_back(plain_operand(k, shape, head, identity));
    vs.push_back(plain_operand(v, shape, head, identity));
    qs.push_back(plain_operand(q, shape, head, fp32));
    ks.push_back(plain_operand(k, shape, head, fp32));
    vs.push_back(plain_operand(v, shape, head, fp32));
    qs.push_back(plain_operand(q, shape, head, to_bf16));
    ks.push_back(plain_operand(k, shape, head, to_bf16));
    vs.push_back(plain_operand(v, shape, head, to_bf16));
    for (size_t i = 0; i < q8.size(); ++i) {
      qs.push_back(fp8_operand(q8[i], shape, head));
      ks.push_back(fp8_operand(k8[i], shape, head));
    }
    for (const Fp8Tensor& t : v8) vs.push_back(fp8_operand(t, shape, head));

#pragma omp parallel
    {
      Scratch w(opt.seqlen);
      // A row's S per (score source, truncated): each computed once, for every variant that
      // reads it.
      std::vector<std::vector<float>> scores(2 * kScoreSources, std::vector<float>(opt.seqlen));
      std::vector<float> scale_log2(2 * kScoreSources);
      std::vector<char> have(2 * kScoreSources);
      double ref[kHeadDim], out[kHeadDim];
#pragma omp for schedule(dynamic, 1)
      for (int r = 0; r < opt.rows; ++r) {
        const int row = sampled[head][r];
        exact_attention(qs[kScoreRef], ks[kScoreRef], vs[kValueRef], row, opt.seqlen, w, ref);
        std::fill(have.begin(), have.end(), 0);
        for (size_t i = 0; i < list.size(); ++i) {
          const Variant& x = list[i];
          if (x.floor) {
            exact_attention(qs[x.score], ks[x.score], vs[x.value], row, opt.seqlen, w, out);
          } else {
            const int key = 2 * x.score + int(x.qk_truncated);
            if (!have[key]) {
              const int mma_k = x.score == kScoreBf16 ? kBf16MmaK : kFp8MmaK;
              scale_log2[key] = kernel_scores(qs[x.score], ks[x.score], row, opt.seqlen, mma_k,
                                              x.qk_truncated, scores[key].data());
              have[key] = 1;
            }
            kernel_softmax_pv(scores[key].data(), scale_log2[key], vs[x.value], opt.seqlen, x.pipe,
                              x.v_rotated ? signs : nullptr, w, out);
          }
          double e = 0.0;
          for (int c = 0; c < kHeadDim; ++c) e += (out[c] - ref[c]) * (out[c] - ref[c]);
          squared[i][first + size_t(head) * size_t(opt.rows) + size_t(r)] = e;
        }
      }
    }
  }
}

// RMSE of each variant over every draw's sampled rows, each draw's own, and the standard error
// of the pooled one from the sampling of rows (delta method: se(RMSE) = se(mean square) /
// (2 · RMSE)). A draw's inputs share their keys across its rows, which that error does not see;
// the spread of the draws does.
std::vector<Result> run(const Options& opt, const std::vector<Variant>& list) {
  const size_t per_draw = size_t(opt.heads) * size_t(opt.rows);
  const size_t units = per_draw * size_t(opt.draws);
  std::vector<std::vector<double>> squared(list.size(), std::vector<double>(units));
  const auto t0 = std::chrono::steady_clock::now();
  for (int d = 0; d < opt.draws; ++d) {
    run_draw(opt, list, opt.seed + uint64_t(d), squared, size_t(d) * per_draw);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "fp8_accuracy_floor: draw %d of %d done, %.0f s\n", d + 1, opt.draws,
                 seconds);
  }
  std::vector<Result> results;
  for (const std::vector<double>& e : squared) {
    Result r{0.0, 0.0, {}};
    double mean = 0.0, var = 0.0;
    for (double x : e) mean += x / kHeadDim;
    mean /= double(units);
    for (double x : e) var += (x / kHeadDim - mean) * (x / kHeadDim - mean);
    var /= double(units - 1);
    r.rmse = std::sqrt(mean);
    r.standard_error = std::sqrt(var / double(units)) / (2.0 * r.rmse);
    for (int d = 0; d < opt.draws; ++d) {
      const auto begin = e.begin() + std::ptrdiff_t(size_t(d) * per_draw);
      const double sum = std::accumulate(begin, begin + std::ptrdiff_t(per_draw), 0.0);
      r.draws.push_back(std::sqrt(sum / double(per_draw * kHeadDim)));
    }
    results.push_back(std::move(r));
  }
  return results;
}

// ---- output ------------------------------------------------------------------------------------

std::string number(double x) {  // shortest round-trip form, as Python's json writes it
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, x).ptr);
}

std::string sci(double x) {  // benchlib.sci's
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", x);
  return buf;
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

const char* p_name(POperand p) {
  return p == POperand::e4m3 ? "e4m3" : p == POperand::bf16 ? "bf16" : "fp32";
}

std::string case_json(const Variant& x) {
  std::string c = "{\"model\": " + quoted(x.model);
  c += ", \"scaling\": " + (x.scaling.empty() ? std::string("null") : quoted(x.scaling));
  c += std::string(", \"hadamard\": ") + (x.hadamard ? "true" : "false");
  if (!x.remedy.empty()) c += ", \"remedy\": " + quoted(x.remedy);
  if (!x.floor) {
    c += ", \"p\": " + quoted(p_name(x.pipe.p)) +
         ", \"max_offset\": " + std::to_string(x.pipe.max_offset) +
         ", \"tile\": " + std::to_string(x.pipe.tile) +
         ", \"row_sums\": " + quoted(x.pipe.sums_rounded_p ? "rounded-p" : "fp32-p");
  }
  return c + "}";
}

struct Report {
  const Options& opt;
  const std::vector<Variant>& list;
  const std::vector<Result>& results;
  const GpuResult* gpu;
  std::string date;

  // The result of the variant with these fields (nullptr: not computed).
  const Result* find(const std::string& model, const std::string& scaling, bool hadamard,
                     const std::string& remedy = "") const {
    for (size_t i = 0; i < list.size(); ++i) {
      const Variant& x = list[i];
      if (x.model == model && x.scaling == scaling && x.hadamard == hadamard &&
          x.remedy == remedy) {
        return &results[i];
      }
    }
    return nullptr;
  }
  const Result& at(const std::string& model, const std::string& scaling, bool hadamard,
                   const std::string& remedy = "") const {
    return *find(model, scaling, hadamard, remedy);
  }

  std::string settings_json() const {
    std::string s = "{\"shape\": [1, " + std::to_string(opt.seqlen) + ", " +
                    std::to_string(opt.heads) + ", " + std::to_string(kHeadDim) + "]";
    s += ", \"block\": " + std::to_string(kScaleBlock) +
         ", \"draws\": " + std::to_string(opt.draws) + ", \"seeds\": [" + std::to_string(opt.seed) +
         ", " + std::to_string(opt.seed + uint64_t(opt.draws) - 1) + "]";
    s += ", \"hadamard_signs_seed\": " + std::to_string(kSignsSeed);
    s += ", \"inputs\": \"N(0,1) + 0.1% N(0,100) outliers (xoshiro256**, Box-Muller)\"";
    s += ", \"reference\": \"float64 of the unquantized inputs\"";
    s += ", \"sampled_query_rows_per_head\": " + std::to_string(opt.rows) + ", \"keys\": \"all\"";
    s += ", \"accumulator_model_bits\": " + std::to_string(kModelAccumulatorBits);
    if (gpu != nullptr) {
      s += ", \"gpu\": {\"file\": " + quoted(gpu->file) + ", \"commit\": " + quoted(gpu->commit) +
           ", \"device\": " + quoted(gpu->device) + "}";
    }
    return s + "}";
  }

  std::string json() const {
    std::string j = "{\n \"what\": \"fp8-accuracy-floor\",\n \"commit\": " + quoted(opt.commit) +
                    ",\n \"date\": " + quoted(date) + ",\n \"device\": \"cpu (emulation)\"" +
                    ",\n \"versions\": {\"compiler\": " + quoted(__VERSION__) + "}" +
                    ",\n \"settings\": " + settings_json() + ",\n \"rows\": [";
    for (size_t i = 0; i < list.size(); ++i) {
      const Variant& x = list[i];
      j += i ? ",\n  " : "\n  ";
      j += "{\"case\": " + case_json(x) +
           ", \"metric\": \"rmse\", \"hfa\": " + number(results[i].rmse) +
           ", \"sampling_stderr\": " + number(results[i].standard_error) + ", \"draws\": [";
      for (size_t d = 0; d < results[i].draws.size(); ++d) {
        j += (d ? ", " : "") + number(results[i].draws[d]);
      }
      j += "]";
      const double* g = nullptr;
      if (gpu != nullptr && x.model == "kernel" && x.remedy.empty())
        g = gpu->find(x.scaling, x.hadamard);
      if (gpu != nullptr && x.model == "bf16-kernel") g = gpu->find("", false);
      if (g != nullptr) j += ", \"gpu\": " + number(*g);
      j += "}";
    }
    return j + "\n ]\n}\n";
  }

  // The pooled RMSE and, in brackets, the range of the draws' own.
  static std::string cell(const Result& r) {
    const auto [low, high] = std::minmax_element(r.draws.begin(), r.draws.end());
    return sci(r.rmse) + " (" + sci(*low) + " – " + sci(*high) + ")";
  }
  std::string versus_gpu(const Result& r, const std::string& scaling, bool hadamard) const {
    const double* g = gpu != nullptr ? gpu->find(scaling, hadamard) : nullptr;
    if (g == nullptr) return "– | –";
    const auto [low, high] = std::minmax_element(r.draws.begin(), r.draws.end());
    char ratio[48];
    std::snprintf(ratio, sizeof ratio, "%.2f (%.2f – %.2f)", r.rmse / *g, *low / *g, *high / *g);
    return sci(*g) + " | " + ratio;
  }
  static std::string relative(const Result& r, const Result& base) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.2f", r.rmse / base.rmse);
    return buf;
  }

  std::string markdown() const {
    std::ostringstream m;
    m << "# FP8 forward accuracy: where the error comes from (CPU emulation) (" << date << ")\n\n"
      << "- device: cpu (emulation)\n- commit: `" << opt.commit << "`\n"
      << "- settings: " << settings_json() << "\n\n"
      << "RMSE of out against float64 attention of the unquantized inputs, pooled over "
      << opt.draws << " draws of the inputs (seeds " << opt.seed << " … "
      << opt.seed + uint64_t(opt.draws) - 1 << "), " << opt.rows
      << " sampled query rows of each head a draw (all keys); in brackets "
         "the range of the draws' own RMSEs. q, k and v are quantized with the same scaling "
         "(blocks of "
      << kScaleBlock << " rows), Hadamard on q and k only.";
    if (gpu != nullptr) {
      m << " GPU: `" << gpu->file << "` (" << gpu->device << ", " << gpu->commit
        << ", all rows, its own random inputs).";
    }
    m << "\n\n## Floor and kernel\n\n"
      << "| scaling | Hadamard | floor: float64 of e4m3 inputs | q, k e4m3 only | kernel emulated"
         " | GPU | emulated ÷ GPU |\n|---|---|---|---|---|---|---|\n";
    for (Scaling s : kScalings) {
      for (bool h : {false, true}) {
        const Result& kernel = at("kernel", scaling_name(s), h);
        m << "| " << scaling_name(s) << " | " << (h ? "yes" : "no") << " | "
          << cell(at("floor", scaling_name(s), h)) << " | "
          << cell(at("qk-only", scaling_name(s), h)) << " | " << cell(kernel) << " | "
          << versus_gpu(kernel, scaling_name(s), h) << " |\n";
      }
    }
    const Result& bf16 = at("bf16-kernel", "", false);
    m << "| bf16 forward | – | – | – | " << cell(bf16) << " | " << versus_gpu(bf16, "", false)
      << " |\n";

    const Result& kernel = at("kernel", "block", true);
    const Result& qk = at("qk-only", "block", true);
    const Result& v = at("v-only", "block", false);
    const Result& p = at("p-only", "", false);
    m << "\n## Decomposition (per-block scales; the kernel with only these errors, the rest "
         "exact)\n\n| error sources | RMSE |\n|---|---|\n"
      << "| q, k e4m3 (Hadamard) | " << cell(qk) << " |\n"
      << "| q, k e4m3 (no Hadamard) | " << cell(at("qk-only", "block", false)) << " |\n"
      << "| v e4m3 (per block) | " << cell(v) << " |\n"
      << "| v e4m3 (per tensor) | " << cell(at("v-only", "tensor", false)) << " |\n"
      << "| P e4m3 (max offset 8) | " << cell(p) << " |\n"
      << "| q, k (Hadamard) + P | " << cell(at("qk+p", "block", true)) << " |\n"
      << "| q, k (Hadamard) + v | " << cell(at("qk+v", "block", true)) << " |\n"
      << "| all: the kernel (Hadamard) | " << cell(kernel) << " |\n"
      << "| q, k e4m3 (Hadamard), float64 attention, v exact | "
      << cell(at("floor-qk-only", "block", true)) << " |\n"
      << "| q, k e4m3 (no Hadamard), float64 attention, v exact | "
      << cell(at("floor-qk-only", "block", false)) << " |\n"
      << "| √(q,k² + v² + P²), if they added as independent errors | "
      << sci(std::sqrt(qk.rmse * qk.rmse + v.rmse * v.rmse + p.rmse * p.rmse)) << " |\n"
      << "| none: fp32 inputs, P unrounded (fp32 arithmetic + bf16 out) | "
      << cell(at("exact-inputs", "", false)) << " |\n";

    m << "\n## Remedies (per-block scales, Hadamard on q and k; one change each)\n\n"
      << "| change | RMSE | ÷ kernel | in kernel terms |\n|---|---|---|---|\n"
      << "| none (the kernel) | " << cell(kernel) << " | 1.00 | |\n";
    struct Remedy {
      const char* name;
      const char* what;
      const char* cost;
    };
    const Remedy remedies[] = {
        {"v-block-64", "v scales per 64 keys",
         "not this kernel's (one v scale a 128-key tile); folded exactly here"},
        {"v-block-32", "v scales per 32 keys", "idem"},
        {"max-offset-0", "max offset 0 (P ≤ 1)", "a constant"},
        {"max-offset-4", "max offset 4 (P ≤ 16)", "a constant"},
        {"sums-of-unrounded-p", "row sums of the fp32 P (the kernel before P·1, session 10)",
         "an FADD a score instead of the P·1 GEMM"},
        {"v-hadamard", "Hadamard on v too, O rotated back after the normalization",
         "the quantizer rotates v; the epilogue (or a pass) rotates O back"},
        {"pv-bf16", "P·V in bf16 (P and v bf16), Q·Kᵀ e4m3",
         "the second GEMM at bf16 rate, v 2 bytes an element, P 16-bit registers"},
        {"qk-bf16", "Q·Kᵀ in bf16 (q, k bf16, not rotated), P·V e4m3",
         "the first GEMM at bf16 rate, q and k 2 bytes an element"},
        {"acc-14bit-model", "MODEL: FP8 accumulators keep 14 bits (both GEMMs)",
         "a model of the hardware, not a measurement"},
        {"acc-14bit-two-level-model", "MODEL: 14 bits, P·V promoted to fp32 every 128 keys",
         "idem; FlashAttention-3's two-level accumulation"}};
    for (const Remedy& r : remedies) {
      const bool rotated = std::string(r.name) != "qk-bf16";
      const Result& x = at("kernel", "block", rotated, r.name);
      m << "| " << r.what << " | " << cell(x) << " | " << relative(x, kernel) << " | " << r.cost
        << " |\n";
    }
    return m.str();
  }
};

std::string utc_now(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  return bool(f);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (const char* c = std::getenv("HFA_COMMIT")) opt.commit = c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fp8_accuracy_floor: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--quick") {
      opt.seqlen = 512;
      opt.heads = 2;
      opt.rows = 64;
      opt.draws = 2;
    } else if (a == "--rows") {
      opt.rows = std::stoi(value());
    } else if (a == "--draws") {
      opt.draws = std::stoi(value());
    } else if (a == "--seed") {
      opt.seed = std::stoull(value());
    } else if (a == "--out") {
      opt.out = value();
    } else if (a == "--commit") {
      opt.commit = value();
    } else if (a == "--gpu") {
      opt.gpu = value();
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--quick] [--rows N] [--draws N] [--seed N] [--out DIR] [--commit SHA] "
          "[--gpu FILE|none]\n",
          argv[0]);
      return 2;
    }
  }
  if (opt.rows < 2 || opt.rows > opt.seqlen || opt.draws < 1) {
    std::fprintf(stderr, "fp8_accuracy_floor: --rows must be in [2, %d], --draws at least 1\n",
                 opt.seqlen);
    return 2;
  }
  if (opt.commit.empty()) {
    std::fprintf(stderr,
                 "fp8_accuracy_floor: no commit (--commit or HFA_COMMIT); writing 'unknown'\n");
    opt.commit = "unknown";
  }
  GpuResult gpu;
  bool have_gpu = opt.gpu != "none" && read_gpu_result(opt.gpu, gpu);
  if (opt.gpu != "none" && !have_gpu) {
    std::fprintf(stderr, "fp8_accuracy_floor: could not read %s; no GPU column\n", opt.gpu.c_str());
  }
  if (have_gpu && gpu.shape != std::vector<int>{1, opt.seqlen, opt.heads, kHeadDim}) {
    have_gpu = false;  // another problem (--quick): nothing to compare with
  }

  const std::vector<Variant> list = variants();
  const std::vector<Result> results = run(opt, list);
  const Report report{opt, list, results, have_gpu ? &gpu : nullptr, utc_now("%Y-%m-%dT%H:%M:%SZ")};
  for (size_t i = 0; i < list.size(); ++i) {
    std::printf("fp8_accuracy_floor: %s: rmse %s\n", case_json(list[i]).c_str(),
                Report::cell(results[i]).c_str());
  }
  const std::string stem =
      opt.out + "/" + utc_now("%Y-%m-%d") + "-fp8-accuracy-floor-" + opt.commit;
  if (!write_file(stem + ".json", report.json()) || !write_file(stem + ".md", report.markdown())) {
    std::fprintf(stderr, "fp8_accuracy_floor: could not write %s.{json,md}\n", stem.c_str());
    return 1;
  }
  std::printf("fp8_accuracy_floor: wrote %s.json, %s.md\n", stem.c_str(), stem.c_str());
  return 0;
}
