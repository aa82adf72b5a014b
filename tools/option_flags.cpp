#include "option_flags.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string_view>

namespace hfa::tool {
namespace {

// A scalar row: --<caller name, '-' for '_'> sets the field through `set`.
struct RowFlag {
  const char* field;
  const char* caller;
  hfa_option_kind kind;
  double low, high;
  const char* note;
  void (*set)(Options&, double);
};

#define HFA_TOOL_ROW(kind_code, name, low, high, caller, note, value) \
  RowFlag{#name, #caller, kind_code, double(low), double(high), note,  \
          [](Options& o, double v) { o.name = value; }},
#define HFA_TOOL_FLAG(name, ...) \
  HFA_TOOL_ROW(HFA_KIND_FLAG, name, __VA_ARGS__, v != 0)
#define HFA_TOOL_INT32(name, ...) \
  HFA_TOOL_ROW(HFA_KIND_INT32, name, __VA_ARGS__, static_cast<int32_t>(v))
#define HFA_TOOL_REAL(name, ...) \
  HFA_TOOL_ROW(HFA_KIND_REAL, name, __VA_ARGS__, static_cast<float>(v))
#define HFA_TOOL_SCALE(name, ...) \
  HFA_TOOL_ROW(HFA_KIND_SCALE, name, __VA_ARGS__, static_cast<float>(v))
#define HFA_TOOL_NONE(...)
#define HFA_TOOL_TENSOR HFA_TOOL_NONE
#define HFA_TOOL_VECTOR HFA_TOOL_NONE
#define HFA_TOOL_HANDLE HFA_TOOL_NONE
#define HFA_TOOL_BYTES HFA_TOOL_NONE

constexpr RowFlag kRows[] = {
#define HFA_ATTENTION_OPTION(kind, name, value, low, high, calls, caller, note) \
  HFA_TOOL_##kind(name, low, high, caller, note)
#include "hfa/options.def"
};

// The rows the tool sets from flags of its own (--causal, --window L,R, --softcap, --sm-margin,
// the varlen bounds from --varlen).
constexpr std::string_view kSetByTheTool[] = {"causal", "window_size", "softcap", "sm_margin",
                                              "max_seqlen_q", "max_seqlen_k"};

bool generated(const RowFlag& row) {
  for (std::string_view own : kSetByTheTool)
    if (own == row.caller) return false;
  return true;
}

std::string flag_name(const RowFlag& row) {
  std::string name = row.caller;
  for (char& c : name)
    if (c == '_') c = '-';
  return name;
}

}  // namespace

void parse_option_flags(Args& args, Options* options) {
  for (const RowFlag& row : kRows) {
    if (!generated(row)) continue;
    const std::string name = flag_name(row);
    if (row.kind == HFA_KIND_FLAG) {
      if (args.flag(name)) row.set(*options, 1);
    } else if (const auto given = args.value(name)) {
      const double value = row.kind == HFA_KIND_INT32
                               ? static_cast<double>(parse_integer(
                                     "--" + name, *given, static_cast<int64_t>(row.low),
                                     static_cast<int64_t>(row.high)))
                               : parse_number("--" + name, *given, row.low, row.high);
      row.set(*options, value);
    }
  }
}

std::string option_flags_usage() {
  std::string usage;
  for (const RowFlag& row : kRows) {
    if (!generated(row)) continue;
    const char* value = row.kind == HFA_KIND_FLAG ? "" : row.kind == HFA_KIND_INT32 ? " N" : " X";
    const std::string flag = "--" + flag_name(row) + value;
    char line[200];
    std::snprintf(line, sizeof line, "  %-24s hfa_options.%s%s%s\n", flag.c_str(), row.field,
                  *row.note ? ": " : "", row.note);
    usage += line;
  }
  return usage;
}

}  // namespace hfa::tool
