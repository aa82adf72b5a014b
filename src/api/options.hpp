// The options structs from their one description (hfa/options.def): conversions between C and
// C++ (to_c is public in hfa.hpp), the C defaults, the checks of the values' ranges, and the
// description hfa_describe_options exports.
#pragma once

#include <cstddef>
#include <span>

#include "common/kvcache_problem.hpp"
#include "common/problem.hpp"
#include "hfa/hfa.hpp"

namespace hfa::detail {

// The C defaults, field by field the same as a default-constructed hfa::Options.
hfa_options default_c_options();

Options from_c(const hfa_options& options);

hfa_kvcache_options default_c_kvcache_options();
KVCacheOptions from_c(const hfa_kvcache_options& options);

// An options struct's struct_size (`given`, the first field of every version of it) against
// the library's sizeof (`ours`): equal, or an invalid-argument status naming the options (hfa.h
// says why a larger struct is refused too). The caller reads no other field before this passes.
// Inline, the message apart: every call checks one or two, and a passing check is a compare.
Status struct_size_mismatch(std::size_t given, std::size_t ours);
inline Status check_struct_size(std::size_t given, std::size_t ours) {
  if (given == ours) [[likely]] return Status::ok();
  return struct_size_mismatch(given, ours);
}

// Every INT32, REAL and SCALE option in its range (the row's low and high; REAL and SCALE
// finite), or an invalid-argument status naming the first that is not.
Status check_option_values(const Options& options);
Status check_option_values(const KVCacheOptions& options);

// Every option that is a value (all rows but the tensors') into the problem's member of its name
// (common/option_values.hpp): a SCALE not given as its row's default. The API resolves the few
// that need it (softmax_scale, the window, causal) afterwards.
void copy_values(const Options& options, ForwardProblem* problem);
void copy_values(const KVCacheOptions& options, KVCacheProblem* problem);

// The rows of a struct (empty for an unknown one).
std::span<const hfa_option_info> describe_options(hfa_options_struct which);

}  // namespace hfa::detail
