// The KV-cache (decode) forward on the CPU: gather and dequantize each sequence's cache rows,
// then attention with an online softmax in fp32, split over the keys and merged by LSE.
#pragma once

#include "common/kvcache_problem.hpp"

namespace hfa::cpu {

// Writes p.out (in p.out_dtype) and, when not null, p.lse. Host memory; p is validated.
Status kvcache_forward(const detail::KVCacheProblem& p);

// The split count used for a sequence of seqlen_k cache tokens: ceil(seqlen_k / p.split_size)
// with a fixed split size, p.num_splits when set, else one split per 256 keys, at most 8 (on the
// CPU splits only exercise the merge; the GPU chooses from its SM count).
int32_t kvcache_splits(const detail::KVCacheProblem& p, int64_t seqlen_k);

}  // namespace hfa::cpu
