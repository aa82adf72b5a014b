// The environment variables hfa reads (the README's table lists them). Each is checked when it is
// read: a bad value fails the API's calls with an error naming the variable and the values it
// accepts, where ignoring it would run something other than what the user asked for.
#pragma once

#include "hfa/hfa.hpp"

namespace hfa::detail {

enum class CpuIsa { best, generic };

struct Environment {
  int cpu_threads = 0;              // HFA_CPU_THREADS; 0: one thread per hardware thread
  CpuIsa cpu_isa = CpuIsa::best;    // HFA_CPU_ISA
  bool sm90_pack_gqa = true;        // HFA_SM90_PACK_GQA
  bool sm90_decode_stream = true;   // HFA_SM90_DECODE_STREAM
  Status status;                    // the first bad variable's error (its field keeps the default)
};

// std::getenv (process_variable), or a test's stand-in. Unset or empty means the default.
using EnvironmentLookup = const char* (*)(const char* name);
const char* process_variable(const char* name);

Environment read_environment(EnvironmentLookup lookup);

// The process's variables, read once, on first use: the thread pool and the kernel choice are
// made once, so a later change could not take effect anyway.
const Environment& environment();

// A 0/1 switch: `*value` keeps its default when `name` is unset or empty.
Status read_switch(EnvironmentLookup lookup, const char* name, bool* value);

}  // namespace hfa::detail
