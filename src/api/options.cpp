// The options structs from their one description (hfa/options.def): the C and C++ defaults, the
// conversions between them, the copy of the values into the problems the backends take, the
// range checks of the values, and the description the library exports (hfa_describe_options).
// Each is a row macro applied to every row; a kind's rule is written once, in the macros of that
// kind.
#include "api/options.hpp"

#include <cmath>
#include <cstddef>
#include <string>

#include "common/errors.hpp"

namespace hfa {
namespace {

// ---- C <-> C++, by kind ------------------------------------------------------------------------

#define HFA_TO_C_FLAG(name) c.name = options.name ? 1 : 0;
#define HFA_TO_C_SCALE(name)                         \
  c.has_##name = options.name.has_value() ? 1 : 0;   \
  c.name = options.name.value_or(0.0f);
#define HFA_TO_C_AS_IS(name) c.name = options.name;
#define HFA_TO_C_INT32 HFA_TO_C_AS_IS
#define HFA_TO_C_REAL HFA_TO_C_AS_IS
#define HFA_TO_C_TENSOR HFA_TO_C_AS_IS
#define HFA_TO_C_VECTOR HFA_TO_C_AS_IS
#define HFA_TO_C_HANDLE HFA_TO_C_AS_IS
#define HFA_TO_C_BYTES HFA_TO_C_AS_IS

#define HFA_FROM_C_FLAG(name) c.name != 0
#define HFA_FROM_C_SCALE(name) c.has_##name ? std::optional<float>(c.name) : std::nullopt
#define HFA_FROM_C_AS_IS(name) c.name
#define HFA_FROM_C_INT32 HFA_FROM_C_AS_IS
#define HFA_FROM_C_REAL HFA_FROM_C_AS_IS
#define HFA_FROM_C_TENSOR HFA_FROM_C_AS_IS
#define HFA_FROM_C_VECTOR HFA_FROM_C_AS_IS
#define HFA_FROM_C_HANDLE HFA_FROM_C_AS_IS
#define HFA_FROM_C_BYTES HFA_FROM_C_AS_IS

// The C default of a field: the table's value, or nothing given (NULL, no scale).
#define HFA_DEFAULT_C_SCALE(name, value) c.has_##name = 0, c.name = 0.0f;
#define HFA_DEFAULT_C_TENSOR(name, value) c.name = nullptr;
#define HFA_DEFAULT_C_VECTOR HFA_DEFAULT_C_TENSOR
#define HFA_DEFAULT_C_HANDLE(name, value) c.name = nullptr;
#define HFA_DEFAULT_C_VALUE(name, value) c.name = value;
#define HFA_DEFAULT_C_FLAG HFA_DEFAULT_C_VALUE
#define HFA_DEFAULT_C_INT32 HFA_DEFAULT_C_VALUE
#define HFA_DEFAULT_C_REAL HFA_DEFAULT_C_VALUE
#define HFA_DEFAULT_C_BYTES HFA_DEFAULT_C_VALUE

// ---- options -> problem, by kind ----------------------------------------------------------------

#define HFA_COPY_VALUE_AS_IS(name, value) problem->name = options.name;
#define HFA_COPY_VALUE_FLAG HFA_COPY_VALUE_AS_IS
#define HFA_COPY_VALUE_INT32 HFA_COPY_VALUE_AS_IS
#define HFA_COPY_VALUE_REAL HFA_COPY_VALUE_AS_IS
#define HFA_COPY_VALUE_SCALE(name, value) problem->name = options.name.value_or(value);
#define HFA_COPY_VALUE_HANDLE HFA_COPY_VALUE_AS_IS
#define HFA_COPY_VALUE_BYTES HFA_COPY_VALUE_AS_IS
#define HFA_COPY_VALUE_NONE(name, value)
#define HFA_COPY_VALUE_TENSOR HFA_COPY_VALUE_NONE  // checked and viewed by the validation
#define HFA_COPY_VALUE_VECTOR HFA_COPY_VALUE_NONE

// ---- value checks, by kind ---------------------------------------------------------------------

// "must be >= low (note), got v", or "must be in [low, high] ..." where the range has a top of
// its own (more than the C ABI's int32 gives).
Status out_of_range(const char* name, double low, double high, const char* note, double value,
                    bool finite) {
  std::string range = high >= INT32_MAX ? detail::cat(">= ", low)
                                        : detail::cat("in [", low, ", ", high, "]");
  if (finite) range = "finite and " + range;
  return detail::invalid(name, "must be ", range, *note ? detail::cat(" (", note, ")") : "",
                         ", got ", value);
}

#define HFA_CHECK_INT32(name, low, high, note)                                    \
  if (options.name < (low) || options.name > (high))                              \
    return out_of_range(#name, low, high, note, options.name, false);
#define HFA_CHECK_REAL(name, low, high, note)                                     \
  if (!std::isfinite(options.name) || options.name < (low) || options.name > (high)) \
    return out_of_range(#name, low, high, note, options.name, true);
#define HFA_CHECK_SCALE(name, low, high, note)                                    \
  if (options.name && (!std::isfinite(*options.name) || *options.name < (low) ||  \
                       *options.name > (high)))                                   \
    return out_of_range(#name, low, high, note, *options.name, true);
#define HFA_CHECK_NONE(name, low, high, note)
#define HFA_CHECK_FLAG HFA_CHECK_NONE
#define HFA_CHECK_TENSOR HFA_CHECK_NONE
#define HFA_CHECK_VECTOR HFA_CHECK_NONE  // its form: validate_options.cpp
#define HFA_CHECK_HANDLE HFA_CHECK_NONE
#define HFA_CHECK_BYTES HFA_CHECK_NONE

// ---- the description ---------------------------------------------------------------------------

#define HFA_FLAG_OFFSET_SCALE(type, name) offsetof(type, has_##name)
#define HFA_FLAG_OFFSET_SAME(type, name) offsetof(type, name)
#define HFA_FLAG_OFFSET_FLAG HFA_FLAG_OFFSET_SAME
#define HFA_FLAG_OFFSET_INT32 HFA_FLAG_OFFSET_SAME
#define HFA_FLAG_OFFSET_REAL HFA_FLAG_OFFSET_SAME
#define HFA_FLAG_OFFSET_TENSOR HFA_FLAG_OFFSET_SAME
#define HFA_FLAG_OFFSET_VECTOR HFA_FLAG_OFFSET_SAME
#define HFA_FLAG_OFFSET_HANDLE HFA_FLAG_OFFSET_SAME
#define HFA_FLAG_OFFSET_BYTES HFA_FLAG_OFFSET_SAME

#define HFA_DESCRIBE(type, kind, name, value, low, high, calls, caller, note)                  \
  hfa_option_info{#name, #caller, note, HFA_KIND_##kind, static_cast<uint32_t>(calls),          \
                  offsetof(type, name), HFA_FLAG_OFFSET_##kind(type, name), double(value),       \
                  double(low), double(high)},

const hfa_option_info kAttentionOptions[] = {
#define HFA_ATTENTION_OPTION(...) HFA_DESCRIBE(hfa_options, __VA_ARGS__)
#include "hfa/options.def"
};

const hfa_option_info kKVCacheOptions[] = {
#define HFA_KVCACHE_OPTION(...) HFA_DESCRIBE(hfa_kvcache_options, __VA_ARGS__)
#include "hfa/options.def"
};

}  // namespace

hfa_options to_c(const Options& options) {
  hfa_options c = detail::default_c_options();
#define HFA_ATTENTION_OPTION(kind, name, ...) HFA_TO_C_##kind(name)
#include "hfa/options.def"
  return c;
}

hfa_kvcache_options to_c(const KVCacheOptions& options) {
  hfa_kvcache_options c = detail::default_c_kvcache_options();
#define HFA_KVCACHE_OPTION(kind, name, ...) HFA_TO_C_##kind(name)
#include "hfa/options.def"
  return c;
}

namespace detail {

hfa_options default_c_options() {
  hfa_options c{};  // padding too: the struct is compared and copied byte for byte
  c.struct_size = sizeof c;
#define HFA_ATTENTION_OPTION(kind, name, value, ...) HFA_DEFAULT_C_##kind(name, value)
#include "hfa/options.def"
  return c;
}

hfa_kvcache_options default_c_kvcache_options() {
  hfa_kvcache_options c{};
  c.struct_size = sizeof c;
#define HFA_KVCACHE_OPTION(kind, name, value, ...) HFA_DEFAULT_C_##kind(name, value)
#include "hfa/options.def"
  return c;
}

// Every member from its field, in one aggregate initialization (the members' order is the rows'):
// no default set first and overwritten, nor a memset of the struct (which, some 200 bytes, GCC
// emits as rep stos, slow to start on AMD's cores).
Options from_c(const hfa_options& c) {
  return Options{
      .struct_size = sizeof(Options),
#define HFA_ATTENTION_OPTION(kind, name, ...) .name = HFA_FROM_C_##kind(name),
#include "hfa/options.def"
  };
}

KVCacheOptions from_c(const hfa_kvcache_options& c) {
  return KVCacheOptions{
      .struct_size = sizeof(KVCacheOptions),
#define HFA_KVCACHE_OPTION(kind, name, ...) .name = HFA_FROM_C_##kind(name),
#include "hfa/options.def"
  };
}

Status check_option_values(const Options& options) {
#define HFA_ATTENTION_OPTION(kind, name, value, low, high, calls, caller, note) \
  HFA_CHECK_##kind(name, low, high, note)
#include "hfa/options.def"
  return Status::ok();
}

Status check_option_values(const KVCacheOptions& options) {
#define HFA_KVCACHE_OPTION(kind, name, value, low, high, calls, caller, note) \
  HFA_CHECK_##kind(name, low, high, note)
#include "hfa/options.def"
  return Status::ok();
}

Status struct_size_mismatch(std::size_t given, std::size_t ours) {
  if (given == 0)
    return invalid("options", "struct_size is 0: start the struct from the default options "
                   "(hfa_default_options(), a constructed hfa::Options), which set it");
  if (given < ours)
    return invalid("options", "struct of ", given, " bytes, this library needs ", ours,
                   ": rebuild against its hfa.h");
  return invalid("options", "struct of ", given, " bytes, this library's has ", ours,
                 ": the caller was built against a newer hfa.h (rebuild against this "
                 "library's, or use the library of that hfa.h)");
}

void copy_values(const Options& options, ForwardProblem* problem) {
#define HFA_ATTENTION_OPTION(kind, name, value, ...) HFA_COPY_VALUE_##kind(name, value)
#include "hfa/options.def"
}

void copy_values(const KVCacheOptions& options, KVCacheProblem* problem) {
#define HFA_KVCACHE_OPTION(kind, name, value, ...) HFA_COPY_VALUE_##kind(name, value)
#include "hfa/options.def"
}

std::span<const hfa_option_info> describe_options(hfa_options_struct which) {
  switch (which) {
    case HFA_OPTIONS_ATTENTION: return kAttentionOptions;
    case HFA_OPTIONS_KVCACHE: return kKVCacheOptions;
  }
  return {};
}

}  // namespace detail
}  // namespace hfa
