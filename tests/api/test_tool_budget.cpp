// What the tool knows of a run before it starts: the bytes it will hold (checked against the
// machine before anything is allocated) and the time it will take (scaled from a sample).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "budget.hpp"
#include "check.hpp"
#include "workload.hpp"

namespace hfa::tool {
namespace {

Spec small_spec() {
  Spec s;
  s.device = Device::cpu();
  s.batch = 2, s.heads = 4, s.kv_heads = 2, s.seqlen_q = 40, s.seqlen_k = 70, s.hdim = 64, s.hdim_v = 128;
  return s;
}

double array_bytes(const HostProblem& w) {
  double bytes = 0;
  for (const HostArray* a : {&w.q, &w.k, &w.v, &w.out, &w.lse, &w.dout, &w.dq, &w.dk, &w.dv, &w.sinks})
    bytes += static_cast<double>(a->bytes());
  return bytes;
}

// On the CPU a Workload holds every array twice (the host's and the "device" copy); the footprint
// is that and the check's own bytes, for every kind of problem.
TEST(ToolBudget, WorkloadFootprintCountsEveryArray) {
  for (bool backward : {false, true})
    for (DType dtype : {DType::bf16, DType::f32, DType::e4m3})
      for (bool varlen : {false, true}) {
        if (backward && dtype == DType::e4m3) continue;  // no FP8 backward
        Spec s = small_spec();
        s.dtype = dtype;
        if (varlen) {
          s.varlen_q = {40, 0, 7}, s.varlen_k = {70, 3, 0}, s.batch = 3;
        }
        SCOPED_TRACE(s.describe() + (backward ? ", backward" : ""));
        const Workload w(s, 1, backward);
        const Footprint footprint = workload_footprint(s, backward);
        EXPECT_DOUBLE_EQ(footprint.host_bytes - reference_check_bytes(s, backward, s.dtype), 2 * array_bytes(w));
        EXPECT_EQ(footprint.device_bytes, 0);
      }
}

TEST(ToolBudget, MemoryBeyondTheMachineIsRefusedNamingTheFlags) {
  const double available = available_host_bytes();
  EXPECT_GT(available, 0);
  Footprint small;
  small.host_bytes = 1 << 20;
  EXPECT_NO_THROW(require_memory(small, Device::cpu(), "lower --seqlen"));
  Footprint huge;
  huge.host_bytes = available * 2 + 1e15;
  try {
    require_memory(huge, Device::cpu(), "lower --seqlen");
    FAIL() << "no error for " << huge.host_bytes << " bytes";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot allocate"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hint: lower --seqlen"), std::string::npos) << e.what();
  }
}

TEST(ToolBudget, MaxTimeRefusesLongerRunsOnly) {
  EXPECT_NO_THROW(enforce_max_time(5, 10, "lower --seqlen"));
  EXPECT_NO_THROW(enforce_max_time(1e9, 0, "lower --seqlen"));  // 0: no limit
  try {
    enforce_max_time(7200, 600, "lower --seqlen");
    FAIL() << "no error for a 2-hour run under --max-time 600";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--max-time 600: the run is estimated at 2.0 h; lower --seqlen"),
              std::string::npos) << e.what();
  }
}

// A device that runs every pass at exactly `rate` units a second and builds a problem at
// `fill_rate` bytes a second: the estimate of any problem must then be exact, whatever sample
// was measured, and every sample must be a valid problem no larger than the real one.
struct LinearDevice {
  double rate, fill_rate;
  const Spec* real;
  std::vector<Spec> samples;

  SampleTiming operator()(const std::vector<Pass>& passes, const Spec& sample) {
    const Spec& r = *real;
    EXPECT_GE(sample.batch, 0);
    EXPECT_LE(sample.batch, r.batch);
    EXPECT_LE(sample.kv_heads, r.kv_heads);
    EXPECT_EQ(sample.heads % sample.kv_heads, 0);
    EXPECT_EQ(sample.heads / sample.kv_heads, r.heads / r.kv_heads);
    EXPECT_LE(sample.seqlen_q, r.seqlen_q);
    EXPECT_LE(sample.seqlen_k, r.seqlen_k);
    for (const auto* lengths : {&sample.varlen_q, &sample.varlen_k}) {
      if (!lengths->empty()) {
        EXPECT_EQ(static_cast<int64_t>(lengths->size()), sample.batch);
      }
    }
    samples.push_back(sample);
    SampleTiming timing;
    timing.setup_seconds = workload_footprint(sample, false).host_bytes / fill_rate;
    for (const Pass& pass : passes) timing.call_seconds.push_back(pass.work(sample) / rate);
    return timing;
  }
};

