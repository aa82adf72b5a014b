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

// Splits per (sequence, kv-head, row tile): the caller's, or from the SM count and the cache's
// capacity (the lengths live on the device and are not read).
int choose_splits(const detail::KVCacheProblem& problem, const DeviceInfo& device);

// Bytes of the caller's workspace a call needs: the split partials, or 0 for one split.
std::size_t workspace_bytes(const detail::KVCacheProblem& problem, const DeviceInfo& device);

template <typename Element>
Status run(const detail::KVCacheProblem& problem, const DeviceInfo& device);

}  // namespace hfa::sm90::decode
