// The block-sparse rows of hfa_options (kv_num_blocks ... sparse_block_kv), checked together.
#pragma once

#include "common/errors.hpp"
#include "common/problem.hpp"

namespace hfa::detail {

// When kv_num_blocks is given: every block-sparse tensor's rank, shape against p (its batch,
// heads_q and lengths; batch and head dims may broadcast), dtype int32, unit last stride and
// device; on the CPU their values too. Then p->block_sparse views them. The first failure names
// the caller's argument. A block-sparse tensor without kv_num_blocks is an invalid argument.
Status attach_block_sparse(const Options& options, const Tensor& q, ForwardProblem* p);

}  // namespace hfa::detail
