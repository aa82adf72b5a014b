// MLA decode (headdim 576 / 512, one latent kv-head, v_cache the view of k_cache's first 512
// columns, pages of 64) on a Hopper GPU against the float64 oracle the CPU backend's MLA tests
// use (cpu::reference_forward_kvcache): FlashMLA's head counts 16/32/64/128, seqlen_q 1-4 with
// the causal triangle, ragged lengths from 0 to 40k with shuffled pages and NaN in every slot
// no sequence uses (spare pages, the tail of each last page), outputs NaN-poisoned before the
// call; the balanced schedule (no split fixed: persistent CTAs, sequences split across them,
// batches larger than the parts, one long sequence over every part, a window) and the uniform
// plan (one split, fixed split counts and split sizes), a schedule reused from the workspace;
// bf16 and fp16 caches, and FlashMLA's FP8 records with bf16 q (unused records all 0xff bytes:
// NaN codes, scales and rotary values), each on both. Plus the GPU's not-supported answers by
// name for what the MLA kernels do not read. Skipped without a Hopper GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "api/validate_kvcache.hpp"
#include "cpu/reference.hpp"
#include "kvcache/mla_case.hpp"
#include "sm90/gpu_test_support.hpp"

namespace hfa::test {
namespace {

// FlashMLA's bf16 tolerances (tests/test_flash_mla_dense_decoding.py), LSE within
// 1e-5 + 8.01/65536 · |oracle| (fp32 sums and exponentials against float64); out within
// 8e-4 + 2.01/128 · the row's magnitude Σ p·|v| / Σ p, not |oracle|: P is rounded to 16 bits
// before P·V, which moves a column by up to 2^-8 of that magnitude, far more than 2^-8 of |out|
// where large values of v cancel (the cases' keys carry a per-token gain e^N(0,1)). Under
// |oracle| the first GPU run's misses (every one reported from one-split CTAs: 10 values) were
// bit for bit a host emulation of the kernel's arithmetic (fp32 exponentials per 64-key tile, P
// rounded to bf16), whose worst error over every case here is 0.43 of this bound. fp16 keeps 3
// more mantissa bits: the same bounds hold with room. FP8 records hold the same bounds: the
// kernel widens each latent code to bf16(e4m3 · scale), which for the quantizer's power-of-two
// scales is the oracle's value exactly (4 significant bits), so K and V are the oracle's and the
// errors are the bf16 cache's. Each token's 4 latent tiles get magnitudes of their own
// (MlaCase::tile_gains): a scale read for the wrong tile would show far outside them.
constexpr double kOutAbs = 8e-4, kOutRel = 2.01 / 128;
constexpr double kLseAbs = 1e-5, kLseRel = 8.01 / 65536;

std::size_t out_index(const MlaCase& c, int64_t b, int64_t i, int64_t h, int64_t d) {
  return static_cast<std::size_t>(((b * c.seqlen_q + i) * c.heads_q + h) * MlaCase::kDv + d);
}

// Σ p·|v| / Σ p of each output column, p = exp(s·scale − lse) over the row's keys (the last
// seqlen_q − 1 − i keys hidden from row i when causal), from the oracle's LSE.
void add_magnitudes(MlaCase& c, double scale, MlaOracle& o) {
  o.magnitude.assign(o.out.size(), 0.0);
  std::vector<double> q(MlaCase::kD);
  for (int64_t b = 0; b < c.batch(); ++b)
    for (int64_t i = 0; i < c.seqlen_q; ++i)
      for (int64_t h = 0; h < c.heads_q; ++h) {
        const double lse = o.lse[static_cast<std::size_t>((b * c.heads_q + h) * c.seqlen_q + i)];
        if (!std::isfinite(lse)) continue;
        for (int64_t k = 0; k < MlaCase::kD; ++k) q[k] = load_float(c.dtype, c.q.at<uint8_t>({b, i, h, k}));
        const int64_t keys = c.cache_seqlens[b] - (c.options.causal ? c.seqlen_q - 1 - i : 0);
        for (int64_t j = 0; j < keys; ++j) {
          const std::vector<float>& row = c.values[b][j];
          double score = 0.0;
          for (int64_t k = 0; k < MlaCase::kD; ++k) score += q[k] * row[k];
          const double p = std::exp(score * scale - lse);
          for (int64_t d = 0; d < MlaCase::kDv; ++d) o.magnitude[out_index(c, b, i, h, d)] += p * std::abs(row[d]);
        }
      }
}

// The float64 oracle with each output column's magnitude.
MlaOracle oracle_of(MlaCase& c) {
  MlaOracle o = mla_oracle(c);
  if (o.softmax_scale > 0.0) add_magnitudes(c, o.softmax_scale, o);
  return o;
}

// An MlaCase's tensors on the GPU (v the view of the device cache, as on the host), run with the
// workspace the call asks for (the last run's, when it is as large: a schedule it left there
// may be reused); out and lse (NaN bytes until written) copied back into the case.
class DeviceMla {
 public:
  explicit DeviceMla(MlaCase& c) : c_(c) {
    options_ = c.options;
    q_ = copy(c.q);
    cache_ = copy(c.cache);
    v_ = cache_;
    v_.shape[3] = MlaCase::kDv;
    out_ = copy(c.out);
    lse_ = copy(c.lse);
    poisoned_out_ = c.out.bytes;
    poisoned_lse_ = c.lse.bytes;
    if (c.options.cache_seqlens) {
      seqlens_ = copy(c.seqlens);
      options_.cache_seqlens = &seqlens_;
    }
    if (c.options.block_table) {
      table_ = copy(c.table);
      options_.block_table = &table_;
    }
    if (c.options.indices) {
      indices_ = copy(c.indices);
      options_.indices = &indices_;
    }
  }

