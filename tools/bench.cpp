// `hfa bench`: TFLOP/s over a grid of shapes, as a table or as the JSON of docs/design.md §5.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "budget.hpp"
#include "commands.hpp"
#include "cpu/bench.hpp"
#include "timer.hpp"
#include "workload.hpp"

namespace hfa::tool {
namespace {

constexpr const char* kUsage = R"(Usage: hfa bench [flags]

Times the forward (and with --backward the backward) over a grid of shapes on random inputs.
GPU default: the FlashAttention-3 paper grid, 16k tokens per batch (batch = tokens/seqlen),
heads = 2048/hdim, hdim 64,128,256 x seqlen 512..16k x causal no/yes. CPU default: hdim 128,
seqlen 4096, batch 1, 2 heads, and the fp32 GEMM rate of the same shapes for comparison.

  --device cpu|cuda|auto   [auto]
  --hdim LIST              comma-separated head dims
  --seqlen LIST            comma-separated sequence lengths (q and k)
  --tokens N               batch = max(1, N / seqlen)                       [16384 cuda]
  --batch N                a fixed batch instead of --tokens
  --heads N                a fixed head count instead of 2048/hdim
  --mask none|causal|both                                                   [both]
  --dtype bf16|f16|f32                                                      [bf16]
  --backward               also time the backward
  --iters N                timed iterations per shape                       [cuda 30, cpu 2]
  --json                   print the results as JSON (design §5) instead of a table
  --max-time S             refuse a grid estimated over S seconds; 0: no limit [600]

Before it allocates, the bench checks that each shape's buffers fit in the memory available
(an error names the flags to lower). Before a grid that may take a second or more, it measures
a small sample of each shape on the device and prints the estimated time on stderr.
)";

struct Row {
  Spec spec;
  std::string pass;  // "fwd" or "bwd"
  double ms = 0;
  double tflops = 0;
  double gemm_gflops = 0;  // CPU only: the machine's fp32 GEMM rate on this shape
};

std::string json_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buffer;
}

void print_json(const std::vector<Row>& rows, const std::string& device, bool backward,
                const std::string& gemm_name) {
  const char* commit = std::getenv("HFA_COMMIT");  // set by whoever runs the bench, if known
  std::printf("{\"what\": \"%s\", \"commit\": \"%s\", \"date\": \"%s\", \"device\": \"%s\",\n",
              backward ? "fwd,bwd" : "fwd", json_escape(commit ? commit : "unknown").c_str(),
              utc_now().c_str(), json_escape(device).c_str());
  std::printf(" \"versions\": {\"hfa\": \"%s\"%s},\n \"rows\": [", hfa_version(),
              gemm_name.empty() ? "" : (", \"gemm\": \"" + json_escape(gemm_name) + "\"").c_str());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const Spec& s = r.spec;
    std::printf("%s\n  {\"case\": {\"pass\": \"%s\", \"dtype\": \"%s\", \"hdim\": %lld, \"causal\": %s, "
                "\"batch\": %lld, \"heads\": %lld, \"seqlen_q\": %lld, \"seqlen_k\": %lld}, "
                "\"metric\": \"tflops\", \"hfa\": %.4f",
                i ? "," : "", r.pass.c_str(), dtype_name(s.dtype), static_cast<long long>(s.hdim),
                s.causal ? "true" : "false", static_cast<long long>(s.batch),
                static_cast<long long>(s.heads), static_cast<long long>(s.seqlen_q),
                static_cast<long long>(s.seqlen_k), r.tflops);
    if (r.gemm_gflops > 0) std::printf(", \"gemm_fp32\": %.4f", r.gemm_gflops / 1e3);
    std::printf("}");
  }
  std::printf("\n]}\n");
}

void print_table_header(bool cpu) {
  std::printf("%5s %7s %6s %6s %7s %5s %11s %9s", "hdim", "seqlen", "batch", "heads", "causal",
              "pass", "ms", "TFLOP/s");
  if (cpu) std::printf(" %12s %9s", "GEMM GFLOP/s", "of GEMM");
  std::printf("\n");
}

void print_table_row(const Row& r) {
  const Spec& s = r.spec;
  std::printf("%5lld %7lld %6lld %6lld %7s %5s %11.3f %9.3f", static_cast<long long>(s.hdim),
              static_cast<long long>(s.seqlen_q), static_cast<long long>(s.batch),
              static_cast<long long>(s.heads), s.causal ? "yes" : "no", r.pass.c_str(), r.ms, r.tflops);
  if (r.gemm_gflops > 0)
    std::printf(" %12.1f %8.0f%%", r.gemm_gflops, 100.0 * r.tflops * 1e3 / r.gemm_gflops);
  std::printf("\n");
  std::fflush(stdout);
}

