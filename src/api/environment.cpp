#include "common/environment.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "common/errors.hpp"

namespace hfa::detail {
namespace {

constexpr int kMaxCpuThreads = 4096;  // as the message says

const char* value_of(EnvironmentLookup lookup, const char* name) {
  const char* value = lookup(name);
  return value != nullptr && value[0] != '\0' ? value : nullptr;
}

Status bad_value(const char* name, const char* value, const char* accepted) {
  return invalid(name, "environment variable set to \"", value, "\"; accepted: ", accepted);
}

Status read_cpu_threads(EnvironmentLookup lookup, int* threads) {
  const char* value = value_of(lookup, "HFA_CPU_THREADS");
  if (value == nullptr) return Status::ok();
  const char* end = value + std::strlen(value);
  int count = 0;
  const auto [stop, error] = std::from_chars(value, end, count);
  if (error != std::errc() || stop != end || count < 1 || count > kMaxCpuThreads)
    return bad_value("HFA_CPU_THREADS", value,
                     "an integer from 1 to 4096 (threads, the caller's included)");
  *threads = count;
  return Status::ok();
}

Status read_cpu_isa(EnvironmentLookup lookup, CpuIsa* isa) {
  const char* value = value_of(lookup, "HFA_CPU_ISA");
  if (value == nullptr) return Status::ok();
  if (std::strcmp(value, "auto") == 0) {
    *isa = CpuIsa::best;
  } else if (std::strcmp(value, "generic") == 0) {
    *isa = CpuIsa::generic;
  } else {
    return bad_value("HFA_CPU_ISA", value, "auto (AVX-512 when the CPU has it), generic");
  }
  return Status::ok();
}

}  // namespace

Status read_switch(EnvironmentLookup lookup, const char* name, bool* value) {
  const char* text = value_of(lookup, name);
  if (text == nullptr) return Status::ok();
  if (std::strcmp(text, "0") != 0 && std::strcmp(text, "1") != 0)
    return bad_value(name, text, "0 (off), 1 (on)");
  *value = text[0] == '1';
  return Status::ok();
}

Environment read_environment(EnvironmentLookup lookup) {
  Environment env;
  for (Status s : {read_cpu_threads(lookup, &env.cpu_threads), read_cpu_isa(lookup, &env.cpu_isa),
                   read_switch(lookup, "HFA_SM90_PACK_GQA", &env.sm90_pack_gqa),
                   read_switch(lookup, "HFA_SM90_DECODE_STREAM", &env.sm90_decode_stream)}) {
    if (!s && env.status) env.status = s;
  }
  return env;
}

const char* process_variable(const char* name) { return std::getenv(name); }

const Environment& environment() {
  static const Environment env = read_environment(process_variable);
  return env;
}

}  // namespace hfa::detail
