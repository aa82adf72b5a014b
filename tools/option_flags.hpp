// The options' rows (hfa/options.def) as flags of `hfa run`: one per scalar row of the forward
// and the backward that the tool does not set from flags of its own, so that a new option is a
// flag (and a line of the usage text) with no edit here.
#pragma once

#include <string>

#include "args.hpp"
#include "hfa/hfa.hpp"

namespace hfa::tool {

// Reads each generated flag present into *options, checked against its row's range.
void parse_option_flags(Args& args, Options* options);

// The flags' lines of the usage text, one a row: flag, what it takes, the row's note.
std::string option_flags_usage();

}  // namespace hfa::tool
