// The FlashAttention algorithm on the CPU: the kernels behind the "cpu" backend. Inputs and
// outputs are host memory described by the problem; work is spread over ThreadPool::shared().
#pragma once

#include "common/problem.hpp"

namespace hfa::cpu {

// Writes p.out (in p.out_dtype) and, when not null, p.lse.
Status tiled_forward(const detail::ForwardProblem& p);

// The same for e4m3 inputs: dequantized with their descales into fp32 first (fp8_forward.cpp).
Status fp8_forward(const detail::ForwardProblem& p);

// Writes dq, dk, dv in the input dtype from q, k, v, out, lse and dout. key_ranges: how many
// ranges each head's keys are split into, each summing its own fp32 slice of dQ (backward.cpp);
// 0 lets the thread count choose. Tests set it to walk partitions this machine would not pick.
Status tiled_backward(const detail::BackwardProblem& p, int key_ranges = 0);

}  // namespace hfa::cpu
