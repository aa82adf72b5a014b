// The accuracy rule of docs/design.md §6 and the checks that go with it. Each returns a Report
// whose text says what was compared, the errors, the bound and where the worst element is;
// use it as EXPECT_TRUE(report.ok) << report.text.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace hfa::test {

struct Report {
  bool ok = true;
  std::string text;
};

// Distance between two values, where equal infinities (−inf LSE of empty rows) are 0 apart and
// anything involving NaN, or an infinity against a finite value, is infinitely far.
inline double distance(double a, double b) {
  constexpr double kFar = std::numeric_limits<double>::infinity();
  if (std::isnan(a) || std::isnan(b)) return kFar;
  if (std::isinf(a) || std::isinf(b)) return a == b ? 0.0 : kFar;
  return std::fabs(a - b);
}

// §6: passes when max|out − ref| ≤ 2·max|peer − ref| + floor, where peer is a standard
// low-precision implementation of the same (rounded) inputs.
inline Report check_accuracy(std::string_view what, const std::vector<double>& out,
                             const std::vector<double>& peer, const std::vector<double>& ref,
                             double floor = 1e-5) {
  std::ostringstream text;
  if (out.size() != ref.size() || peer.size() != ref.size()) {
    text << what << ": sizes differ (out " << out.size() << ", peer " << peer.size() << ", ref "
         << ref.size() << ")";
    return {false, text.str()};
  }
  double out_error = 0.0, peer_error = 0.0;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double e = distance(out[i], ref[i]);
    if (e > out_error) {
      out_error = e;
      worst = i;
    }
    peer_error = std::max(peer_error, distance(peer[i], ref[i]));
  }
  const double bound = 2.0 * peer_error + floor;
  const bool ok = out_error <= bound;
  text.precision(4);
  text << what << ": max|out-ref| " << out_error << (ok ? " <= " : " > ") << "bound " << bound
       << " (2*max|peer-ref| " << 2.0 * peer_error << " + " << floor << ")";
  if (!ref.empty()) {
    text.precision(9);
    text << "; worst at index " << worst << ": out " << out[worst] << ", ref " << ref[worst]
         << ", peer " << peer[worst];
  }
  return {ok, text.str()};
}

// Every element was written: none is still the NaN the buffer was filled with.
inline Report check_all_written(std::string_view what, const std::vector<double>& values) {
  std::size_t unwritten = 0, first = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i]) && unwritten++ == 0) first = i;
  }
  std::ostringstream text;
  text << what << ": " << unwritten << " of " << values.size() << " elements not written (NaN)";
  if (unwritten > 0) text << ", the first at index " << first;
  return {unwritten == 0, text.str()};
}

// LSE against the reference: −inf exactly where the reference is −inf (rows that see no key),
// finite elsewhere within the §6 bound.
inline Report check_lse(const std::vector<double>& lse, const std::vector<double>& peer,
                        const std::vector<double>& ref, double floor = 1e-5) {
  for (std::size_t i = 0; i < ref.size() && i < lse.size(); ++i) {
    const bool empty_row = std::isinf(ref[i]) && ref[i] < 0;
    if (empty_row != (std::isinf(lse[i]) && lse[i] < 0)) {
      std::ostringstream text;
      text << "lse: index " << i << " is " << lse[i] << " where the reference is " << ref[i]
           << " (a row that sees no key must give -inf, any other row a finite value)";
      return {false, text.str()};
    }
  }
  return check_accuracy("lse", lse, peer, ref, floor);
}

// Values that are exactly zero (the output and gradients of rows that see no key).
inline Report check_zero(std::string_view what, const std::vector<double>& values,
                         const std::vector<std::size_t>& indices) {
  for (std::size_t i : indices) {
    if (values.at(i) != 0.0) {
      std::ostringstream text;
      text << what << ": index " << i << " is " << values[i] << ", expected exactly 0";
      return {false, text.str()};
    }
  }
  return {true, std::string(what) + ": all zero"};
}

// Elements an operation must not write: they still hold the NaN they were filled with.
inline Report check_untouched(std::string_view what, const std::vector<double>& values,
                              const std::vector<std::size_t>& indices) {
  for (std::size_t i : indices) {
    if (!std::isnan(values.at(i))) {
      std::ostringstream text;
      text << what << ": index " << i << " was written (" << values[i]
           << "), expected the NaN it was filled with";
      return {false, text.str()};
    }
  }
  return {true, std::string(what) + ": untouched"};
}

}  // namespace hfa::test
