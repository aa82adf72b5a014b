// The checks every forward result gets, whichever backend wrote it into the case's host
// buffers: rows beyond seqused_q untouched, everything else written, out and LSE within the
// docs/design.md §6 bound of the oracle, exact zeros for rows that see no key.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "accuracy.hpp"
#include "expected.hpp"

namespace hfa::test {

#define EXPECT_REPORT(expression)            \
  do {                                       \
    const Report report_ = (expression);     \
    EXPECT_TRUE(report_.ok) << report_.text; \
  } while (false)

inline void check_forward_results(const AttentionData& data, const ForwardExpectation& expected) {
  const AttentionCase& c = data.spec();
  // Rows beyond seqused_q keep the NaN they were filled with; the rest is compared as usual
  // (the reference leaves those rows 0, and so the comparison sees them as 0 on both sides).
  const std::vector<std::size_t> unused_out = unused_row_elements(data, c.hdim_v, false);
  const std::vector<std::size_t> unused_lse = unused_row_elements(data, 0, true);
  EXPECT_REPORT(check_untouched("out rows beyond seqused_q", data.out.values(), unused_out));
  EXPECT_REPORT(check_untouched("lse rows beyond seqused_q", data.lse.values(), unused_lse));
  const std::vector<double> out = zeroed(data.out.values(), unused_out);
  const std::vector<double> lse = zeroed(data.lse.values(), unused_lse);
  EXPECT_REPORT(check_all_written("out", out));
  EXPECT_REPORT(check_all_written("lse", lse));
  EXPECT_REPORT(check_accuracy("out", out, expected.out_peer, expected.out_ref));
  EXPECT_REPORT(check_lse(lse, expected.lse_peer, expected.lse_ref, expected.lse_floor));
  EXPECT_REPORT(check_zero("out of rows that see no key", out,
                           empty_row_elements(data, expected.lse_ref, c.hdim_v)));
}

}  // namespace hfa::test
