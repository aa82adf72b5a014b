// What a run will cost, known before it starts. Memory: the bytes its buffers take, checked
// against what the machine has before anything is allocated, so that a run that cannot fit
// fails at once naming the flags to lower instead of growing until the kernel kills it. Time:
// the seconds its calls take, measured on a small sample of the problem on the same device,
// printed before a long run and held to --max-time.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "spec.hpp"

namespace hfa::tool {

// Bytes a run holds at its peak. Doubles: a product of flags can pass 2^63.
struct Footprint {
  double host_bytes = 0;    // host arrays, and on the CPU the device copies too
  double device_bytes = 0;  // GPU memory (0 on the CPU)
};

// Bytes that can still be allocated. Host: MemAvailable, less under a cgroup memory limit or an
// address-space rlimit. GPU: cudaMemGetInfo's free bytes.
double available_host_bytes();
double available_device_bytes(const Device& device);

// Throws std::runtime_error ("cannot allocate N bytes ... hint: <hint>") when `need` exceeds
// what is available on the host or on `device`. `hint` names the flags to lower.
void require_memory(const Footprint& need, const Device& device, const std::string& hint);

// One kind of call a run makes, and its work per call in FLOPs or bytes of the problem `spec`.
struct Pass {
  std::string name;  // "forward", "backward", "decode"
  int calls = 0;     // warm-up included
  std::function<double(const Spec&)> work;
  bool work_is_bytes = false;  // bytes read (a decode) rather than FLOPs
};

// Whether the run could take a second or more even at the fastest rate `device` reaches; the
// tool measures a sample (as long as a small run) only then.
bool may_take_long(const Spec& spec, const std::vector<Pass>& passes, const Footprint& footprint);

// Seconds of one sample of the problem: building it (allocating and filling its inputs), and
// one call of each pass, in the order of the passes.
struct SampleTiming {
  double setup_seconds = 0;
  std::vector<double> call_seconds;
};

struct Estimate {
  double setup_seconds = 0;         // building the real problem
  std::vector<double> pass_seconds;  // every call of each pass
  std::vector<double> rates;         // FLOP/s or bytes/s each pass ran at on the sample
  std::string sample;                // the sample measured, described
  double total_seconds() const;
};

// Measures samples of `spec` of growing size (lengths capped at 256, 512, ... then more
// kv-heads, then more sequences: the first ones of a varlen batch) until one call takes long
// enough to time, building one costs a second, or the sample is the problem itself; then scales
// the last sample to `spec`: the setup by host bytes (`footprint`), each pass by its work.
Estimate estimate_time(const Spec& spec, const std::vector<Pass>& passes,
                       const std::function<Footprint(const Spec&)>& footprint,
                       const std::function<SampleTiming(const Spec&)>& measure);

// The checks before one run: its memory (require_memory with `memory_hint`), then, when it may
// take long, its estimate ("hfa <command>: estimate ...": the work of each pass, the rate
// measured, the expected time and the memory) printed on stderr and held to max_seconds
// (naming `time_hint`).
void check_run_budget(const char* command, const Spec& spec, const std::vector<Pass>& passes,
                      const std::function<Footprint(const Spec&)>& footprint,
                      const std::function<SampleTiming(const Spec&)>& measure, double max_seconds,
                      const std::string& memory_hint, const std::string& time_hint);

// Throws UsageError naming --max-time when `seconds` exceeds max_seconds (0: no limit); `hint`
// names the flags that shrink the run.
void enforce_max_time(double seconds, double max_seconds, const std::string& hint);

// "forward 4 x 68.7 GFLOP at 39.0 GFLOP/s": pass i of `estimate` for `spec`.
std::string describe_pass(const Estimate& estimate, const std::vector<Pass>& passes, std::size_t i,
                          const Spec& spec);

// 1.5 GiB, 300 MiB, 12 KiB, 17 B.
std::string format_bytes(double bytes);
// 42 ms, 3.1 s, 12 min, 5.5 h, 300 days.
std::string format_seconds(double seconds);

// --max-time S: the longest run the tool starts (0: no limit).
double parse_max_time(Args& args);

}  // namespace hfa::tool
