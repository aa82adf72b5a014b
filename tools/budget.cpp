#include "budget.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "cpu/thread_pool.hpp"

#ifdef HFA_WITH_SM90
#include <cuda_runtime.h>
#endif

namespace hfa::tool {
namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

// The number after `key` in a "key: value [kB]" file (/proc/meminfo, /proc/self/status), in
// bytes; kUnknown when the file or the key is missing.
double proc_value_bytes(const char* path, const std::string& key) {
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    double value = 0;
    std::string unit;
    if (!(fields >> value)) return kUnknown;
    fields >> unit;
    return unit == "kB" ? value * 1024 : value;
  }
  return kUnknown;
}

// A number in a one-line file (cgroup limits); kUnknown when missing or "max" (no limit).
double file_number(const std::string& path) {
  std::ifstream file(path);
  double value = 0;
  return file >> value ? value : kUnknown;
}

// The room left under the memory limit of this process's cgroup (v2, or v1's memory controller),
// which a container sets and /proc/meminfo does not show.
double cgroup_room() {
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line, v2_path;
  while (std::getline(cgroups, line))
    if (line.rfind("0::", 0) == 0) v2_path = line.substr(3);
  double room = kUnknown;
  for (const std::string& dir : {"/sys/fs/cgroup" + v2_path, std::string("/sys/fs/cgroup")}) {
    const double limit = file_number(dir + "/memory.max");
    if (limit != kUnknown) room = std::min(room, limit - file_number(dir + "/memory.current"));
  }
  const double v1_limit = file_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  if (v1_limit != kUnknown)
    room = std::min(room, v1_limit - file_number("/sys/fs/cgroup/memory/memory.usage_in_bytes"));
  return room;
}

// The room left under `ulimit -v`, when one is set.
double address_space_room() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kUnknown;
  return static_cast<double>(limit.rlim_cur) - proc_value_bytes("/proc/self/status", "VmSize");
}

std::string format_scaled(double value, double base, std::initializer_list<const char*> units,
                          const char* suffix) {
  auto unit = units.begin();
  while (value >= base && unit + 1 != units.end()) {
    value /= base;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof text, value < 10 && unit != units.begin() ? "%.2f %s%s" : "%.1f %s%s",
                value, *unit, suffix);
  return text;
}

// 2.15 TFLOP, 41.2 GFLOP/s, 1.20 GB.
std::string format_work(double amount, bool bytes, const char* per = "") {
  return format_scaled(amount, 1000, {"", "k", "M", "G", "T", "P", "E", "Z", "Y"},
                       (std::string(bytes ? "B" : "FLOP") + per).c_str());
}

// The fastest rates a device reaches, so that only runs that are short for certain skip the
// sample: a CPU thread's bf16 dot products at 500 GFLOP/s and 20 GB/s; an H200's tensor cores
// at 2 PFLOP/s (FP8) and its HBM at 5 TB/s; a host filling inputs with random numbers at 2 GB/s.
constexpr double kFastestCpuThreadFlops = 5e11, kFastestCpuThreadBytes = 2e10;
constexpr double kFastestGpuFlops = 2e15, kFastestGpuBytes = 5e12;
constexpr double kFastestSetupBytes = 2e9;

// Samples grow until one call takes this long (the CPU's clock times it well), or building one
// takes kSampleSetupSeconds (the sample then costs what a small run does; enough).
constexpr double kSampleCallSeconds = 0.02;
constexpr double kSampleSetupSeconds = 1.0;
constexpr int64_t kFirstSampleLength = 256;

struct SampleShape {
  int64_t length_cap = kFirstSampleLength, kv_heads = 1, batch = 1;
};

Spec sample_of(const Spec& spec, const SampleShape& shape) {
  Spec s = spec;
  s.batch = shape.batch;
  s.kv_heads = shape.kv_heads;
  s.heads = shape.kv_heads * (spec.heads / spec.kv_heads);
  const auto first_capped = [&](const std::vector<int64_t>& lengths) {
    const int64_t count = std::min<int64_t>(shape.batch, static_cast<int64_t>(lengths.size()));
    std::vector<int64_t> cut(lengths.begin(), lengths.begin() + count);
    for (int64_t& n : cut) n = std::min(n, shape.length_cap);
    return cut;
  };
  const auto longest = [](const std::vector<int64_t>& lengths) {
    return lengths.empty() ? int64_t{0} : *std::max_element(lengths.begin(), lengths.end());
  };
  s.seqlen_q = std::min(spec.seqlen_q, shape.length_cap);
  s.seqlen_k = std::min(spec.seqlen_k, shape.length_cap);
  if (!spec.varlen_q.empty()) s.seqlen_q = longest(s.varlen_q = first_capped(spec.varlen_q));
  if (!spec.varlen_k.empty()) s.seqlen_k = longest(s.varlen_k = first_capped(spec.varlen_k));
  return s;
}

