// The decode kernels for bf16 q (plain, FP8 and FP4 caches; every head dim, head_dim.hpp).
#include <cuda_bf16.h>

#include "sm90/decode/launch.cuh"

namespace hfa::sm90::decode {
template Status run<__nv_bfloat16>(const detail::KVCacheProblem&, const Plan&);
}  // namespace hfa::sm90::decode