// On the CPU each pass of a shape is measured against the GEMM yardstick, timed before it.
bool measures_gemm(const Spec& s) { return s.device.kind == DeviceKind::cpu; }

// FLOPs of the yardstick's two products, S = Q·Kᵀ and O = S·V, over one head.
double gemm_flops(const Spec& s) { return 4.0 * static_cast<double>(s.seqlen_q) * s.seqlen_k * s.hdim; }

// The yardstick's fp32 matrices: q, k, v, S, O, and the transposed copy of k hfa's GEMM makes.
double gemm_bytes(const Spec& s) {
  const double q = static_cast<double>(s.seqlen_q), k = static_cast<double>(s.seqlen_k);
  return sizeof(float) * (q * k + (2 * q + 3 * k) * s.hdim);
}

// The passes of one shape: the forward (and backward) calls, and the yardstick's runs before
// each: a warm-up and three timed ones of each of its two GEMMs (OpenBLAS and hfa's own).
std::vector<Pass> shape_passes(const Spec& shape, bool backward, int iterations) {
  std::vector<Pass> passes = {{"forward", iterations + 1, forward_flops}};
  if (backward) passes.push_back({"backward", iterations + 1, backward_flops});
  if (measures_gemm(shape)) passes.push_back({"GEMM", (backward ? 2 : 1) * 2 * 4, gemm_flops});
  return passes;
}

Footprint shape_footprint(const Spec& shape, bool backward) {
  Footprint footprint = workload_footprint(shape, backward);
  if (measures_gemm(shape)) footprint.host_bytes += gemm_bytes(shape);
  return footprint;
}

// Times a sample of a shape: the workload's calls, and one run of the yardstick's GEMMs.
SampleTiming time_shape(const Spec& sample, bool backward) {
  SampleTiming timing = time_workload(sample, backward);
  if (measures_gemm(sample)) {
    const double gflops = cpu::measure_attention_gemm_gflops(static_cast<int>(sample.seqlen_q),
                                                             static_cast<int>(sample.seqlen_k),
                                                             static_cast<int>(sample.hdim), nullptr, 0.0);
    timing.call_seconds.push_back(gflops > 0 ? gemm_flops(sample) / (gflops * 1e9) : 0.0);
  }
  return timing;
}

// Checks every shape's memory, then, when the grid may take long, prints the estimated time of
// each shape (measured on samples) and holds the total to --max-time.
void check_budget(const std::vector<Spec>& grid, bool backward, int iterations, double max_seconds) {
  bool long_run = false;
  for (const Spec& shape : grid) {
    const Footprint footprint = shape_footprint(shape, backward);
    require_memory(footprint, shape.device,
                   "lower --seqlen, --batch (or --tokens) or --heads (at " + shape.describe() + ")");
    long_run = long_run || may_take_long(shape, shape_passes(shape, backward, iterations), footprint);
  }
  if (!long_run) return;
  std::fprintf(stderr, "hfa bench: estimate, from rates measured on a sample of each shape:\n");
  double total = 0;
  for (const Spec& shape : grid) {
    const std::vector<Pass> passes = shape_passes(shape, backward, iterations);
    const Estimate estimate = estimate_time(
        shape, passes, [&](const Spec& s) { return shape_footprint(s, backward); },
        [&](const Spec& sample) { return time_shape(sample, backward); });
    std::string line;
    for (std::size_t i = 0; i < passes.size(); ++i)
      line += (i ? ", " : "") + describe_pass(estimate, passes, i, shape);
    std::fprintf(stderr, "  %s: %s; %s\n", shape.describe().c_str(), line.c_str(),
                 format_seconds(estimate.total_seconds()).c_str());
    total += estimate.total_seconds();
  }
  std::fprintf(stderr, "  in all %s\n", format_seconds(total).c_str());
  enforce_max_time(total, max_seconds,
                   "shorten the --hdim or --seqlen list, lower --batch (or --tokens), --heads or --iters");
}

}  // namespace