  KVCacheOptions& options() { return options_; }
  Tensor& v() { return v_; }

  // The outputs NaN again, as before the first run.
  void poison_outputs() {
    EXPECT_EQ(cudaMemcpy(out_.data, poisoned_out_.data(), poisoned_out_.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(lse_.data, poisoned_lse_.data(), poisoned_lse_.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }

  // Every workspace byte 0: a balanced schedule of empty parts, splitting nothing.
  void clear_workspace() {
    ASSERT_TRUE(workspace_ != nullptr);
    EXPECT_EQ(cudaMemset(workspace_->get(), 0, options_.workspace_bytes), cudaSuccess);
  }

  Status run() {
    std::size_t bytes = 0;
    Status status = forward_kvcache_workspace_size(q_, cache_, v_, options_, &bytes);
    if (!status) return status;
    if (workspace_ == nullptr || options_.workspace_bytes != bytes)
      workspace_ = std::make_unique<DeviceBuffer>(bytes);
    options_.workspace = bytes ? workspace_->get() : nullptr;
    options_.workspace_bytes = bytes;
    status = forward_kvcache(q_, cache_, v_, out_, &lse_, options_);
    if (!status) return status;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(c_.out.bytes.data(), out_.data, c_.out.bytes.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(c_.lse.bytes.data(), lse_.data, c_.lse.bytes.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return status;
  }

 private:
  Tensor copy(Storage& s) {
    buffers_.push_back(std::make_unique<DeviceBuffer>(s.bytes.size()));
    EXPECT_EQ(buffers_.back()->upload(s.bytes), cudaSuccess);
    Tensor t = s.tensor;
    t.data = buffers_.back()->get();
    t.device = HFA_CUDA;
    t.device_index = 0;
    return t;
  }

  MlaCase& c_;
  KVCacheOptions options_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  std::unique_ptr<DeviceBuffer> workspace_;
  std::vector<uint8_t> poisoned_out_, poisoned_lse_;
  Tensor q_{}, cache_{}, v_{}, out_{}, lse_{}, seqlens_{}, table_{}, indices_{};
};

// Every out and LSE value within the tolerances; a row the oracle gives −inf (no key) must be
// −inf with O = 0 exactly. The first few misses are reported.
void expect_matches(MlaCase& c, const MlaOracle& o) {
  int failures = 0;
  double worst_out = 0.0, worst_lse = 0.0;
  for (int64_t b = 0; b < c.batch(); ++b)
    for (int64_t i = 0; i < c.seqlen_q; ++i)
      for (int64_t h = 0; h < c.heads_q; ++h) {
        const double want_lse = o.lse[static_cast<std::size_t>((b * c.heads_q + h) * c.seqlen_q + i)];
        const float got_lse = c.lse_at(b, h, i);
        const bool empty = std::isinf(want_lse) && want_lse < 0;
        const double lse_error = std::abs(got_lse - want_lse);
        if (empty ? !(std::isinf(got_lse) && got_lse < 0)
                  : !(lse_error <= kLseAbs + kLseRel * std::abs(want_lse))) {
          if (++failures <= 5)
            ADD_FAILURE() << "lse(" << b << ", " << h << ", " << i << ") = " << got_lse << ", oracle "
                          << want_lse;
        }
        if (!empty) worst_lse = std::max(worst_lse, lse_error);
        for (int64_t d = 0; d < MlaCase::kDv; ++d) {
          const double want = o.out[out_index(c, b, i, h, d)];
          const float got = c.out_at(b, i, h, d);
          const double error = std::abs(got - want);
          const double bound = kOutAbs + kOutRel * o.magnitude[out_index(c, b, i, h, d)];
          const bool ok = empty ? got == 0.0f : error <= bound;
          if (!empty && error == error) worst_out = std::max(worst_out, error / bound);
          if (!ok && ++failures <= 5)
            ADD_FAILURE() << "out(" << b << ", " << i << ", " << h << ", " << d << ") = " << got
                          << ", oracle " << want;
        }
      }
  EXPECT_EQ(failures, 0);
  ::testing::Test::RecordProperty("worst_out_error_over_bound", std::to_string(worst_out));
  ::testing::Test::RecordProperty("worst_lse_error", std::to_string(worst_lse));
}

void expect_gpu_matches_oracle(MlaCase& c) {
  SCOPED_TRACE(c.describe());
  c.tile_gains = c.fp8;
  c.build();
  const MlaOracle o = oracle_of(c);
  DeviceMla device(c);
  const Status status = device.run();
  ASSERT_TRUE(status.is_ok()) << status.message();
  expect_matches(c, o);
}

// FlashMLA's head counts × seqlen_q 1-4, causal on every other case, ragged lengths with an
// empty sequence, one token, a page less one, a page, a page and one more, several pages; the
// longer lengths at the smaller head counts (the float64 oracle's time grows with heads · keys).
// q's dtype, on a cache of that dtype or (fp8) of FP8 records.
void matrix(DType dtype, bool fp8) {
  struct Shape {
    int64_t heads, seqlen_q;
    std::vector<int32_t> lengths;
  };
  const Shape shapes[] = {
      {16, 1, {0, 1, 63, 64, 65, 300, 4097}}, {16, 4, {5, 64, 129, 2000}},
      {32, 2, {1, 0, 700, 3000}},              {32, 3, {3, 191}},
      {64, 1, {65, 1000, 0, 2}},               {64, 2, {130, 4}},
      {128, 1, {300, 1, 64}},                  {128, 4, {4, 77, 0}},
  };
  int n = 0;
  for (const Shape& shape : shapes) {
    MlaCase c;
    c.dtype = dtype;
    c.fp8 = fp8;
    c.heads_q = shape.heads;
    c.seqlen_q = shape.seqlen_q;
    c.cache_seqlens = shape.lengths;
    c.options.causal = (n % 2) == 1;
    c.seed = static_cast<uint32_t>(100 + n++);
    expect_gpu_matches_oracle(c);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(MlaGpu, Bf16MatchesOracle) {
  HFA_REQUIRE_HOPPER();
  matrix(DType::bf16, false);
}

TEST(MlaGpu, Fp16MatchesOracle) {
  HFA_REQUIRE_HOPPER();
  matrix(DType::f16, false);
}

TEST(MlaGpu, Fp8RecordsMatchOracle) {
  HFA_REQUIRE_HOPPER();
  matrix(DType::bf16, true);
}

// Long ragged sequences (to 40k keys: 625 pages) at the memory-bound head count, on the balanced
// schedule and with one split (a CTA walks all 625 tiles through the 2-stage ring).
void long_ragged_sequences(bool fp8) {
  for (int32_t splits : {0, 1}) {
    for (int64_t seqlen_q : {1, 2}) {
      MlaCase c;
      c.fp8 = fp8;
      c.heads_q = 16;
      c.seqlen_q = seqlen_q;
      c.cache_seqlens = {40000, 1, 17001, 0, 8192};
      c.options.causal = seqlen_q > 1;
      c.options.num_splits = splits;
      c.seed = static_cast<uint32_t>(7 + seqlen_q + 10 * splits);
      expect_gpu_matches_oracle(c);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(MlaGpu, LongRaggedSequences) {
  HFA_REQUIRE_HOPPER();
  long_ragged_sequences(false);
}

TEST(MlaGpu, Fp8LongRaggedSequences) {
  HFA_REQUIRE_HOPPER();
  long_ragged_sequences(true);
}

// `count` lengths drawn uniformly from [shortest, longest].
std::vector<int32_t> ragged_lengths(int count, int32_t shortest, int32_t longest, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> length(shortest, longest);
  std::vector<int32_t> lengths(static_cast<std::size_t>(count));
  for (int32_t& n : lengths) n = length(rng);
  return lengths;
}

// The balanced schedule on ragged batches: 64 sequences of 1k to 8k keys on 132 parts (16
// heads: one row tile), so that parts walk several whole sequences and sequences are cut across
// two to four parts; 128 heads (two row tiles, 66 parts) with empty sequences among the rest.
void balanced_schedule_ragged_batch(bool fp8) {
  struct Shape {
    int64_t heads, seqlen_q;
    std::vector<int32_t> lengths;
  };
  std::vector<int32_t> with_empty = ragged_lengths(12, 0, 3000, 41);
  with_empty[3] = with_empty[7] = 0;
  const Shape shapes[] = {{16, 1, ragged_lengths(64, 1024, 8192, 40)}, {128, 1, with_empty},
                          {128, 2, with_empty}};
  int n = 0;
  for (const Shape& shape : shapes) {
    MlaCase c;
    c.fp8 = fp8;
    c.heads_q = shape.heads;
    c.seqlen_q = shape.seqlen_q;
    c.cache_seqlens = shape.lengths;
    c.options.causal = shape.seqlen_q > 1;
    c.seed = static_cast<uint32_t>(50 + n++);
    expect_gpu_matches_oracle(c);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(MlaGpu, BalancedScheduleRaggedBatch) {
  HFA_REQUIRE_HOPPER();
  balanced_schedule_ragged_batch(false);
}

TEST(MlaGpu, Fp8BalancedScheduleRaggedBatch) {
  HFA_REQUIRE_HOPPER();
  balanced_schedule_ragged_batch(true);
}

// More sequences than parts: 200 short ones (a fifth of them empty) on 132 parts, and 48 on the
// 33 parts of 64 heads × 4 tokens (four row tiles), causal.
void balanced_schedule_batch_larger_than_parts(bool fp8) {
  struct Shape {
    int64_t heads, seqlen_q;
    int batch;
    int32_t longest;
  };
  int n = 0;
  for (const Shape& shape : {Shape{16, 1, 200, 300}, Shape{64, 4, 48, 400}}) {
    MlaCase c;
    c.fp8 = fp8;
    c.heads_q = shape.heads;
    c.seqlen_q = shape.seqlen_q;
    c.cache_seqlens = ragged_lengths(shape.batch, 0, shape.longest, 60 + n);
    for (std::size_t b = 0; b < c.cache_seqlens.size(); b += 5) c.cache_seqlens[b] = 0;
    c.options.causal = shape.seqlen_q > 1;
    c.seed = static_cast<uint32_t>(70 + n++);
    expect_gpu_matches_oracle(c);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(MlaGpu, BalancedScheduleBatchLargerThanParts) {
  HFA_REQUIRE_HOPPER();
  balanced_schedule_batch_larger_than_parts(false);
}

TEST(MlaGpu, Fp8BalancedScheduleBatchLargerThanParts) {
  HFA_REQUIRE_HOPPER();
  balanced_schedule_batch_larger_than_parts(true);
}

// reuse_schedule: a call reads the schedule the call before left in the workspace (a step's
// later layers) and makes none. Ragged sequences cut across parts at 128 heads × 2 tokens (four
// row tiles, 33 parts), outputs NaN before each call: the reusing call matches the oracle; with
// the workspace zeroed under it (a schedule of empty parts) it writes nothing, which shows it
// read the workspace rather than scheduling; a call without the flag then schedules again.
TEST(MlaGpu, ReusedSchedule) {
  HFA_REQUIRE_HOPPER();
  MlaCase c;
  c.heads_q = 128;
  c.seqlen_q = 2;
  c.cache_seqlens = {3000, 0, 700, 6000, 65, 2049, 1};
  c.options.causal = true;
  c.seed = 90;
  c.build();
  const MlaOracle o = oracle_of(c);
  DeviceMla device(c);
  ASSERT_TRUE(device.run().is_ok());
  expect_matches(c, o);
  device.options().reuse_schedule = 1;
  device.poison_outputs();
  ASSERT_TRUE(device.run().is_ok());
  {
    SCOPED_TRACE("reusing the schedule");
    expect_matches(c, o);
  }
  device.clear_workspace();
  device.poison_outputs();
  ASSERT_TRUE(device.run().is_ok());
  int written = 0;
  for (int64_t b = 0; b < c.batch(); ++b)
    for (int64_t i = 0; i < c.seqlen_q; ++i)
      for (int64_t h = 0; h < c.heads_q; ++h) {
        written += !std::isnan(c.lse_at(b, h, i));
        for (int64_t d = 0; d < MlaCase::kDv; ++d) written += !std::isnan(c.out_at(b, i, h, d));
      }
  EXPECT_EQ(written, 0) << "values written on a zeroed schedule";
  device.options().reuse_schedule = 0;
  device.poison_outputs();
  ASSERT_TRUE(device.run().is_ok());
  SCOPED_TRACE("scheduling again");
  expect_matches(c, o);
}

// One sequence of 40k keys (625 tiles) cut over every part: 132 of 5 tiles at 16 heads
// (speculative: 2 causal tokens), 66 parts of 10 at 128 heads.
void balanced_schedule_one_long_sequence(bool fp8) {
  struct Shape {
    int64_t heads, seqlen_q;
  };
  int n = 0;
  for (const Shape& shape : {Shape{16, 2}, Shape{128, 1}}) {
    MlaCase c;
    c.fp8 = fp8;
    c.heads_q = shape.heads;
    c.seqlen_q = shape.seqlen_q;
    c.cache_seqlens = {40000};
    c.options.causal = shape.seqlen_q > 1;
    c.seed = static_cast<uint32_t>(80 + n++);
    expect_gpu_matches_oracle(c);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(MlaGpu, BalancedScheduleOneLongSequence) {
  HFA_REQUIRE_HOPPER();
  balanced_schedule_one_long_sequence(false);
}

TEST(MlaGpu, Fp8BalancedScheduleOneLongSequence) {
  HFA_REQUIRE_HOPPER();
  balanced_schedule_one_long_sequence(true);
}

// A sliding window: the schedule deals out only the tiles the window leaves (a sequence's first
// tile is then not its first page), and a row tile cuts its piece to its own rows' keys.
void balanced_schedule_with_window(bool fp8) {
  MlaCase c;
  c.fp8 = fp8;
  c.heads_q = 32;
  c.seqlen_q = 3;
  c.cache_seqlens = {5000, 0, 3001, 20000, 70};
  c.options.causal = true;
  c.options.window_left = 1000;
  c.seed = 90;
  expect_gpu_matches_oracle(c);
}

TEST(MlaGpu, BalancedScheduleWithWindow) {
  HFA_REQUIRE_HOPPER();
  balanced_schedule_with_window(false);
}

TEST(MlaGpu, Fp8BalancedScheduleWithWindow) {
  HFA_REQUIRE_HOPPER();
  balanced_schedule_with_window(true);
}

// Fixed split counts (more splits than a short sequence has pages: splits with no key write
// LSE −inf, which the combine skips) and fixed split sizes (chunks that end inside a page).
void splits_match_oracle(bool fp8) {
  struct Split {
    int32_t num_splits, split_size;
  };
  for (const Split& split : {Split{1, 0}, Split{3, 0}, Split{16, 0}, Split{0, 100}, Split{0, 256}}) {
    MlaCase c;
    c.fp8 = fp8;
    c.heads_q = 64;
    c.seqlen_q = 2;
    c.cache_seqlens = {1500, 0, 65, 3};
    c.options.causal = true;
    c.options.num_splits = split.num_splits;
    c.options.split_size = split.split_size;
    c.seed = 31;
    SCOPED_TRACE("num_splits " + std::to_string(split.num_splits) + " split_size " +
                 std::to_string(split.split_size));
    expect_gpu_matches_oracle(c);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(MlaGpu, SplitsMatchOracle) {
  HFA_REQUIRE_HOPPER();
  splits_match_oracle(false);
}

TEST(MlaGpu, Fp8SplitsMatchOracle) {
  HFA_REQUIRE_HOPPER();
  splits_match_oracle(true);
}

// Every sequence empty: out 0 and LSE −inf everywhere (out and lse start as NaN), split or not,
// on the balanced schedule (0) and the uniform plan, on either cache.
TEST(MlaGpu, EmptySequencesGiveZeroAndMinusInf) {
  HFA_REQUIRE_HOPPER();
  for (const bool fp8 : {false, true}) {
    for (const int32_t splits : {0, 1, 4}) {
      SCOPED_TRACE(std::string(fp8 ? "fp8_mla" : "bf16") + " splits " + std::to_string(splits));
      MlaCase c;
      c.fp8 = fp8;
      c.heads_q = 128;
      c.seqlen_q = 2;
      c.cache_seqlens = {0, 0, 0};
      c.options.num_splits = splits;
      c.build();
      DeviceMla device(c);
      const Status status = device.run();
      ASSERT_TRUE(status.is_ok()) << status.message();
      for (int64_t b = 0; b < c.batch(); ++b)
        for (int64_t h = 0; h < c.heads_q; ++h)
          for (int64_t i = 0; i < c.seqlen_q; ++i) {
            const float lse = c.lse_at(b, h, i);
            EXPECT_TRUE(std::isinf(lse) && lse < 0) << lse;
            for (int64_t d = 0; d < MlaCase::kDv; ++d) ASSERT_EQ(c.out_at(b, i, h, d), 0.0f);
          }
    }
  }
}

// Not supported by the MLA kernels, refused by the argument's name before any launch.
void expect_refused(DeviceMla& device, const char* argument, const char* what) {
  const Status status = device.run();
  ASSERT_FALSE(status.is_ok());
  EXPECT_EQ(status.code(), Code::not_supported) << status.message();
  EXPECT_EQ(status.message().rfind(std::string(argument) + ":", 0), 0u) << status.message();
  EXPECT_NE(status.message().find(what), std::string::npos) << status.message();
}

TEST(MlaGpu, RefusesByName) {
  HFA_REQUIRE_HOPPER();
  for (const bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "fp8_mla" : "bf16");
    {
      MlaCase c;
      c.fp8 = fp8;
      c.page_size = 32;
      c.build();
      DeviceMla device(c);
      expect_refused(device, "k_cache", "page size 32");
    }
    {
      MlaCase c;
      c.fp8 = fp8;
      c.topk = 64;
      c.build();
      DeviceMla device(c);
      expect_refused(device, "indices", "sparse");
    }
    {
      MlaCase c;
      c.fp8 = fp8;
      c.options.softcap = 30.0f;
      c.build();
      DeviceMla device(c);
      expect_refused(device, "softcap", "softcap");
    }
  }
  {
    MlaCase c;
    c.fp8 = true;
    c.dtype = DType::f16;
    c.build();
    DeviceMla device(c);
    expect_refused(device, "q", "fp8_mla");
  }
  {
    MlaCase c;
    c.build();
    DeviceMla device(c);
    DeviceBuffer slopes(static_cast<std::size_t>(c.heads_q) * sizeof(float));
    ASSERT_EQ(slopes.upload(std::vector<float>(static_cast<std::size_t>(c.heads_q), 0.1f)),
              cudaSuccess);
    Tensor alibi = make_tensor(slopes.get(), DType::f32, {c.heads_q});
    alibi.device = HFA_CUDA;
    alibi.device_index = 0;
    device.options().alibi_slopes = &alibi;
    expect_refused(device, "alibi_slopes", "ALiBi");
  }
}

}  // namespace
}  // namespace hfa::test
