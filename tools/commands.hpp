// The tool's subcommands. Each takes the arguments after its name and returns the exit code:
// 0 success, 1 failure (a failed check, a runtime error), 2 a bad command line. A bad flag is
// reported by throwing UsageError, which main turns into exit code 2.
#pragma once

#include <string>

#include "args.hpp"
#include "hfa/hfa.hpp"

namespace hfa::tool {

int run_command(Args& args);
int bench_command(Args& args);
int info_command(Args& args);

// The exit code for a Status from the library: an argument it rejected came from our flags.
int exit_code_for(const Status& status);

// "cpu (avx512, 2 threads)" or "cuda:0 (NVIDIA H200, 132 SMs, sm_90)".
std::string describe_device(const Device& device);

}  // namespace hfa::tool
