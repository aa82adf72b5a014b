// hfa::quantize_fp8 on the CPU against a slow reference written apart from src/quant (a
// butterfly in plain float, encoding by search in reference.hpp), the rotation against float64,
// the scale shapes of each granularity, varlen blocks, and every rejection.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/host_tensor.hpp"
#include "hfa/hfa.hpp"
#include "quant/fp8_input.hpp"
#include "quant/hadamard.hpp"
#include "quant/reference.hpp"

namespace hfa::test {
namespace {

constexpr float kMinNormal = 0x1p-126f;

float flush(float x) { return std::fabs(x) < kMinNormal ? std::copysign(0.0f, x) : x; }

// y = H_d · diag(signs) · x / sqrt(d) in fp32, butterflies h = 1, 2, ..., d/2 (the documented
// order), subnormals flushed, as the library promises.
std::vector<float> reference_rotate(std::vector<float> x, const std::vector<float>& signs) {
  const int d = static_cast<int>(x.size());
  for (int i = 0; i < d; ++i) x[i] = flush(x[i]) * signs[i];
  for (int h = 1; h < d; h *= 2)
    for (int i = 0; i < d; ++i)
      if ((i & h) == 0) {
        const float a = x[i], b = x[i + h];
        x[i] = flush(a + b);
        x[i + h] = flush(a - b);
      }
  const float norm = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (float& v : x) v = flush(v * norm);
  return x;
}

float reference_scale(float amax) {
  if (!std::isfinite(amax)) return std::numeric_limits<float>::quiet_NaN();
  if (amax == 0.0f) return 1.0f;
  return std::max(flush(amax / 448.0f), kMinNormal);
}

struct Case {
  Fp8Granularity granularity = Fp8Granularity::per_block;
  int32_t block_rows = 16;
  std::vector<int32_t> lengths = {40, 0, 7};  // varlen when `varlen`; else batch × seqlen
  bool varlen = true;
  int64_t heads = 3, d = 64;
  bool rotate = true;
  DType dtype = DType::f32;
  int64_t padding = 0;  // elements after each row of x: strided rows
};

int64_t total_of(const Case& c) {
  int64_t t = 0;
  for (int32_t n : c.lengths) t += n;
  return t;
}

int64_t blocks_of(const Case& c) {
  int64_t longest = 0;
  for (int32_t n : c.lengths) longest = std::max<int64_t>(longest, n);
  return (longest + c.block_rows - 1) / c.block_rows;
}

std::vector<int64_t> scale_shape(const Case& c) {
  const int64_t batch = static_cast<int64_t>(c.lengths.size());
  if (c.granularity == Fp8Granularity::per_tensor) return {1};
  if (c.granularity == Fp8Granularity::per_head) return {batch, c.heads};
  return {batch, blocks_of(c), c.heads};
}

// Fresh normals with 0.1 % outliers of σ 10, then an all-zero row group, values at the
// saturation edge, ±0 and subnormals sprinkled in.
void fill(HostTensor& x, const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform;
  const double specials[] = {0.0, -0.0, 1e-40, -3e-39, 448.0, -448.0, 449.0, 464.0, 1e-7};
  for (int64_t e = 0; e < x.numel(); ++e) {
    double v = normal(rng) * (uniform(rng) < 1e-3 ? 10.0 : 1.0);
    if (uniform(rng) < 0.01) v = specials[rng() % std::size(specials)];
    x.set(e, v);
  }
  const int64_t zero_rows = std::min<int64_t>(c.block_rows, x.shape()[0]);  // the first block
  for (int64_t e = 0; e < zero_rows * c.heads * c.d && !c.varlen; ++e) x.set(e, 0.0);
  if (c.varlen)
    for (int64_t e = 0; e < std::min<int64_t>(c.lengths[0], c.block_rows) * c.heads * c.d; ++e)
      if ((e / c.d) % c.heads == 0) x.set(e, 0.0);  // head 0 of sequence 0's first block
}

struct Output {
  std::vector<uint8_t> codes;
  std::vector<float> scale;
  Status status;
};

std::vector<float> signs_for(int64_t d, uint64_t seed) {
  std::vector<float> s(static_cast<std::size_t>(d));
  const Tensor t = make_tensor(s.data(), DType::f32, {d});
  EXPECT_TRUE(hadamard_signs(seed, t).is_ok());
  return s;
}

struct Inputs {
  Case c;
  HostTensor x;
  std::vector<int32_t> cu;
  std::vector<float> signs;
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  Inputs in{c, {}, {0}, {}};
  const int64_t batch = static_cast<int64_t>(c.lengths.size());
  for (int32_t n : c.lengths) in.cu.push_back(in.cu.back() + n);
  const std::vector<int64_t> shape = c.varlen
                                         ? std::vector<int64_t>{total_of(c), c.heads, c.d}
                                         : std::vector<int64_t>{batch, c.lengths[0], c.heads, c.d};
  in.x = HostTensor(c.dtype, shape, c.padding);
  fill(in.x, c, seed);
  if (c.rotate) in.signs = signs_for(c.d, seed);
  return in;
}

Output run(Inputs& in) {
  const Case& c = in.c;
  Output out;
  out.codes.assign(static_cast<std::size_t>(in.x.numel()), 0xee);
  int64_t count = 1;
  for (int64_t n : scale_shape(c)) count *= n;
  out.scale.assign(static_cast<std::size_t>(count), -7.0f);
  const Tensor x = in.x.view();
  Tensor codes = x;
  codes.data = out.codes.data();
  codes.dtype = HFA_E4M3;
  for (int dim = x.rank - 1, stride = 1; dim >= 0; stride *= int(x.shape[dim]), --dim)
    codes.stride[dim] = stride;
  Tensor scale = make_tensor(out.scale.data(), DType::f32, {1});
  const std::vector<int64_t> shape = scale_shape(c);
  scale.rank = static_cast<int32_t>(shape.size());
  for (int dim = scale.rank - 1, stride = 1; dim >= 0; stride *= int(shape[dim]), --dim) {
    scale.shape[dim] = shape[dim];
    scale.stride[dim] = stride;
  }
  const Tensor cu = make_tensor(in.cu.data(), DType::i32, {int64_t(in.cu.size())});
  const Tensor signs = make_tensor(in.signs.data(), DType::f32, {c.d});
  QuantizeFp8Options o;
  o.granularity = c.granularity;
  o.block_rows = c.granularity == Fp8Granularity::per_block ? c.block_rows : 0;
  o.cu_seqlens = c.varlen ? &cu : nullptr;
  o.signs = c.rotate ? &signs : nullptr;
  out.status = quantize_fp8(x, codes, scale, o);
  return out;
}

// Row r (flat token) of head h as the reference sees it: rotated or not.
std::vector<float> reference_row(const Inputs& in, int64_t token, int64_t h) {
  std::vector<float> row(static_cast<std::size_t>(in.c.d));
  for (int64_t j = 0; j < in.c.d; ++j)
    row[j] = static_cast<float>(in.x.get((token * in.c.heads + h) * in.c.d + j));
  if (!in.c.rotate) {
    for (float& v : row) v = flush(v);
    return row;
  }
  return reference_rotate(row, in.signs);
}

void expect_matches_reference(Inputs& in) {
  const Case& c = in.c;
  const Output got = run(in);
  ASSERT_TRUE(got.status.is_ok()) << got.status.message();
  const int64_t blocks = c.granularity == Fp8Granularity::per_block ? blocks_of(c) : 1;
  auto group = [&](int64_t b, int64_t i, int64_t h) -> int64_t {
    if (c.granularity == Fp8Granularity::per_tensor) return 0;
    const int64_t block = c.granularity == Fp8Granularity::per_block ? i / c.block_rows : 0;
    return (b * blocks + block) * c.heads + h;
  };
  std::vector<float> amax(got.scale.size(), 0.0f);
  std::vector<std::vector<float>> rows;
  for (std::size_t b = 0; b < c.lengths.size(); ++b)
    for (int64_t i = 0; i < c.lengths[b]; ++i)
      for (int64_t h = 0; h < c.heads; ++h) {
        rows.push_back(reference_row(in, in.cu[b] + i, h));
        for (float v : rows.back())
          amax[group(b, i, h)] = std::isnan(v) || std::isnan(amax[group(b, i, h)])
                                     ? NAN
                                     : std::max(amax[group(b, i, h)], std::fabs(v));
      }
  for (std::size_t g = 0; g < amax.size(); ++g) {
    const float want = reference_scale(amax[g]);
    ASSERT_TRUE(std::memcmp(&want, &got.scale[g], 4) == 0 ||
                (std::isnan(want) && std::isnan(got.scale[g])))
        << "group " << g << ": scale " << got.scale[g] << ", reference " << want;
  }
  const auto mags = quant::test::finite_magnitudes(quant::test::kE4M3Spec);
  std::size_t n = 0;
  for (std::size_t b = 0; b < c.lengths.size(); ++b)
    for (int64_t i = 0; i < c.lengths[b]; ++i)
      for (int64_t h = 0; h < c.heads; ++h, ++n)
        for (int64_t j = 0; j < c.d; ++j) {
          const float scale = reference_scale(amax[group(b, i, h)]);
          const uint8_t want = quant::test::reference_encode(quant::test::kE4M3Spec, mags,
                                                             flush(rows[n][j] / scale));
          const std::size_t at = static_cast<std::size_t>(((in.cu[b] + i) * c.heads + h) * c.d + j);
          ASSERT_EQ(got.codes[at], want) << "sequence " << b << " row " << i << " head " << h
                                         << " column " << j << ": y " << rows[n][j];
        }
}

TEST(QuantizeFp8, MatchesTheReferenceForEveryGranularity) {
  uint64_t seed = 1;
  for (auto g : {Fp8Granularity::per_tensor, Fp8Granularity::per_head, Fp8Granularity::per_block})
    for (bool rotate : {false, true})
      for (bool varlen : {false, true})
        for (int64_t d : {64, 128, 256}) {
          Case c;
          c.granularity = g, c.rotate = rotate, c.varlen = varlen, c.d = d;
          c.dtype = d == 128 ? DType::bf16 : d == 256 ? DType::f16 : DType::f32;
          if (!varlen) c.lengths = {33, 33};
          c.padding = d == 64 ? 8 : 0;
          SCOPED_TRACE(testing::Message() << "granularity " << int(g) << " rotate " << rotate
                                          << " varlen " << varlen << " d " << d);
          Inputs in = make_inputs(c, seed++);
          expect_matches_reference(in);
        }
}

TEST(QuantizeFp8, AnyHeadDimWithoutRotation) {
  Case c;
  c.d = 40, c.rotate = false, c.varlen = false, c.lengths = {5};
  Inputs in = make_inputs(c, 3);
  expect_matches_reference(in);
}

TEST(QuantizeFp8, VarlenBlocksRestartAtEachSequenceAndEmptyBlocksGetScaleOne) {
  Case c;  // lengths 40, 0, 7 with blocks of 16: 3 blocks for the first, none and 1 for the rest
  c.rotate = false;
  Inputs in = make_inputs(c, 5);
  for (int64_t e = 0; e < in.x.numel(); ++e) in.x.set(e, 1.0);  // amax 1 wherever a row is
  const Output got = run(in);
  ASSERT_TRUE(got.status.is_ok()) << got.status.message();
  const int64_t blocks = 3;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t k = 0; k < blocks; ++k)
      for (int64_t h = 0; h < c.heads; ++h) {
        const bool has_rows = k * c.block_rows < c.lengths[b];
        EXPECT_EQ(got.scale[(b * blocks + k) * c.heads + h], has_rows ? 1.0f / 448 : 1.0f)
            << "sequence " << b << " block " << k;
      }
}

TEST(QuantizeFp8, ScaleOfAZeroGroupIsOneAndOfATinyGroupTheSmallestNormal) {
  Case c;
  c.granularity = Fp8Granularity::per_tensor, c.rotate = false, c.varlen = false;
  c.lengths = {2}, c.heads = 1, c.d = 4;
  for (double v : {0.0, 2e-38}) {  // 2e-38 / 448 is below fp32's normals
    Inputs in = make_inputs(c, 1);
    for (int64_t e = 0; e < in.x.numel(); ++e) in.x.set(e, e == 3 ? v : 0.0);
    const Output got = run(in);
    ASSERT_TRUE(got.status.is_ok());
    EXPECT_EQ(got.scale[0], v == 0.0 ? 1.0f : kMinNormal);
  }
}

// --- encoding by a bracketed reciprocal (the GPU's, quant/fp8_input.hpp) -----------------------

// Values whose quotient lands on or next to a rounding boundary of e4m3 (a midpoint between two
// codes, the saturation edge, the flush to zero), beside random ones, zeros, subnormals, inf and
// NaN: wherever both bracket products give one code, it is the quotient's.
TEST(QuantizeFp8Bracket, AgreeingProductsGiveTheQuotientsCode) {
  std::vector<float> midpoints;  // between consecutive non-negative codes, exact in fp32
  for (int c = 0; c < 0x7e; ++c)
    midpoints.push_back((quant::e4m3_decode(uint8_t(c)) + quant::e4m3_decode(uint8_t(c + 1))) / 2);
  midpoints.push_back(464.0f);  // 448's neighbour 480 does not exist: satfinite
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto nudge = [](float x, int ulps) {
    return quant::from_bits(quant::bits_of(x) + static_cast<uint32_t>(ulps));
  };
  int64_t random_values = 0, random_undecided = 0, boundary_values = 0, boundary_decided = 0;
  for (const float norm :
       {1.0f, quant::hadamard_norm(64), quant::hadamard_norm(128), quant::hadamard_norm(256)})
    for (int trial = 0; trial < 3000; ++trial) {
      // amax over 2^-130 .. 2^127, at times exactly 0, around the bracket's smallest scale, or
      // not finite.
      const int kind = trial % 10;
      float amax = std::ldexp(1.0f + 0.5f * (unit(rng) + 1.0f), int(rng() % 258) - 130);
      if (kind == 0) amax = 0.0f;
      if (kind == 1) amax = std::ldexp(448.0f, -116) * (1.0f + 0.01f * unit(rng));
      if (kind == 2) amax = trial % 20 == 2 ? INFINITY : NAN;
      const float scale = quant::fp8_input_scale(quant::amax_from_abs_bits(quant::abs_bits(amax)));
      const quant::Fp8InputDivisor d = quant::fp8_input_divisor(scale, norm);
      EXPECT_EQ(d.bracketed, !(scale < 0x1p-116f)) << scale;
      std::vector<std::pair<float, bool>> values;  // v, on a boundary
      for (int i = 0; i < 64; ++i) values.push_back({unit(rng) * amax / norm, false});
      for (int i = 0; i < 64; ++i) {
        const float m = midpoints[rng() % midpoints.size()] * (rng() % 2 ? -1.0f : 1.0f);
        values.push_back({nudge(m * scale / norm, int(rng() % 81) - 40), true});
      }
      for (int i = 0; i < 8; ++i)  // around the flush of v · norm to zero
        values.push_back({nudge(0x1p-126f / norm, int(rng() % 41) - 20), true});
      for (float v : {0.0f, -0.0f, 1e-40f, -1e-41f, INFINITY, -INFINITY, NAN, 2 * amax / norm})
        values.push_back({v, true});
      for (std::size_t i = 0; i + 1 < values.size(); i += 2) {
        const float v0 = values[i].first, v1 = values[i + 1].first;
        const uint16_t below = quant::fp8_input_encode_bracket(v0, v1, d.below);
        const uint16_t above = quant::fp8_input_encode_bracket(v0, v1, d.above);
        const uint16_t want = quant::fp8_input_encode_exact(v0, v1, d);
        const bool decided = d.bracketed && below == above;
        if (decided) {
          ASSERT_EQ(below, want) << "v " << v0 << ", " << v1 << " scale " << scale << " norm "
                                 << norm;
        }
        const bool boundary = values[i].second || values[i + 1].second;
        (boundary ? boundary_values : random_values) += 2;
        if (boundary) boundary_decided += decided ? 2 : 0;
        if (!boundary && d.bracketed) random_undecided += decided ? 0 : 2;
      }
    }
  EXPECT_LT(random_undecided, random_values / 1000) << "of " << random_values;
  EXPECT_GT(boundary_decided, boundary_values / 4) << "of " << boundary_values;
  std::printf("bracket: %lld of %lld random values undecided, %lld of %lld on boundaries decided\n",
              (long long)random_undecided, (long long)random_values, (long long)boundary_decided,
              (long long)boundary_values);
}

// --- the rotation ------------------------------------------------------------------------------

std::vector<float> normal_row(int64_t d, uint64_t seed, double outlier_every = 0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<std::size_t>(d));
  for (int64_t i = 0; i < d; ++i)
    x[i] = normal(rng) * (outlier_every > 0 && i % int64_t(outlier_every) == 3 ? 10.0f : 1.0f);
  return x;
}