int bench_command(Args& args) {
  if (args.wants_help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const Device device = parse_device(args);
  const bool cpu = device.kind == DeviceKind::cpu;
  const std::vector<int64_t> hdims = args.integers("hdim", cpu ? std::vector<int64_t>{128} : std::vector<int64_t>{64, 128, 256}, 1, 1024);
  const std::vector<int64_t> seqlens = args.integers(
      "seqlen", cpu ? std::vector<int64_t>{4096} : std::vector<int64_t>{512, 1024, 2048, 4096, 8192, 16384}, 1, 1 << 30);
  const int64_t tokens = args.integer("tokens", cpu ? 4096 : 16384, 1, int64_t{1} << 40);
  const int64_t fixed_batch = args.integer("batch", 0, 0, 1 << 30);
  const int64_t fixed_heads = args.integer("heads", cpu ? 2 : 0, 0, 4096);
  const std::string mask = args.choice("mask", "both", {"none", "causal", "both"});
  const DType dtype = parse_dtype(args.choice("dtype", "bf16", {"bf16", "f16", "f32"}));
  const bool backward = args.flag("backward");
  const int iterations = static_cast<int>(args.integer("iters", cpu ? 2 : 30, 1, 100000));
  const bool json = args.flag("json");
  const double max_seconds = parse_max_time(args);
  args.finish();

  std::vector<Spec> grid;
  for (int64_t hdim : hdims)
    for (int64_t seqlen : seqlens)
      for (bool causal : {false, true}) {
        if ((causal && mask == "none") || (!causal && mask == "causal")) continue;
        Spec spec;
        spec.device = device;
        spec.dtype = dtype;
        spec.hdim = spec.hdim_v = hdim;
        spec.seqlen_q = spec.seqlen_k = seqlen;
        spec.batch = fixed_batch > 0 ? fixed_batch : std::max<int64_t>(1, tokens / seqlen);
        spec.heads = spec.kv_heads = fixed_heads > 0 ? fixed_heads : std::max<int64_t>(1, 2048 / hdim);
        spec.causal = causal;
        grid.push_back(spec);
      }

  const std::string device_name = describe_device(device);
  if (!json) {
    std::printf("hfa bench: %s, %s\n", device_name.c_str(), dtype_name(dtype));
    std::fflush(stdout);
  }
  try {
    check_budget(grid, backward, iterations, max_seconds);
  } catch (const WorkloadError& e) {
    std::fprintf(stderr, "hfa bench: %s\n", e.what());
    return exit_code_for(e.status());
  }
  if (!json) print_table_header(cpu);

  std::vector<Row> rows;
  std::string gemm_name;
  for (const Spec& spec : grid) {
    std::unique_ptr<Workload> workload;
    try {
      workload = std::make_unique<Workload>(spec, 0, backward);
    } catch (const WorkloadError& e) {
      std::fprintf(stderr, "hfa bench: %s: %s\n", spec.describe().c_str(), e.what());
      return exit_code_for(e.status());
    }
    for (const bool bwd : {false, true}) {
      if (bwd && !backward) break;
      // The same S = QKᵀ and O = PV products as dense fp32 GEMMs: the ceiling the tiled kernel
      // is measured against (it does the same FLOPs, plus the softmax). Timed right before each
      // pass, so that a ratio's two rates see the same load from other processes.
      const double gemm = !measures_gemm(spec) ? 0.0
                                      : cpu::measure_attention_gemm_gflops(
                                            static_cast<int>(spec.seqlen_q), static_cast<int>(spec.seqlen_k),
                                            static_cast<int>(spec.hdim), &gemm_name);
      Status status;
      const Timing timing = time_calls(
          device, 1, iterations, [&] { return bwd ? workload->backward() : workload->forward(); }, &status);
      if (!status) {
        std::fprintf(stderr, "hfa bench: %s%s: %s\n", spec.describe().c_str(), bwd ? " (backward)" : "",
                     status.message().c_str());
        return exit_code_for(status);
      }
      const double flops = bwd ? backward_flops(spec) : forward_flops(spec);
      const double tflops = flops / (timing.median_ms * 1e-3) / 1e12;
      rows.push_back({spec, bwd ? "bwd" : "fwd", timing.median_ms, tflops, gemm});
      if (!json) print_table_row(rows.back());
    }
  }

  if (json)
    print_json(rows, device_name, backward, gemm_name);
  else if (cpu && !gemm_name.empty())
    std::printf("GEMM: %s, fp32, the same QK^T and PV products per head\n", gemm_name.c_str());
  return 0;
}

}  // namespace hfa::tool