// The next larger sample: longer sequences, then more kv-heads, then more sequences; false when
// the sample is the problem itself.
bool grow(const Spec& spec, SampleShape* shape) {
  if (shape->length_cap < std::max(spec.seqlen_q, spec.seqlen_k)) {
    shape->length_cap *= 2;
  } else if (shape->kv_heads < spec.kv_heads) {
    shape->kv_heads = std::min(2 * shape->kv_heads, spec.kv_heads);
  } else if (shape->batch < spec.batch) {
    shape->batch = std::min(2 * shape->batch, spec.batch);
  } else {
    return false;
  }
  return true;
}

}  // namespace

double available_host_bytes() {
  double available = proc_value_bytes("/proc/meminfo", "MemAvailable");
  if (available == kUnknown)  // not Linux: the free physical pages
    available = static_cast<double>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  return std::max(0.0, std::min({available, cgroup_room(), address_space_room()}));
}

double available_device_bytes(const Device& device) {
  if (device.kind == DeviceKind::cpu) return available_host_bytes();
#ifdef HFA_WITH_SM90
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaSetDevice(device.index) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
    return static_cast<double>(free_bytes);
  cudaGetLastError();
#endif
  return kUnknown;  // cannot tell: cudaMalloc's own error stands
}

void require_memory(const Footprint& need, const Device& device, const std::string& hint) {
  const auto refuse = [&](double bytes, const char* where, double available) {
    char amount[64];
    std::snprintf(amount, sizeof amount, "%.0f", bytes);
    throw std::runtime_error(std::string("cannot allocate ") + amount + " bytes (" + format_bytes(bytes) +
                             ") of " + where + " memory for the run: " + format_bytes(available) +
                             " are available; hint: " + hint);
  };
  const double host = available_host_bytes();
  if (need.host_bytes > host) refuse(need.host_bytes, "host", host);
  if (device.kind == DeviceKind::cuda) {
    const double gpu = available_device_bytes(device);
    if (need.device_bytes > gpu) refuse(need.device_bytes, "GPU", gpu);
  }
}

bool may_take_long(const Spec& spec, const std::vector<Pass>& passes, const Footprint& footprint) {
  const bool cpu = spec.device.kind == DeviceKind::cpu;
  const double threads = cpu ? static_cast<double>(cpu::ThreadPool::shared().thread_count()) : 1.0;
  double seconds = footprint.host_bytes / kFastestSetupBytes;
  for (const Pass& pass : passes) {
    const double rate = pass.work_is_bytes ? (cpu ? threads * kFastestCpuThreadBytes : kFastestGpuBytes)
                                           : (cpu ? threads * kFastestCpuThreadFlops : kFastestGpuFlops);
    seconds += pass.calls * pass.work(spec) / rate;
  }
  return seconds >= 1.0;
}

double Estimate::total_seconds() const {
  double total = setup_seconds;
  for (double seconds : pass_seconds) total += seconds;
  return total;
}