std::vector<float> rotated(std::vector<float> x, const std::vector<float>& signs) {
  quant::hadamard_rotate(x.data(), static_cast<int>(x.size()), signs.data());
  return x;
}

double norm_of(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return std::sqrt(s);
}

TEST(Hadamard, RotationIsTheDocumentedOrderBitForBit) {
  for (int64_t d : {64, 128, 256})
    for (uint64_t seed = 0; seed < 50; ++seed) {
      const auto x = normal_row(d, seed, 7), signs = signs_for(d, seed);
      const auto got = rotated(x, signs), want = reference_rotate(x, signs);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "d " << d;
    }
}

TEST(Hadamard, RotationMatchesFloat64) {
  for (int64_t d : {64, 128, 256}) {
    const auto x = normal_row(d, 11, 5), signs = signs_for(d, 4);
    const auto y = rotated(x, signs);
    for (int64_t i = 0; i < d; ++i) {
      double want = 0;
      for (int64_t j = 0; j < d; ++j)
        want += (__builtin_popcountll(i & j) % 2 ? -1.0 : 1.0) * signs[j] * x[j];
      EXPECT_NEAR(y[i], want / std::sqrt(double(d)), 1e-6 * norm_of(x)) << "d " << d << " i " << i;
    }
  }
}

TEST(Hadamard, IsOrthogonal) {
  for (int64_t d : {64, 128, 256}) {
    const std::vector<float> ones(static_cast<std::size_t>(d), 1.0f);
    const auto signs = signs_for(d, 9);
    const auto x = normal_row(d, 2, 9);
    // H is symmetric and H·H = d·I: rotating twice with +1 signs is the identity; with random
    // signs D·H undoes H·D.
    const auto twice = rotated(rotated(x, ones), ones);
    auto undone = rotated(rotated(x, signs), ones);
    for (int64_t i = 0; i < d; ++i) undone[i] *= signs[i];
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(twice[i], x[i], 1e-6 * norm_of(x));
      EXPECT_NEAR(undone[i], x[i], 1e-6 * norm_of(x));
    }
    const auto q = normal_row(d, 3, 11), k = normal_row(d, 4, 13);
    const auto rq = rotated(q, signs), rk = rotated(k, signs);
    double dot = 0, rotated_dot = 0;
    for (int64_t i = 0; i < d; ++i)
      dot += double(q[i]) * k[i], rotated_dot += double(rq[i]) * rk[i];
    EXPECT_NEAR(rotated_dot, dot, 1e-6 * norm_of(q) * norm_of(k)) << "q·kᵀ kept, d " << d;
    EXPECT_NEAR(norm_of(rq), norm_of(q), 1e-6 * norm_of(q));
  }
}

