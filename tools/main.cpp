// hfa: run, benchmark and inspect the attention library from the command line.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "commands.hpp"

namespace {

constexpr const char* kUsage = R"(Usage: hfa <command> [flags]

Commands:
  run     run one attention problem on random inputs, time it, check it against the
          float64 reference on a sample
  bench   a table of shapes with their TFLOP/s (--json for machine-readable output)
  info    version, devices, backends

`hfa <command> --help` lists a command's flags; `hfa --version` prints the version.
)";

}  // namespace

namespace hfa::tool {

int exit_code_for(const Status& status) {
  if (status.is_ok()) return 0;
  return status.code() == Code::invalid_argument ? 2 : 1;
}

}  // namespace hfa::tool

int main(int argc, char** argv) {
  using namespace hfa::tool;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command == "--version" || command == "-V") {
    std::printf("hfa %s\n", hfa_version());
    return 0;
  }
  Args args(std::vector<std::string>(argv + 2, argv + argc));
  try {
    if (command == "run") return run_command(args);
    if (command == "bench") return bench_command(args);
    if (command == "info") return info_command(args);
    std::fprintf(stderr, "hfa: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "hfa %s: %s\n(see `hfa %s --help`)\n", command.c_str(), e.what(),
                 command.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hfa %s: %s\n", command.c_str(), e.what());
    return 1;
  }
}
