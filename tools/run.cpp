// `hfa run`: one problem (fixed length, varlen or a decode over a KV cache), timed and checked.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "budget.hpp"
#include "check.hpp"
#include "commands.hpp"
#include "kvcache.hpp"
#include "option_flags.hpp"
#include "timer.hpp"
#include "workload.hpp"

namespace hfa::tool {
namespace {

constexpr const char* kUsage = R"(Usage: hfa run [flags]

Runs attention on random normal inputs, prints its time and TFLOP/s, and compares it with the
float64 reference on a sample of rows. Exits 1 when the comparison fails.

  --device cpu|cuda|auto   where to run; auto = cuda when a GPU is present  [auto]
  --batch N                                                                [2]
  --heads N                query heads                                     [8]
  --kv-heads N             key/value heads, dividing --heads (GQA/MQA)     [= --heads]
  --seqlen N               query and key length                            [1024]
  --seqlen-q N, --seqlen-k N   the two lengths apart (bottom-right aligned masks)
  --hdim N                 query/key head dim                              [128]
  --hdim-v N               value head dim                                  [= --hdim]
  --dtype bf16|f16|f32|e4m3 (e4m3: FP8 inputs, scales 1, out bf16)          [bf16]
  --causal                 causal mask
  --window L,R             sliding window, -1 = unbounded
  --softcap X              softcap·tanh(scores/softcap) when > 0           [0]
  --sinks                  random attention sinks (one logit per query head)
  --sm-margin N            SMs the GPU call leaves free (FlashAttention-3's sm_margin;
                           the CPU ignores it)                             [0]
%s  --backward               also run and check the backward
  --varlen L1,L2,...       a varlen batch (cu_seqlens) of these lengths, 0 allowed; sets
                           --batch and the lengths, checked sequence by sequence
  --varlen-k L1,L2,...     the sequences' key lengths apart                 [= --varlen]
  --block-mask PATTERN     block-sparse attention (FlexAttention's BlockMask layout, CPU) over
                           a mask the tool builds in blocks of --sparse-block-q x
                           --sparse-block-kv, ANDed with causal and the window; PATTERN is
                           document:L1,L2,... (documents of these lengths, repeated to fill
                           the sequence) or causal-sliding:W (keys i - W .. i). Over each
                           sequence, or with --varlen over the packed tokens (as FlexAttention
                           users write a mask for a packed batch)
  --kvcache                decode over a paged KV cache (forward_kvcache) instead; reports
                           GB/s of cache read (codes and scales). With it:
    --cache-len N|L1,...   cached tokens per sequence (a list sets --batch) [1024]
    --cache-format bf16|fp16|fp8|fp8-token|nvfp4|mxfp4
                           the cache's storage; bf16/fp16: plain, the queries' dtype;
                           fp8 / fp8-token: e4m3 with a scale per kv-head / per token
                                                                            [= --dtype]
    --page-size N          tokens per page (pages shuffled in the table)    [64]
    --seqlen N             query rows per sequence                          [1]
  --mla                    MLA decode (DeepSeek, FlashMLA's shapes): --kvcache with q and K of
                           head dim 576, V the first 512 columns of the same cache rows, one
                           latent kv-head, bf16 queries, --heads 16 by default; --cache-format
                           bf16 or fp8 (FlashMLA's 656-byte records)   [bf16]
  --seed N                 seed of the random inputs                       [0]
  --iters N                timed iterations (after one warm-up)            [cuda 20, cpu 3]
  --max-time S             refuse a run estimated over S seconds; 0: no limit [600]
  --progress               report each call on stderr (on by default for CPU runs of
                           more than a few seconds)

Before it allocates, the run checks that its buffers fit in the memory available (an error
names the flags to lower). Before a run that may take a second or more, it measures a small
sample of the problem on the device and prints the estimated work and time on stderr; a run
estimated over --max-time is refused.

TFLOP/s count the (query, key) pairs the mask lets through (causal, window, block mask),
summed over the sequences of a varlen batch. A KV cache is filled by the library's quantize_kv
and checked against the float64 reference over what dequantize_kv reads back.
)";

// `amount` (FLOPs, bytes) per call as a rate in `unit` (1e12: TFLOP/s, 1e9: GB/s).
void print_timing(const char* what, const Timing& t, double amount, double unit = 1e12,
                  const char* unit_name = "TFLOP/s") {
  std::printf("  %-9s %10.3f ms  %8.3f %s   (median of %d; min %.3f ms)\n", what, t.median_ms,
              t.median_ms > 0 ? amount / (t.median_ms * 1e-3) / unit : 0.0, unit_name, t.iterations,
              t.min_ms);
}

// CPU work above this many FLOPs a call takes seconds: such runs say on stderr what they do.
constexpr double kSlowCpuFlops = 2e11;

// `call`, announcing each of its `count` calls on stderr when `verbose` (a long CPU run would
// otherwise sit silent for minutes).
std::function<Status()> with_progress(const char* what, int count, bool verbose,
                                      std::function<Status()> call) {
  if (!verbose) return call;
  auto done = std::make_shared<int>(0);
  const auto start = std::chrono::steady_clock::now();
  return [=] {
    const Status status = call();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "hfa run: %s call %d/%d done, %.1f s so far\n", what, ++*done, count, seconds);
    return status;
  };
}

int report_failure(const char* what, const Status& status) {
  std::fprintf(stderr, "hfa run: %s failed (%s): %s\n", what,
               hfa_status_name(static_cast<hfa_status>(status.code())), status.message().c_str());
  return exit_code_for(status);
}

// The exit code of the run: 0 when the check against the reference passes.
int check_and_report(const HostProblem& problem, bool backward) {
  const CheckResult check = check_against_reference(problem, backward, std::cout);
  std::cout << (check.passed ? "PASS" : "FAIL") << std::endl;
  return check.passed ? 0 : 1;
}

int run_kvcache(const Spec& spec, const CacheSpec& cache, uint64_t seed, int iterations, bool progress,
                double max_seconds) {
  const std::vector<Pass> passes = {
      {"decode", iterations + 1, [&](const Spec& s) { return cache_bytes_read(s, cache); }, true}};
  std::unique_ptr<KVCacheWorkload> workload;
  try {
    check_run_budget("run", spec, passes, [&](const Spec& s) { return kvcache_footprint(s, cache); },
                     [&](const Spec& sample) { return time_kvcache(sample, cache); }, max_seconds,
                     "lower --cache-len, --batch or --kv-heads",
                     "lower --cache-len, --batch, --kv-heads or --iters");
    workload = std::make_unique<KVCacheWorkload>(spec, cache, seed);
  } catch (const WorkloadError& e) {
    return report_failure("setup", e.status());
  }
  Status status;
  const Timing timing = time_calls(spec.device, 1, iterations,
                                   with_progress("decode", iterations + 1, progress, [&] { return workload->forward(); }),
                                   &status);
  if (!status) return report_failure("forward_kvcache", status);
  print_timing("decode", timing, workload->bytes_read(), 1e9, "GB/s of cache read");
  std::printf("  %.3f MB of K and V codes and scales a call\n", workload->bytes_read() * 1e-6);
  std::fflush(stdout);
  return check_and_report(workload->reference(), false);
}

}  // namespace

int run_command(Args& args) {
  if (args.wants_help()) {
    std::printf(kUsage, option_flags_usage().c_str());
    return 0;
  }
  Spec spec;
  spec.device = parse_device(args);
  const bool mla = args.flag("mla");
  const bool kvcache = args.flag("kvcache") || mla;
  const CacheSpec cache = kvcache ? parse_kvcache(args, &spec, mla) : CacheSpec{};
  if (!kvcache) {
    for (const char* option : {"cache-len", "cache-format", "page-size"})
      if (args.value(option)) throw UsageError(std::string("--") + option + ": needs --kvcache");
    parse_spec(args, &spec);
    parse_option_flags(args, &spec.rows);
  }
  const bool backward = !kvcache && args.flag("backward");  // parse_kvcache rejects it
  const uint64_t seed = static_cast<uint64_t>(args.integer("seed", 0, 0, INT64_MAX));
  const bool on_gpu = spec.device.kind == DeviceKind::cuda;
  const int iterations = static_cast<int>(args.integer("iters", on_gpu ? 20 : 3, 1, 100000));
  const bool progress = args.flag("progress");
  const double max_seconds = parse_max_time(args);
  args.finish();

  std::printf("hfa run: %s%s on %s\n", spec.describe().c_str(),
              kvcache ? (", " + cache.format + (mla ? " MLA" : "") + " paged cache (page " +
                         std::to_string(cache.page_size) + ")").c_str() : "",
              describe_device(spec.device).c_str());
  std::fflush(stdout);
  if (kvcache) return run_kvcache(spec, cache, seed, iterations, progress, max_seconds);

  const bool fixed = spec.varlen_q.empty();
  std::vector<Pass> passes = {{"forward", iterations + 1, forward_flops}};
  if (backward) passes.push_back({"backward", iterations + 1, backward_flops});
  std::unique_ptr<Workload> workload;
  try {
    check_run_budget("run", spec, passes, [&](const Spec& s) { return workload_footprint(s, backward); },
                     [&](const Spec& sample) { return time_workload(sample, backward); }, max_seconds,
                     fixed ? "lower --batch, --heads or --seqlen" : "lower --heads or the lengths of --varlen",
                     fixed ? "lower --batch, --heads, --seqlen or --iters"
                           : "lower --heads, the lengths of --varlen or --iters");
    workload = std::make_unique<Workload>(spec, seed, backward);
  } catch (const WorkloadError& e) {
    return report_failure("setup", e.status());
  }
  const bool slow = progress || (!on_gpu && forward_flops(spec) > kSlowCpuFlops);
  if (slow)
    std::fprintf(stderr, "hfa run: %.3g GFLOP a forward call on the CPU, %d calls (1 warm-up)%s: "
                 "progress follows\n", forward_flops(spec) * 1e-9, iterations + 1,
                 backward ? ", then the backward's" : "");
  Status status;
  const Timing forward = time_calls(spec.device, 1, iterations,
                                    with_progress("forward", iterations + 1, slow, [&] { return workload->forward(); }),
                                    &status);
  if (!status) return report_failure("forward", status);
  print_timing("forward", forward, forward_flops(spec));
  if (backward) {
    const Timing timing = time_calls(
        spec.device, 1, iterations,
        with_progress("backward", iterations + 1, slow, [&] { return workload->backward(); }), &status);
    if (!status) return report_failure("backward", status);
    print_timing("backward", timing, backward_flops(spec));
  }
  std::fflush(stdout);

  workload->download();
  if (slow) std::fprintf(stderr, "hfa run: checking a sample against the float64 reference\n");
  return check_and_report(*workload, backward);
}

}  // namespace hfa::tool
