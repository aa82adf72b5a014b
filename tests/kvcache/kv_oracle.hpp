// The float64 oracle of a KVCase (the CPU reference on the dequantized cache), shared by the CPU
// and the GPU tests of the KV-cache path.
#pragma once

#include <gtest/gtest.h>

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
      {&c.q.tensor, &c.k.tensor, &c.v.tensor, &c.out.tensor, &c.lse.tensor, &c.options}, &problem);
  EXPECT_TRUE(status.is_ok()) << status.message();
  Oracle o;
  o.out.assign(static_cast<std::size_t>(c.total_q() * c.heads_q() * c.hdim), 0.0);
  o.lse.assign(static_cast<std::size_t>(c.heads_q() * c.total_q()), 0.0);
  cpu::reference_forward_kvcache(problem, o.out.data(), o.lse.data());
  return o;
}

}  // namespace hfa::test
