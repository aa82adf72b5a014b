// Checks a run against the float64 reference on a sample: a few (batch, head) pairs and a few
// blocks of query rows each (top, middle, bottom), since the full reference would take hours
// at benchmark sizes. Each block is cut out as a small problem of its own with the same mask.
#pragma once

#include <iosfwd>

#include "workload.hpp"

namespace hfa::tool {

struct CheckResult {
  bool passed = true;
  double out_error = 0, lse_error = 0, dq_error = 0, dk_error = 0, dv_error = 0;
  bool checked_dkdv = false;
};

// Compares out and lse (and dq; dk and dv when the problem is small enough for a full
// reference over one kv-head group) with the reference, printing one line per quantity.
// A Workload must have been download()ed. Varlen problems are checked sequence by sequence.
CheckResult check_against_reference(const HostProblem& problem, bool backward, std::ostream& log);

// The bytes the check holds beyond the problem's arrays, at its peak: one block's keys cut out in
// `key_dtype` and read by the float64 reference (its copy, and with backward its dk, dv and the
// backward's own copy), and its rows of probabilities.
double reference_check_bytes(const Spec& spec, bool backward, DType key_dtype);

}  // namespace hfa::tool
