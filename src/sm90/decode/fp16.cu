// The decode kernels for fp16 q (plain, FP8 and FP4 caches; every head dim, head_dim.hpp).
#include <cuda_fp16.h>

#include "sm90/decode/launch.cuh"

namespace hfa::sm90::decode {
template Status run<__half>(const detail::KVCacheProblem&, const Plan&);
}  // namespace hfa::sm90::decode
