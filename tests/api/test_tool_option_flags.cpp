// The tool's flags made of the options' rows (tools/option_flags.cpp), row by row through the
// library's description: every scalar row of hfa_options the tool does not set from a flag of
// its own is a flag and a line of the usage text, and each sets its field; a value out of the
// row's range is refused naming the flag. A row added to the table is tested here with no new
// test code.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <string_view>

#include "args.hpp"
#include "option_flags.hpp"

namespace hfa::tool {
namespace {

// The rows set from the tool's own flags (--causal, --window, --softcap, --sm-margin, --varlen).
bool set_by_the_tool(std::string_view caller) {
  for (std::string_view own : {"causal", "window_size", "softcap", "sm_margin", "max_seqlen_q",
                               "max_seqlen_k"})
    if (caller == own) return true;
  return false;
}

bool scalar(const hfa_option_info& row) {
  return row.kind == HFA_KIND_FLAG || row.kind == HFA_KIND_INT32 || row.kind == HFA_KIND_REAL ||
         row.kind == HFA_KIND_SCALE;
}

std::string flag_of(const hfa_option_info& row) {
  std::string name = std::string("--") + row.caller;
  for (char& c : name)
    if (c == '_') c = '-';
  return name;
}

// The C field of `row` in the C struct of `options`, as a double (a SCALE: its value).
double field(const Options& options, const hfa_option_info& row) {
  const hfa_options c = to_c(options);
  const auto* at = reinterpret_cast<const unsigned char*>(&c) + row.offset;
  int32_t i = 0;
  float f = 0;
  if (row.kind == HFA_KIND_REAL || row.kind == HFA_KIND_SCALE) return std::memcpy(&f, at, 4), f;
  return std::memcpy(&i, at, 4), i;
}

TEST(ToolOptionFlags, EveryScalarRowIsAFlagThatSetsItsField) {
  int32_t count = 0;
  const hfa_option_info* rows = hfa_describe_options(HFA_OPTIONS_ATTENTION, &count, nullptr);
  const std::string usage = option_flags_usage();
  int flags = 0;
  for (int32_t n = 0; n < count; ++n) {
    const hfa_option_info& row = rows[n];
    if (!scalar(row) || set_by_the_tool(row.caller)) continue;
    ++flags;
    const std::string flag = flag_of(row);
    SCOPED_TRACE(flag);
    EXPECT_NE(usage.find(flag + " "), std::string::npos);
    // A value inside the range (the flag's presence for a FLAG) sets the field.
    const double value = row.kind == HFA_KIND_FLAG ? 1 : row.low + 1;
    Args args(row.kind == HFA_KIND_FLAG
                  ? std::vector<std::string>{flag}
                  : std::vector<std::string>{flag, std::to_string(static_cast<int>(value))});
    Options options;
    parse_option_flags(args, &options);
    args.finish();  // every token consumed
    EXPECT_EQ(field(options, row), value);
    if (row.kind == HFA_KIND_FLAG) continue;
    Args below({flag, std::to_string(row.low - 1)});
    try {
      parse_option_flags(below, &options);
      ADD_FAILURE() << "a value below the row's range was taken";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(flag + ": ", 0), 0u) << e.what();
    }
  }
  EXPECT_GE(flags, 3);  // softmax_scale, deterministic, the descale blocks, ...
}

}  // namespace
}  // namespace hfa::tool
