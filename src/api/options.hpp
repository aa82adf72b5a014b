// Conversions between the C options struct and the C++ one (to_c is public in hfa.hpp).
#pragma once

#include "hfa/hfa.hpp"

namespace hfa::detail {

// The C defaults, field by field the same as a default-constructed hfa::Options.
hfa_options default_c_options();

Options from_c(const hfa_options& options);

hfa_kvcache_options default_c_kvcache_options();
KVCacheOptions from_c(const hfa_kvcache_options& options);

}  // namespace hfa::detail
