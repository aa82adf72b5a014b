// The MLA decode kernel for fp16 q and cache (mla_kernel.cuh).
#include <cuda_fp16.h>

#include "sm90/decode/mla_launch.cuh"

namespace hfa::sm90::decode {
template Status run_mla<__half>(const detail::KVCacheProblem&, const Plan&);
}  // namespace hfa::sm90::decode
