// `hfa bench`: TFLOP/s over a grid of shapes, as a table or as the JSON of design §5.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

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
  args.finish();

  const std::string device_name = describe_device(device);
  if (!json) {
    std::printf("hfa bench: %s, %s\n", device_name.c_str(), dtype_name(dtype));
    print_table_header(cpu);
  }

  std::vector<Row> rows;
  std::string gemm_name;
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

        std::unique_ptr<Workload> workload;
        try {
          workload = std::make_unique<Workload>(spec, 0, backward);
        } catch (const WorkloadError& e) {
          std::fprintf(stderr, "hfa bench: %s: %s\n", spec.describe().c_str(), e.what());
          return exit_code_for(e.status());
        }
        // The same S = QKᵀ and O = PV products as dense fp32 GEMMs: the ceiling the tiled kernel
        // is measured against (it does the same FLOPs, plus the softmax). Timed right before
        // each pass, so that a ratio's two rates see the same load from other processes.
        auto gemm_rate = [&] {
          return cpu ? cpu::measure_attention_gemm_gflops(static_cast<int>(seqlen), static_cast<int>(seqlen),
                                                          static_cast<int>(hdim), &gemm_name)
                     : 0.0;
        };
        double gemm = gemm_rate();
        Status status;
        const Timing fwd = time_calls(device, 1, iterations, [&] { return workload->forward(); }, &status);
        if (!status) {
          std::fprintf(stderr, "hfa bench: %s: %s\n", spec.describe().c_str(), status.message().c_str());
          return exit_code_for(status);
        }
        rows.push_back({spec, "fwd", fwd.median_ms, forward_flops(spec) / (fwd.median_ms * 1e-3) / 1e12, gemm});
        if (!json) print_table_row(rows.back());
        if (!backward) continue;
        gemm = gemm_rate();
        const Timing bwd = time_calls(device, 1, iterations, [&] { return workload->backward(); }, &status);
        if (!status) {
          std::fprintf(stderr, "hfa bench: %s (backward): %s\n", spec.describe().c_str(), status.message().c_str());
          return exit_code_for(status);
        }
        rows.push_back({spec, "bwd", bwd.median_ms, backward_flops(spec) / (bwd.median_ms * 1e-3) / 1e12, gemm});
        if (!json) print_table_row(rows.back());
      }

  if (json)
    print_json(rows, device_name, backward, gemm_name);
  else if (cpu && !gemm_name.empty())
    std::printf("GEMM: %s, fp32, the same QK^T and PV products per head\n", gemm_name.c_str());
  return 0;
}

}  // namespace hfa::tool
