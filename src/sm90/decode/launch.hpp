// Host side of the decode path: which KV-cache problems the kernels take, the split count, the
// workspace they need, and the launch. One entry per q dtype, each in its own .cu file.
#pragma once

#include <cstddef>

#include "common/kvcache_problem.hpp"

namespace hfa::sm90::decode {

struct DeviceInfo {
  int sm_count = 0;
};

// ok, or not_supported naming what this GPU path lacks.
Status check_support(const detail::KVCacheProblem& problem);

// The most query rows one sequence has, which sizes the grid's row tiles: seqlen_q, or for
// varlen queries max_seqlen_q (at most total_q: a loose bound costs no more than every row).
int32_t longest_query_rows(const detail::KVCacheProblem& problem);

// Splits per (sequence, kv-head, row tile): the chunks of split_size keys the cache's capacity
// holds, the caller's count, or from the SM count and the capacity (the lengths live on the
// device and are not read).
int choose_splits(const detail::KVCacheProblem& problem, const DeviceInfo& device);

// Bytes of the caller's workspace a call needs: the rotated queries of an append with rotary
// (append.hpp), then the split partials; 0 for one split without them.
std::size_t workspace_bytes(const detail::KVCacheProblem& problem, const DeviceInfo& device);

template <typename Element>
Status run(const detail::KVCacheProblem& problem, const DeviceInfo& device);

}  // namespace hfa::sm90::decode
