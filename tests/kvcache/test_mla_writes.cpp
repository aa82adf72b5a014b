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
#include "common/mla.hpp"
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
  EXPECT_EQ(*c.row_at<float>(c.back, 4, 130),
            [&] { float v[1]; quant::mla_fp8_decode_columns(c.record(4), 130, 1, v); return v[0]; }());
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
  Tensor codes = c.codes.tensor;
  codes.dtype = HFA_E4M3;
  EXPECT_TRUE(QuantizeRejected(c, quantize_kv(c.x.tensor, codes, c.options()), "codes",
                               "expected dtype fp8_mla"));
  codes = c.codes.tensor;
  codes.shape[3] = 576;
  EXPECT_TRUE(QuantizeRejected(c, quantize_kv(c.x.tensor, codes, c.options()), "codes",
                               "expected last extent 656"));
  codes = c.codes.tensor;
  codes.shape[1] = 4;
  EXPECT_TRUE(QuantizeRejected(c, quantize_kv(c.x.tensor, codes, c.options()), "codes",
                               "expected extent 5 in dim 1"));
  codes = c.codes.tensor;
  codes.stride[3] = 2;
  EXPECT_TRUE(QuantizeRejected(c, quantize_kv(c.x.tensor, codes, c.options()), "codes",
                               "the last dim must have unit stride"));
  // codes over x's own bytes: an output that shares memory with an input.
  codes = c.codes.tensor;
  codes.data = c.x.bytes.data();
  EXPECT_TRUE(QuantizeRejected(c, quantize_kv(c.x.tensor, codes, c.options()), "codes",
                               "overlaps x"));
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

}  // namespace
}  // namespace hfa::test
