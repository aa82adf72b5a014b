// Writing MLA caches through the API: hfa_quantize_kv / hfa_dequantize_kv with the fp8_mla format
// (FlashMLA's 656-byte records) and the KV-cache call's append (k_new) into a bf16 or an FP8 MLA
// cache. Each against values computed here (FlashMLA's scale rule spelled out, the float64
// oracle), and the rejections, by name, with nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "api/fixture.hpp"
#include "api/validate_kvcache.hpp"
#include "common/mla.hpp"
#include "cpu/reference.hpp"
#include "kvcache/mla_case.hpp"

namespace hfa::test {
namespace {

constexpr int64_t kD = MlaCase::kD, kDv = MlaCase::kDv, kRecord = MlaCase::kRecord;

// FlashMLA's scale of a tile, computed apart from quant/mla_fp8.hpp: the smallest power of two
// at or above max(amax / 448, 1e-4), in double.
float flashmla_scale(double amax) {
  const double floor = std::max(amax / 448.0, 1e-4);
  return static_cast<float>(std::exp2(std::ceil(std::log2(floor))));
}

float record_scale(const uint8_t* record, int tile) {
  float scale;
  std::memcpy(&scale, record + 512 + 4 * tile, 4);
  return scale;
}

// x (pages, slots, heads, 576) in `dtype` with padded rows, random values with a gain per row so
// that tiles get different scales; codes (pages, slots, heads, 656) of 0xff bytes.
struct QuantizeCase {
  DType dtype = DType::bf16;
  std::vector<int64_t> rows = {3, 5, 2};
  Storage x, codes, back;

  void build(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<int64_t> shape = rows, code_shape = rows;
    shape.push_back(kD);
    code_shape.push_back(kRecord);
    x.make(dtype, shape, 8);
    codes.make(DType::fp8_mla, code_shape, 16);
    back.make(DType::f32, shape, 4);
    for (int64_t r = 0; r < count(); ++r) {
      const float gain = std::exp(2.0f * normal(rng));
      for (int64_t c = 0; c < kD; ++c) store_float(dtype, normal(rng) * gain, x_at(r, c));
    }
  }
  int64_t count() const {
    int64_t n = 1;
    for (int64_t e : rows) n *= e;
    return n;
  }
  // Row r (row-major over `rows`) of a tensor, at column c.
  template <class T>
  T* row_at(Storage& s, int64_t r, int64_t c) {
    int64_t offset = c * s.tensor.stride[rows.size()];
    for (int d = static_cast<int>(rows.size()) - 1; d >= 0; --d) {
      offset += (r % rows[d]) * s.tensor.stride[d];
      r /= rows[d];
    }
    return reinterpret_cast<T*>(s.bytes.data() +
                                offset * dtype_size(static_cast<DType>(s.tensor.dtype)));
  }
  uint8_t* x_at(int64_t r, int64_t c) { return row_at<uint8_t>(x, r, c); }
  uint8_t* record(int64_t r) { return row_at<uint8_t>(codes, r, 0); }
  float x_value(int64_t r, int64_t c) { return load_float(dtype, x_at(r, c)); }

