// Argument checks of the KV-cache forward: turn what the user passed into a KVCacheProblem, or
// reject it with a Status naming the argument at fault. Nothing here touches an output tensor.
#pragma once

#include "api/validate.hpp"
#include "common/kvcache_problem.hpp"

namespace hfa::detail {

struct KVCacheArgs {
  const Tensor* q = nullptr;
  const Tensor* k_cache = nullptr;
  const Tensor* v_cache = nullptr;
  const Tensor* out = nullptr;
  const Tensor* lse = nullptr;  // optional
  const KVCacheOptions* options = nullptr;
};

// The most splits a caller may ask for (hfa.h): more would only add combine work (the GPU's
// combine keeps one partial per split of a row in shared memory).
inline constexpr int32_t kMaxKVSplits = HFA_MAX_KVCACHE_SPLITS;

// A workspace query's out is a stand-in (over q's memory): it writes nothing, so the memory rule
// (overlap.hpp) is left to the call itself. `problem` is default-constructed and filled where it
// lies, as build_forward_problem's (validate.hpp).
Status build_kvcache_problem(const KVCacheArgs& args, Purpose purpose, KVCacheProblem* problem);

// The varlen offsets well formed, each length within the cache's capacity (and the rotary
// tables), each block-table entry a sequence uses a page of the cache: the first bad entry.
// Reads cache_seqlens, block_table, cu_seqlens_q and cu_seqlens_k_new (host pointers).
Status check_kvcache_values(const KVCacheProblem& problem);

// The same checks of values that live on the problem's device: cache_seqlens, the block table's
// rows and the varlen offsets read back to the host through its backend (queued on the call's
// stream, then one synchronization), then check_kvcache_values on a host copy of the problem.
Status check_kvcache_values_on_device(const KVCacheProblem& problem);

// Whether HFA_VALIDATE_KVCACHE=1 asks for the value checks on every device; a value other than
// 0 or 1 is an error naming the variable.
Status kvcache_validation_from_env(bool* on);

}  // namespace hfa::detail