void expect_exact_estimate(const Spec& real, double rate) {
  const std::vector<Pass> passes = {{"forward", 4, forward_flops}, {"backward", 3, backward_flops}};
  LinearDevice device{rate, 1e8, &real, {}};
  const auto footprint = [](const Spec& s) { return workload_footprint(s, false); };
  const Estimate estimate = estimate_time(real, passes, footprint,
                                          [&](const Spec& sample) { return device(passes, sample); });
  ASSERT_FALSE(device.samples.empty());
  EXPECT_LE(device.samples.front().seqlen_q, 256);  // samples start small
  EXPECT_LE(device.samples.front().seqlen_k, 256);
  EXPECT_NEAR(estimate.setup_seconds, footprint(real).host_bytes / 1e8, 1e-9 * estimate.setup_seconds);
  ASSERT_EQ(estimate.pass_seconds.size(), 2u);
  EXPECT_NEAR(estimate.pass_seconds[0], 4 * forward_flops(real) / rate, 1e-9 * estimate.pass_seconds[0]);
  EXPECT_NEAR(estimate.pass_seconds[1], 3 * backward_flops(real) / rate, 1e-9 * estimate.pass_seconds[1]);
  EXPECT_DOUBLE_EQ(estimate.rates[0], rate);
  EXPECT_DOUBLE_EQ(estimate.total_seconds(),
                   estimate.setup_seconds + estimate.pass_seconds[0] + estimate.pass_seconds[1]);
}

TEST(ToolBudget, EstimateScalesTheSampleToTheProblem) {
  Spec s = small_spec();
  s.batch = 3, s.heads = 12, s.kv_heads = 3, s.seqlen_q = s.seqlen_k = 100000, s.causal = true;
  expect_exact_estimate(s, 1e11);
  s.seqlen_q = 1;  // a decode-like shape: the sample grows in keys, heads, then sequences
  expect_exact_estimate(s, 1e11);
}

TEST(ToolBudget, EstimateOfVarlenSamplesTheFirstSequences) {
  Spec s = small_spec();
  s.varlen_q = {300000, 5000, 1, 0}, s.varlen_k = {300000, 5000, 70000, 10}, s.batch = 4;
  s.seqlen_q = s.seqlen_k = 300000;
  expect_exact_estimate(s, 1e11);
}

// A fast device: no sample takes long enough to time, so the samples grow to the problem itself.
TEST(ToolBudget, SamplesGrowToTheProblemWhenCallsAreShort) {
  Spec s = small_spec();
  s.batch = 5, s.seqlen_q = s.seqlen_k = 3000;
  const std::vector<Pass> passes = {{"forward", 1, forward_flops}};
  LinearDevice device{1e30, 1e30, &s, {}};
  estimate_time(s, passes, [](const Spec& x) { return workload_footprint(x, false); },
                [&](const Spec& sample) { return device(passes, sample); });
  const Spec& last = device.samples.back();
  EXPECT_EQ(last.describe(), s.describe());
  EXPECT_GT(device.samples.size(), 3u);  // 256 .. 4096 tokens, 1 .. 2 kv-heads, 1 .. 5 sequences
  EXPECT_EQ(device.samples.front().seqlen_q, 256);
  EXPECT_EQ(device.samples.front().batch, 1);
}

TEST(ToolBudget, Formats) {
  EXPECT_EQ(format_bytes(17), "17.0 B");
  EXPECT_EQ(format_bytes(1536.0 * 1024 * 1024), "1.50 GiB");
  EXPECT_EQ(format_seconds(0.042), "42 ms");
  EXPECT_EQ(format_seconds(90), "90.0 s");
  EXPECT_EQ(format_seconds(7200), "2.0 h");
  EXPECT_EQ(format_seconds(86400 * 300), "300 days");
}

}  // namespace
}  // namespace hfa::tool