  QuantizeOptions options() const {
    QuantizeOptions o;
    o.format = KVFormat::fp8_mla;
    return o;
  }
  Status quantize() { return quantize_kv(x.tensor, codes.tensor, options()); }
  Status dequantize() { return dequantize_kv(codes.tensor, back.tensor, options()); }
};

// Every record as FlashMLA lays it out: scales by its rule, each latent value within half an
// E4M3 step of x, the rotary values x's rounded to bf16; the padding between records untouched.
TEST(MlaQuantize, WritesFlashMlaRecords) {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (const std::vector<int64_t>& rows :
         {std::vector<int64_t>{3, 5, 2}, std::vector<int64_t>{4, 1}, std::vector<int64_t>{7}}) {
      QuantizeCase c;
      c.dtype = dtype;
      c.rows = rows;
      c.build(static_cast<uint32_t>(rows.size() + 3 * static_cast<int>(dtype)));
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " rank " << rows.size() + 1);
      ASSERT_TRUE(c.quantize().is_ok());
      for (int64_t r = 0; r < c.count(); ++r) {
        const uint8_t* record = c.record(r);
        std::vector<float> decoded(kD);
        quant::mla_fp8_decode_columns(record, 0, kD, decoded.data());
        for (int t = 0; t < 4; ++t) {
          double amax = 0.0;
          for (int64_t i = 128 * t; i < 128 * (t + 1); ++i)
            amax = std::max(amax, double{std::abs(c.x_value(r, i))});
          const float scale = record_scale(record, t);
          ASSERT_EQ(scale, flashmla_scale(amax)) << "row " << r << " tile " << t;
          for (int64_t i = 128 * t; i < 128 * (t + 1); ++i) {
            const float want = c.x_value(r, i);
            // E4M3 keeps 3 mantissa bits: half a step is 1/16 of the value, or of the smallest
            // normal's step (2^-9 · scale) below it.
            ASSERT_LE(std::abs(decoded[i] - want), std::max(std::abs(want) / 16.0f,
                                                            scale * 0x1p-10f))
                << "row " << r << " column " << i;
          }
        }
        for (int64_t i = kDv; i < kD; ++i)
          ASSERT_EQ(decoded[i], detail::bf16_to_float(detail::float_to_bf16(c.x_value(r, i))));
        for (int64_t pad = kRecord; pad < kRecord + 16 && r + 1 < c.count(); ++pad)
          ASSERT_EQ(record[pad], 0xff) << "padding after row " << r;
      }
    }
}

// dequantize_kv gives the values the decode reads from the records (the codec's), and quantizing
// those again writes the same bytes (the records are a fixed point).
TEST(MlaQuantize, DequantizeReadsTheRecords) {
  QuantizeCase c;
  c.build(7);
  ASSERT_TRUE(c.quantize().is_ok());
  ASSERT_TRUE(c.dequantize().is_ok());
  const std::vector<unsigned char> first = c.codes.bytes;
  for (int64_t r = 0; r < c.count(); ++r) {
    std::vector<float> want(kD);
    quant::mla_fp8_decode_columns(c.record(r), 0, kD, want.data());
    for (int64_t i = 0; i < kD; ++i) ASSERT_EQ(*c.row_at<float>(c.back, r, i), want[i]) << r;
  }
  Storage again;
  again.make(DType::fp8_mla, {3, 5, 2, kRecord}, 16);
  QuantizeOptions o = c.options();
  ASSERT_TRUE(quantize_kv(c.back.tensor, again.tensor, o).is_ok());
  for (int64_t r = 0; r < c.count(); ++r)
    ASSERT_EQ(std::memcmp(c.row_at<uint8_t>(again, r, 0), c.record(r), kRecord), 0) << r;
}

// The C ABI takes a null scale for fp8_mla (and only there).
TEST(MlaQuantize, CAbiTakesNoScale) {
  QuantizeCase c;
  c.build(3);
  hfa_quantize_options o{};
  o.format = HFA_KV_FP8_MLA;
  ASSERT_EQ(hfa_quantize_kv(&c.x.tensor, &c.codes.tensor, nullptr, &o), HFA_SUCCESS)
      << hfa_last_error();
  ASSERT_EQ(hfa_dequantize_kv(&c.codes.tensor, nullptr, &c.back.tensor, &o), HFA_SUCCESS)
      << hfa_last_error();
  float want = 0.0f;
  quant::mla_fp8_decode_columns(c.record(4), 130, 1, &want);
  EXPECT_EQ(*c.row_at<float>(c.back, 4, 130), want);
  o.format = HFA_KV_FP8_PER_TOKEN;
  const std::vector<unsigned char> before = c.codes.bytes;
  EXPECT_EQ(hfa_quantize_kv(&c.x.tensor, &c.codes.tensor, nullptr, &o),
            HFA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(hfa_last_error()).rfind("scale: is null", 0), 0u) << hfa_last_error();
  EXPECT_EQ(c.codes.bytes, before);
}

::testing::AssertionResult QuantizeRejected(QuantizeCase& c, const Status& status,
                                            const std::string& argument,
                                            const std::string& fragment) {
  if (auto result = Invalid(status, argument, fragment); !result) return result;
  for (unsigned char byte : c.codes.bytes)
    if (byte != 0xff) return ::testing::AssertionFailure() << "codes were written";
  return ::testing::AssertionSuccess();
}

TEST(MlaQuantize, Rejections) {
  QuantizeCase c;
  c.build(1);
  Storage scale;
  scale.make(DType::f32, {3, 5, 2});
  EXPECT_TRUE(QuantizeRejected(c, quantize_kv(c.x.tensor, c.codes.tensor, scale.tensor,
                                              c.options()),
                               "scale", "must be null for fp8_mla"));
  Storage global;
  global.make(DType::f32, {1});
  QuantizeOptions o = c.options();
  o.global_scale = &global.tensor;
  EXPECT_TRUE(QuantizeRejected(c, quantize_kv(c.x.tensor, c.codes.tensor, o), "global_scale",
                               "only used by NVFP4"));
  Tensor x = c.x.tensor;
  x.shape[3] = 512;  // the latent alone is no MLA row
  EXPECT_TRUE(QuantizeRejected(c, quantize_kv(x, c.codes.tensor, c.options()), "x",
                               "headdim 512 must be 576"));
  // codes, each way wrong; the last over x's own bytes (an output sharing an input's memory).
  struct Wrong {
    void (*spoil)(Tensor&, QuantizeCase&);
    const char* fragment;
  };
  const Wrong wrongs[] = {
      {[](Tensor& t, QuantizeCase&) { t.dtype = HFA_E4M3; }, "expected dtype fp8_mla"},
      {[](Tensor& t, QuantizeCase&) { t.shape[3] = 576; }, "expected last extent 656"},
      {[](Tensor& t, QuantizeCase&) { t.shape[1] = 4; }, "expected extent 5 in dim 1"},
      {[](Tensor& t, QuantizeCase&) { t.stride[3] = 2; }, "the last dim must have unit stride"},
      {[](Tensor& t, QuantizeCase& q) { t.data = q.x.bytes.data(); }, "overlaps x"}};
  for (const Wrong& wrong : wrongs) {
    Tensor codes = c.codes.tensor;
    wrong.spoil(codes, c);
    EXPECT_TRUE(QuantizeRejected(c, quantize_kv(c.x.tensor, codes, c.options()), "codes",
                                 wrong.fragment));
  }
  // The other formats still need their scale.
  o = c.options();
  o.format = KVFormat::mxfp4;
  EXPECT_TRUE(QuantizeRejected(c, quantize_kv(c.x.tensor, c.codes.tensor, o), "scale",
                               "is null, but this format needs one"));
  o.format = static_cast<KVFormat>(6);
  EXPECT_TRUE(QuantizeRejected(c, quantize_kv(c.x.tensor, c.codes.tensor, o), "format",
                               "fp8_mla 5"));
}

// A GPU build's answer, decided on the host (common/mla.hpp): fp8_mla refused by name, the other
// formats passed on to the kernels.
TEST(MlaQuantize, GpuRefusesTheRecordByName) {
  detail::QuantizeProblem p;
  p.format = detail::CacheFormat::mla_fp8;
  EXPECT_TRUE(Rejected(detail::refuse_mla_quantize_on_gpu(p, "sm90 KV quantizer"),
                       Code::not_supported, "format", "not supported by the sm90 KV quantizer"));
  p.format = detail::CacheFormat::fp8_per_token;
  EXPECT_TRUE(detail::refuse_mla_quantize_on_gpu(p, "sm90 KV quantizer").is_ok());
}

// ---- appending to an MLA cache (k_new) ---------------------------------------------------------

// An MLA call that appends new_counts[b] tokens to sequence b first: the cache built for the
// lengths after the append, then the new tokens' slots poisoned (0xff: NaN) and cache_seqlens
// set back to the lengths before. k_new holds the new rows (bf16, 576 wide), fixed length
// (batch, n, 1, 576) when every count is equal, else packed (total, 1, 576) with
// cu_seqlens_k_new. v_new is left null (set to k_new's view by a test that wants it).
struct AppendCase {
  MlaCase c;
  std::vector<int32_t> before = {70, 0, 64, 5};
  std::vector<int32_t> new_counts = {2, 2, 2, 2};
  Storage k_new, cu_new;
  Tensor v_new_view{};

