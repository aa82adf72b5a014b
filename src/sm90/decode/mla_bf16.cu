// The MLA decode kernel for bf16 q and cache (mla_kernel.cuh).
#include <cuda_bf16.h>

#include "sm90/decode/mla_launch.cuh"

namespace hfa::sm90::decode {
template Status run_mla<__nv_bfloat16>(const detail::KVCacheProblem&, const Plan&);
}  // namespace hfa::sm90::decode
