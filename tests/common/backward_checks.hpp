// The checks every backward result gets, whichever backend wrote it into the case's host
// buffers: every gradient element written, dq, dk, dv (and dsinks) within the docs/design.md §6
// bound of the oracle, exact zeros for rows that see no key and for rows beyond seqused.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "accuracy.hpp"
#include "expected.hpp"
#include "forward_checks.hpp"

namespace hfa::test {

inline void check_backward_results(const AttentionData& data, const ForwardExpectation& fwd,
                                   const BackwardExpectation& bwd) {
  const AttentionCase& c = data.spec();
  const std::vector<double> dq = data.dq.values(), dk = data.dk.values(), dv = data.dv.values();
  EXPECT_REPORT(check_all_written("dq", dq));
  EXPECT_REPORT(check_all_written("dk", dk));
  EXPECT_REPORT(check_all_written("dv", dv));
  EXPECT_REPORT(check_accuracy("dq", dq, bwd.dq_peer, bwd.dq_ref));
  EXPECT_REPORT(check_accuracy("dk", dk, bwd.dk_peer, bwd.dk_ref));
  EXPECT_REPORT(check_accuracy("dv", dv, bwd.dv_peer, bwd.dv_ref));
  EXPECT_REPORT(check_zero("dq of rows that see no key", dq,
                           empty_row_elements(data, fwd.lse_ref, c.hdim_qk)));
  EXPECT_REPORT(check_zero("dq beyond seqused_q", dq,
                           unused_gradient_elements(data, true, c.heads_q, c.hdim_qk)));
  EXPECT_REPORT(check_zero("dk beyond seqused_k", dk,
                           unused_gradient_elements(data, false, c.heads_kv, c.hdim_qk)));
  EXPECT_REPORT(check_zero("dv beyond seqused_k", dv,
                           unused_gradient_elements(data, false, c.heads_kv, c.hdim_v)));
  if (c.sinks) {
    const std::vector<double> dsinks(data.dsinks.begin(), data.dsinks.end());
    EXPECT_REPORT(check_all_written("dsinks", dsinks));
    EXPECT_REPORT(check_accuracy("dsinks", dsinks, bwd.dsinks_peer, bwd.dsinks_ref));
  }
}

}  // namespace hfa::test
