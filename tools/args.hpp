// A small command-line parser for the tool. Flags are `--name value`, `--name=value` or bare
// switches; each accessor consumes what it reads, and finish() rejects whatever is left, so an
// unknown or misspelt flag is an error, never silently ignored.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace hfa::tool {

// A bad command line: main prints the message and exits with status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  explicit Args(std::vector<std::string> tokens);

  bool wants_help() const;

  // A bare switch (`--causal`).
  bool flag(const std::string& name);
  // A flag's value, when the flag is present (the last one wins if repeated).
  std::optional<std::string> value(const std::string& name);

  int64_t integer(const std::string& name, int64_t fallback, int64_t min, int64_t max);
  double number(const std::string& name, double fallback, double min, double max);
  std::string choice(const std::string& name, const std::string& fallback,
                     std::initializer_list<const char*> allowed);
  // Comma-separated integers (`--seqlen 1024,4096`).
  std::vector<int64_t> integers(const std::string& name, std::vector<int64_t> fallback,
                                int64_t min, int64_t max);

  // Throws UsageError naming the first token no accessor consumed.
  void finish() const;

 private:
  struct Token {
    std::string text;
    bool used = false;
  };
  std::vector<Token> tokens_;
};

// Parses one integer in [min, max]; `flag` names the culprit in the error.
int64_t parse_integer(const std::string& flag, const std::string& text, int64_t min, int64_t max);
// A finite number in [min, max]; errors name `flag`.
double parse_number(const std::string& flag, const std::string& text, double min, double max);

}  // namespace hfa::tool
