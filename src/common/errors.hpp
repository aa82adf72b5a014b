// Small helpers for building Status values (the API layer and the backends). Every rejection names
// the argument at fault first ("k: expected headdim 128 (as q), got 64"), so a user can find
// the culprit without reading hfa's source.
#pragma once

#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "hfa/hfa.hpp"

namespace hfa::detail {

// Concatenates anything with an operator<< into one string.
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <typename... Parts>
Status invalid(std::string_view argument, const Parts&... parts) {
  return {Code::invalid_argument, cat(argument, ": ", parts...)};
}

template <typename... Parts>
Status not_supported(const Parts&... parts) {
  return {Code::not_supported, cat(parts...)};
}

}  // namespace hfa::detail

// Returns from the enclosing function when `expr` yields a failed Status.
#define HFA_RETURN_IF_ERROR(expr)                        \
  do {                                                   \
    if (::hfa::Status hfa_status_ = (expr); !hfa_status_) \
      return hfa_status_;                                \
  } while (0)