Estimate estimate_time(const Spec& spec, const std::vector<Pass>& passes,
                       const std::function<Footprint(const Spec&)>& footprint,
                       const std::function<SampleTiming(const Spec&)>& measure) {
  SampleShape shape;
  shape.batch = std::min<int64_t>(1, spec.batch);
  Spec sample = sample_of(spec, shape);
  SampleTiming timing = measure(sample);
  while ((timing.call_seconds.empty() || timing.call_seconds[0] < kSampleCallSeconds) &&
         timing.setup_seconds < kSampleSetupSeconds && grow(spec, &shape)) {
    sample = sample_of(spec, shape);
    timing = measure(sample);
  }

  Estimate estimate;
  estimate.sample = sample.describe();
  const double sample_bytes = footprint(sample).host_bytes;
  const double bytes_ratio = sample_bytes > 0 ? footprint(spec).host_bytes / sample_bytes : 1.0;
  estimate.setup_seconds = timing.setup_seconds * bytes_ratio;
  for (std::size_t i = 0; i < passes.size(); ++i) {
    const double seconds = timing.call_seconds.at(i), sample_work = passes[i].work(sample);
    // A sample with no work (empty sequences) says only how long a call takes per byte held.
    const double ratio = sample_work > 0 ? passes[i].work(spec) / sample_work : bytes_ratio;
    estimate.pass_seconds.push_back(passes[i].calls * seconds * ratio);
    estimate.rates.push_back(sample_work > 0 && seconds > 0 ? sample_work / seconds : 0);
  }
  return estimate;
}

namespace {

void print_estimate(const char* command, const Estimate& estimate, const std::vector<Pass>& passes,
                    const Spec& spec, const Footprint& footprint) {
  std::fprintf(stderr, "hfa %s: estimate, from rates measured on a sample (%s):\n", command,
               estimate.sample.c_str());
  for (std::size_t i = 0; i < passes.size(); ++i)
    std::fprintf(stderr, "  %-50s %s\n", describe_pass(estimate, passes, i, spec).c_str(),
                 format_seconds(estimate.pass_seconds[i]).c_str());
  std::string memory = "setup: " + format_bytes(footprint.host_bytes) + " of host memory (" +
                       format_bytes(available_host_bytes()) + " available)";
  if (footprint.device_bytes > 0)
    memory += ", " + format_bytes(footprint.device_bytes) + " on the GPU (" +
              format_bytes(available_device_bytes(spec.device)) + " free)";
  std::fprintf(stderr, "  %-50s %s\n", memory.c_str(), format_seconds(estimate.setup_seconds).c_str());
  std::fprintf(stderr, "  %-50s %s\n", "in all", format_seconds(estimate.total_seconds()).c_str());
}

}  // namespace

void check_run_budget(const char* command, const Spec& spec, const std::vector<Pass>& passes,
                      const std::function<Footprint(const Spec&)>& footprint,
                      const std::function<SampleTiming(const Spec&)>& measure, double max_seconds,
                      const std::string& memory_hint, const std::string& time_hint) {
  const Footprint need = footprint(spec);
  require_memory(need, spec.device, memory_hint);
  if (!may_take_long(spec, passes, need)) return;
  const Estimate estimate = estimate_time(spec, passes, footprint, measure);
  print_estimate(command, estimate, passes, spec, need);
  enforce_max_time(estimate.total_seconds(), max_seconds, time_hint);
}

std::string describe_pass(const Estimate& estimate, const std::vector<Pass>& passes, std::size_t i,
                          const Spec& spec) {
  const Pass& pass = passes[i];
  return pass.name + " " + std::to_string(pass.calls) + " x " +
         format_work(pass.work(spec), pass.work_is_bytes) + " at " +
         format_work(estimate.rates[i], pass.work_is_bytes, "/s");
}

void enforce_max_time(double seconds, double max_seconds, const std::string& hint) {
  if (max_seconds <= 0 || seconds <= max_seconds) return;
  char limit[32];
  std::snprintf(limit, sizeof limit, "%g", max_seconds);
  throw UsageError(std::string("--max-time ") + limit + ": the run is estimated at " +
                   format_seconds(seconds) + "; " + hint + ", or raise --max-time (0: no limit)");
}

std::string format_bytes(double bytes) {
  return format_scaled(bytes, 1024, {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"}, "B");
}

std::string format_seconds(double seconds) {
  char text[64];
  if (seconds < 1)
    std::snprintf(text, sizeof text, "%.0f ms", seconds * 1e3);
  else if (seconds < 120)
    std::snprintf(text, sizeof text, "%.1f s", seconds);
  else if (seconds < 2 * 3600)
    std::snprintf(text, sizeof text, "%.1f min", seconds / 60);
  else if (seconds < 2 * 86400)
    std::snprintf(text, sizeof text, "%.1f h", seconds / 3600);
  else
    std::snprintf(text, sizeof text, "%.3g days", seconds / 86400);
  return text;
}

double parse_max_time(Args& args) { return args.number("max-time", 600, 0, 1e12); }

}  // namespace hfa::tool
