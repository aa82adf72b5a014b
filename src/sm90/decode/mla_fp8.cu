// The MLA decode kernel for FlashMLA's FP8 records with bf16 q (mla_kernel.cuh).
#include <cuda_bf16.h>

#include "sm90/decode/mla_launch.cuh"

namespace hfa::sm90::decode {

Status run_mla_fp8(const detail::KVCacheProblem& p, const Plan& plan) {
  const Params params = mla_params_of(p, plan);
  return launch_mla<__nv_bfloat16>(mla::mla_fp8_decode_kernel<__nv_bfloat16>, params, params, p);
}

}  // namespace hfa::sm90::decode
