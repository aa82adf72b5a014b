// The float64 oracle of a KVCase (the CPU reference on the dequantized cache), shared by the CPU
// and the GPU tests of the KV-cache path.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "api/validate_kvcache.hpp"
#include "cpu/reference.hpp"
#include "kvcache/kv_case.hpp"

namespace hfa::test {

// out (total rows, heads_q, hdim) in the order of KVCase::token, lse in that of lse_index.
struct Oracle {
  std::vector<double> out, lse;

  double out_at(const KVCase& c, int64_t b, int64_t i, int64_t h, int64_t d) const {
    return out[static_cast<std::size_t>((c.token(b, i) * c.heads_q() + h) * c.hdim + d)];
  }
  double lse_at(const KVCase& c, int64_t b, int64_t h, int64_t i) const {
    return lse[static_cast<std::size_t>(c.lse_index(b, h, i))];
  }
};

inline Oracle oracle_of(KVCase& c) {
  detail::KVCacheProblem problem;
  const Status status = detail::build_kvcache_problem(
      {&c.q.tensor, &c.k.tensor, &c.v.tensor, &c.out.tensor, &c.lse.tensor, &c.options},
      detail::Purpose::run, &problem);
  EXPECT_TRUE(status.is_ok()) << status.message();
  Oracle o;
  o.out.assign(static_cast<std::size_t>(c.total_q() * c.heads_q() * c.hdim), 0.0);
  o.lse.assign(static_cast<std::size_t>(c.heads_q() * c.total_q()), 0.0);
  cpu::reference_forward_kvcache(problem, o.out.data(), o.lse.data());
  return o;
}

// Allowed error of a call's out and lse against the oracle.
struct Tolerance {
  double out;  // relative to 1 + |oracle|: P and the output rounded to q's dtype
  double lse;  // relative to max(1, |oracle|)
};

struct Errors {
  double max_abs = 0.0, max_lse = 0.0;
  int failures = 0;  // every out element and lse outside the tolerance
};

// Compares every out element and LSE of c (after its run) with the oracle; a row the oracle
// gives -inf must get -inf. report: the first five failures become gtest failures.
inline Errors compare(KVCase& c, const Oracle& o, const Tolerance& tol, bool report) {
  Errors e;
  for (int64_t b = 0; b < c.batch(); ++b)
    for (int64_t h = 0; h < c.heads_q(); ++h)
      for (int64_t i = 0; i < c.rows_of(b); ++i) {
        const double want_lse = o.lse_at(c, b, h, i);
        const float got_lse = c.lse_at(b, h, i);
        if (std::isinf(want_lse)) {
          if (!(std::isinf(got_lse) && got_lse < 0) && ++e.failures <= 5 && report)
            ADD_FAILURE() << "b " << b << " h " << h << " i " << i << ": lse " << got_lse << ", oracle -inf";
        } else {
          const double err = std::abs(got_lse - want_lse);
          e.max_lse = std::max(e.max_lse, err);
          if (!(err <= tol.lse * std::max(1.0, std::abs(want_lse))) && ++e.failures <= 5 && report)
            ADD_FAILURE() << "b " << b << " h " << h << " i " << i << ": lse " << got_lse << ", oracle " << want_lse;
        }
        for (int64_t d = 0; d < c.hdim; ++d) {
          const double want = o.out_at(c, b, i, h, d);
          const double got = c.out_at(b, i, h, d);
          const double err = std::abs(got - want);
          if (err == err) e.max_abs = std::max(e.max_abs, err);
          if (!(err <= tol.out * (1.0 + std::abs(want))) && ++e.failures <= 5 && report)
            ADD_FAILURE() << "out(" << b << ", " << i << ", " << h << ", " << d << ") = " << got
                          << ", oracle " << want;
        }
      }
  return e;
}

}  // namespace hfa::test