TEST(Hadamard, SignsAreDeterministicPlusOrMinusOne) {
  const auto a = signs_for(256, 42), b = signs_for(256, 42), c = signs_for(256, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  int negative = 0;
  for (float s : a) {
    ASSERT_TRUE(s == 1.0f || s == -1.0f) << s;
    negative += s < 0;
  }
  EXPECT_GT(negative, 96);
  EXPECT_LT(negative, 160);
  EXPECT_EQ(signs_for(8, 42), std::vector<float>(a.begin(), a.begin() + 8)) << "a prefix";
}

// --- rejections ---------------------------------------------------------------------------------

// A well-formed per-block call on the CPU, to break one argument at a time.
struct Call {
  std::vector<float> x = std::vector<float>(2 * 8 * 2 * 64, 1.0f);
  std::vector<uint8_t> codes = std::vector<uint8_t>(2 * 8 * 2 * 64, 0xee);
  std::vector<float> scale = std::vector<float>(2 * 2 * 2, -7.0f);
  std::vector<float> signs = std::vector<float>(64, 1.0f);
  std::vector<int32_t> cu = {0, 8, 16};
  Tensor xt = make_tensor(x.data(), DType::f32, {2, 8, 2, 64});
  Tensor ct = make_tensor(codes.data(), DType::e4m3, {2, 8, 2, 64});
  Tensor st = make_tensor(scale.data(), DType::f32, {2, 2, 2});
  Tensor sg = make_tensor(signs.data(), DType::f32, {64});
  Tensor cut = make_tensor(cu.data(), DType::i32, {3});
  QuantizeFp8Options o;

  Call() {
    o.granularity = Fp8Granularity::per_block;
    o.block_rows = 4;
    o.signs = &sg;
  }
  bool untouched() const {
    for (uint8_t c : codes)
      if (c != 0xee) return false;
    for (float s : scale)
      if (s != -7.0f) return false;
    return true;
  }
};

template <typename Break>
void expect_rejected(Break&& breaks, Code code, const std::string& message) {
  Call call;
  breaks(call);
  const Status s = quantize_fp8(call.xt, call.ct, call.st, call.o);
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_EQ(s.message().rfind(message, 0), 0u) << "got: " << s.message();
  EXPECT_TRUE(call.untouched()) << message;
}

TEST(QuantizeFp8Args, TheWellFormedCallRuns) {
  Call call;
  EXPECT_TRUE(quantize_fp8(call.xt, call.ct, call.st, call.o).is_ok());
  EXPECT_FALSE(call.untouched());
}

// Rows of head dim 0: x and codes have no elements (null data, any strides) and every group is a
// group of zeros, scale 1.
TEST(QuantizeFp8Args, HeadDimZeroGivesScaleOne) {
  Call call;
  for (Tensor* t : {&call.xt, &call.ct}) {
    t->shape[3] = 0;
    t->data = nullptr;
    t->stride[0] = std::numeric_limits<int64_t>::max();
  }
  call.o.signs = nullptr;
  ASSERT_TRUE(quantize_fp8(call.xt, call.ct, call.st, call.o).is_ok());
  for (float s : call.scale) EXPECT_EQ(s, 1.0f);
}

TEST(QuantizeFp8Args, EachBadArgumentIsNamed) {
  const Code bad = Code::invalid_argument;
  expect_rejected([](Call& c) { c.o.granularity = Fp8Granularity(7); }, bad, "granularity: 7");
  expect_rejected([](Call& c) { c.o.block_rows = 0; }, bad, "block_rows: must be at least 1");
  expect_rejected([](Call& c) { c.o.granularity = Fp8Granularity::per_head; }, bad,
                  "block_rows: 4: only per-block");
  expect_rejected([](Call& c) { c.xt.dtype = HFA_I32; }, bad, "x: expected dtype f32, f16 or bf16");
  expect_rejected([](Call& c) { c.xt.rank = 3; }, bad, "x: expected rank 4");
  expect_rejected([](Call& c) { c.xt.stride[3] = 2; }, bad,
                  "x: the last dim must have unit stride");
  expect_rejected([](Call& c) { c.ct.dtype = HFA_E5M2; }, bad, "codes: expected dtype e4m3");
  expect_rejected([](Call& c) { c.ct.shape[2] = 1; }, bad, "codes: expected shape (2, 8, 2, 64)");
  expect_rejected([](Call& c) { c.ct.stride[1] = 0; }, bad, "codes: zero stride");
  expect_rejected([](Call& c) { c.ct.device = HFA_CUDA; }, bad,
                  "codes: on cuda:0, expected cpu (as x)");
  expect_rejected([](Call& c) { c.st.shape[1] = 3; }, bad,
                  "scale: expected shape (2, 2, 2) (batch, blocks of 4 rows, heads)");
  expect_rejected([](Call& c) { c.st.dtype = HFA_F16; }, bad, "scale: expected dtype f32");
  expect_rejected([](Call& c) { c.st.stride[0] = 8; }, bad, "scale: must be contiguous");
  expect_rejected(
      [](Call& c) {
        c.o.granularity = Fp8Granularity::per_tensor;
        c.o.block_rows = 0;
      },
      bad, "scale: expected rank 1");
  expect_rejected([](Call& c) { c.sg.shape[0] = 32; }, bad, "signs: expected f32 of shape (64)");
  expect_rejected([](Call& c) { c.signs[5] = 0.5f; }, bad, "signs: element 5 is 0.5");
  expect_rejected([](Call& c) { c.xt.shape[3] = c.ct.shape[3] = c.sg.shape[0] = 48; },
                  Code::not_supported, "signs: the Hadamard rotation takes headdim 64, 128 or 256");
}

TEST(QuantizeFp8Args, VarlenOffsetsAndBlocksAreChecked) {
  auto varlen = [](Call& c) {
    c.xt = make_tensor(c.x.data(), DType::f32, {16, 2, 64});
    c.ct = make_tensor(c.codes.data(), DType::e4m3, {16, 2, 64});
    c.o.cu_seqlens = &c.cut;
  };
  const Code bad = Code::invalid_argument;
  expect_rejected(
      [&](Call& c) {
        varlen(c);
        c.cu[1] = 9;
        c.cu[2] = 8;
      },
      bad, "cu_seqlens: must not decrease");
  expect_rejected(
      [&](Call& c) {
        varlen(c);
        c.cu[2] = 15;
      },
      bad, "cu_seqlens: last element 15 must equal x's total_tokens 16");
  expect_rejected(
      [&](Call& c) {
        varlen(c);
        c.cu[1] = 2;
      },
      bad, "scale: 2 blocks of 4 rows hold 8 rows, but sequence 1 has 14");
  expect_rejected(
      [&](Call& c) {
        varlen(c);
        c.cut.dtype = HFA_F32;
      },
      bad, "cu_seqlens: expected dtype i32");
  Call ok;
  varlen(ok);
  EXPECT_TRUE(quantize_fp8(ok.xt, ok.ct, ok.st, ok.o).is_ok());
}

TEST(QuantizeFp8Args, CAbiNamesNullArguments) {
  Call c;
  hfa_quantize_fp8_options o{HFA_FP8_PER_BLOCK, 4, nullptr, nullptr, nullptr};
  EXPECT_EQ(hfa_quantize_fp8(&c.xt, nullptr, &c.st, &o), HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "codes: is null");
  EXPECT_EQ(hfa_quantize_fp8(&c.xt, &c.ct, &c.st, nullptr), HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "options: is null");
  EXPECT_EQ(hfa_quantize_fp8(&c.xt, &c.ct, &c.st, &o), HFA_SUCCESS);
  EXPECT_EQ(hfa_hadamard_signs(1, nullptr, nullptr), HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "signs: is null");
  const Tensor wrong = make_tensor(c.codes.data(), DType::e4m3, {64});
  EXPECT_EQ(hfa_hadamard_signs(1, &wrong, nullptr), HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(hfa_last_error(), "signs: expected dtype f32, got e4m3");
}

}  // namespace
}  // namespace hfa::test