  bool varlen() const {
    for (int32_t n : new_counts)
      if (n != new_counts[0]) return true;
    return false;
  }
  int64_t row_of(int64_t b, int64_t i) const {  // of k_new (packed when varlen)
    int64_t row = i;
    if (varlen())
      for (int64_t e = 0; e < b; ++e) row += new_counts[e];
    return row;
  }
  uint8_t* k_new_at(int64_t b, int64_t i, int64_t col) {
    return varlen() ? k_new.at<uint8_t>({row_of(b, i), 0, col}) : k_new.at<uint8_t>({b, i, 0, col});
  }
  // Where new token i of sequence b goes: its first byte in the cache.
  uint8_t* slot(int64_t b, int64_t i) {
    const int64_t j = before[b] + i;
    return c.cache.at<uint8_t>({c.pages_of[b][j / c.page_size], j % c.page_size, 0, 0});
  }
  int64_t row_bytes() const { return c.fp8 ? kRecord : 2 * kD; }

  void build(bool fp8, uint32_t seed) {
    c.fp8 = fp8;
    c.seed = seed;
    c.heads_q = 16;
    c.seqlen_q = 2;
    c.options.causal = true;
    c.cache_seqlens.clear();
    for (std::size_t b = 0; b < before.size(); ++b)
      c.cache_seqlens.push_back(before[b] + new_counts[b]);
    c.build();
    for (int64_t b = 0; b < c.batch(); ++b) {
      for (int64_t i = 0; i < new_counts[b]; ++i) std::memset(slot(b, i), 0xff, row_bytes());
      *c.seqlens.at<int32_t>({b}) = before[b];
    }
    std::mt19937 rng(seed + 100);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    int64_t total = 0;
    for (int32_t n : new_counts) total += n;
    if (varlen()) {
      k_new.make(DType::bf16, {total, 1, kD}, 8);
      cu_new.make(DType::i32, {c.batch() + 1});
      *cu_new.at<int32_t>({0}) = 0;
      for (int64_t b = 0; b < c.batch(); ++b)
        *cu_new.at<int32_t>({b + 1}) = static_cast<int32_t>(row_of(b, new_counts[b]));
      c.options.cu_seqlens_k_new = &cu_new.tensor;
    } else {
      k_new.make(DType::bf16, {c.batch(), new_counts[0], 1, kD}, 8);
    }
    for (int64_t b = 0; b < c.batch(); ++b)
      for (int64_t i = 0; i < new_counts[b]; ++i) {
        const float gain = std::exp(normal(rng));
        for (int64_t col = 0; col < kD; ++col)
          store_float(DType::bf16, normal(rng) * gain, k_new_at(b, i, col));
      }
    c.options.k_new = &k_new.tensor;
    c.options.v_new = nullptr;
    v_new_view = k_new.tensor;
    v_new_view.shape[v_new_view.rank - 1] = kDv;
  }
};

// The bytes the append must write for new token i of sequence b: its bf16 row, or the record
// hfa_quantize_kv writes for it (FlashMLA's rule: MlaQuantize above).
std::vector<uint8_t> expected_row(AppendCase& a, int64_t b, int64_t i) {
  if (!a.c.fp8) {
    const uint8_t* row = a.k_new_at(b, i, 0);
    return {row, row + 2 * kD};
  }
  std::vector<uint8_t> record(kRecord);
  const Tensor x = make_tensor(a.k_new_at(b, i, 0), DType::bf16, {1, kD});
  const Tensor codes = make_tensor(record.data(), DType::fp8_mla, {1, kRecord});
  QuantizeOptions o;
  o.format = KVFormat::fp8_mla;
  EXPECT_TRUE(quantize_kv(x, codes, o).is_ok());
  return record;
}

// The append writes each new token's row (once, through K) and nothing else of the cache; the
// attention then covers it: the same bytes as a call without append over the cache so written,
// and within bf16 rounding of the float64 oracle over that cache.
void expect_append_works(AppendCase& a) {
  MlaCase& c = a.c;
  std::vector<unsigned char> want_cache = c.cache.bytes;
  for (int64_t b = 0; b < c.batch(); ++b)
    for (int64_t i = 0; i < a.new_counts[b]; ++i) {
      const std::vector<uint8_t> row = expected_row(a, b, i);
      std::memcpy(want_cache.data() + (a.slot(b, i) - c.cache.bytes.data()), row.data(),
                  row.size());
    }
  const Status status = c.run();
  ASSERT_TRUE(status.is_ok()) << status.message();
  ASSERT_EQ(c.cache.bytes, want_cache) << "the cache, but for the new rows, changed";

  // The same cache without append: cache_seqlens the lengths after it.
  MlaCase plain = c;
  // A copied Storage's view still points at the original's bytes: each at its own.
  for (Storage* s : {&plain.q, &plain.cache, &plain.out, &plain.lse, &plain.seqlens, &plain.table})
    s->tensor.data = s->bytes.data();
  plain.v = plain.cache.tensor;
  plain.v.shape[3] = kDv;
  plain.options.k_new = plain.options.v_new = plain.options.cu_seqlens_k_new = nullptr;
  plain.options.cache_seqlens = &plain.seqlens.tensor;
  plain.options.block_table = &plain.table.tensor;
  for (int64_t b = 0; b < c.batch(); ++b)
    *plain.seqlens.at<int32_t>({b}) = a.before[b] + a.new_counts[b];
  std::fill(plain.out.bytes.begin(), plain.out.bytes.end(), 0xff);
  ASSERT_TRUE(plain.run().is_ok());
  EXPECT_EQ(plain.out.bytes, c.out.bytes);
  EXPECT_EQ(plain.lse.bytes, c.lse.bytes);

  detail::KVCacheProblem problem;
  ASSERT_TRUE(detail::build_kvcache_problem({&plain.q.tensor, &plain.cache.tensor, &plain.v,
                                             &plain.out.tensor, &plain.lse.tensor,
                                             &plain.options},
                                            detail::Purpose::run, &problem)
                  .is_ok());
  std::vector<double> out(static_cast<std::size_t>(c.batch() * c.seqlen_q * c.heads_q * kDv));
  std::vector<double> lse(static_cast<std::size_t>(c.batch() * c.heads_q * c.seqlen_q));
  cpu::reference_forward_kvcache(problem, out.data(), lse.data());
  int failures = 0;
  for (int64_t b = 0; b < c.batch(); ++b)
    for (int64_t i = 0; i < c.seqlen_q; ++i)
      for (int64_t h = 0; h < c.heads_q; ++h) {
        const double want_lse = lse[static_cast<std::size_t>((b * c.heads_q + h) * c.seqlen_q + i)];
        // A sequence with no key at all (nothing cached, nothing appended): -inf both.
        const bool same_inf = std::isinf(want_lse) && c.lse_at(b, h, i) == want_lse;
        if (!same_inf &&
            !(std::abs(c.lse_at(b, h, i) - want_lse) <= 1e-4 * std::max(1.0, std::abs(want_lse))))
          if (++failures <= 5)
            ADD_FAILURE() << "lse " << b << " " << h << " " << i << ": " << c.lse_at(b, h, i)
                          << ", oracle " << want_lse;
        for (int64_t d = 0; d < kDv; ++d) {
          const double want =
              out[static_cast<std::size_t>(((b * c.seqlen_q + i) * c.heads_q + h) * kDv + d)];
          if (!(std::abs(c.out_at(b, i, h, d) - want) <= 1e-2 * (1.0 + std::abs(want))))
            if (++failures <= 5) ADD_FAILURE() << "out " << b << " " << i << " " << h << " " << d;
        }
      }
  EXPECT_EQ(failures, 0);
}

TEST(MlaAppend, WritesRowsOnceAndAttendsToThem) {
  for (bool fp8 : {false, true})
    for (bool varlen : {false, true})
      for (bool v_view : {false, true}) {
        SCOPED_TRACE(testing::Message() << (fp8 ? "fp8_mla" : "bf16") << (varlen ? " varlen" : "")
                                        << (v_view ? " v_new the view of k_new" : " no v_new"));
        AppendCase a;
        if (varlen) a.new_counts = {3, 0, 1, 4};
        a.build(fp8, 20 + 4 * fp8 + 2 * varlen + v_view);
        if (v_view) a.c.options.v_new = &a.v_new_view;
        expect_append_works(a);
        if (::testing::Test::HasFailure()) return;
      }
}

::testing::AssertionResult AppendRejected(AppendCase& a, const std::string& argument,
                                          const std::string& fragment) {
  const std::vector<unsigned char> cache = a.c.cache.bytes, out = a.c.out.bytes;
  if (auto result = Invalid(a.c.run(), argument, fragment); !result) return result;
  if (a.c.cache.bytes != cache || a.c.out.bytes != out)
    return ::testing::AssertionFailure() << "the cache or out was written";
  return ::testing::AssertionSuccess();
}

TEST(MlaAppend, Rejections) {
  for (bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "fp8_mla" : "bf16");
    AppendCase a;
    a.build(fp8, 3);
    Storage other;  // a V of its own: a second write of the same bytes
    other.make(DType::bf16, {a.c.batch(), 2, 1, kDv});
    a.c.options.v_new = &other.tensor;
    EXPECT_TRUE(AppendRejected(a, "v_new", "must be null or the view k_new[..., :512]"));
    Tensor wide = a.k_new.tensor;  // all of k_new
    a.c.options.v_new = &wide;
    EXPECT_TRUE(AppendRejected(a, "v_new", "expected headdim 512"));
    Tensor shifted = a.v_new_view;  // k_new's columns 64..575
    shifted.data = a.k_new_at(0, 0, 64);
    a.c.options.v_new = &shifted;
    EXPECT_TRUE(AppendRejected(a, "v_new", "must be null or the view"));
    a.c.options.v_new = nullptr;
    Storage cos, sin;
    cos.make(DType::f32, {1024, 32});
    sin.make(DType::f32, {1024, 32});
    a.c.options.rotary_cos = &cos.tensor;
    a.c.options.rotary_sin = &sin.tensor;
    EXPECT_TRUE(AppendRejected(a, "rotary_cos", "not taken by an MLA append"));
    a.c.options.rotary_cos = a.c.options.rotary_sin = nullptr;
    Tensor narrow = a.k_new.tensor;
    narrow.shape[3] = kDv;
    a.c.options.k_new = &narrow;
    EXPECT_TRUE(AppendRejected(a, "k_new", "expected headdim 576"));
    a.c.options.k_new = &a.k_new.tensor;
    *a.c.seqlens.at<int32_t>({2}) = 127;  // 127 + 2 > the 2 pages of sequence 2
    EXPECT_TRUE(AppendRejected(a, "cache_seqlens", "exceeds the cache's capacity"));
  }
  // A bf16 576 / 512 call whose V is a cache of its own appends as any other: v_new required.
  AppendCase a;
  a.build(false, 5);
  Storage v;
  v.make(DType::bf16, {a.c.cache.tensor.shape[0], 64, 1, kDv});
  a.c.v = v.tensor;
  EXPECT_TRUE(AppendRejected(a, "v_new", "is null, but k_new is given"));
}

}  // namespace
}  // namespace hfa::test
