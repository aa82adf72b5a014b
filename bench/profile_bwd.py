#!/usr/bin/env python3
"""One backward call of hfa or of SDPA's cuDNN backend between cudaProfilerStart/Stop, for
`ncu --profile-from-start off` (bench/results, "Backward: dQ from registers"): bf16, batch 2,
16 heads, 8k tokens, hdim 128, non-causal, after three warm-up calls.

    ncu --profile-from-start off --section SpeedOfLight --section ComputeWorkloadAnalysis \\
        --section WarpStateStats --section MemoryWorkloadAnalysis python3 bench/profile_bwd.py hfa
"""

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import hfa


def main(impl):
    b, s, h, d = 2, 8192, 16, 128
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)

    def call():
        if impl == "hfa":
            out = hfa.flash_attn_func(q, k, v)
            torch.autograd.grad(out, (q, k, v), grad)
        else:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                out = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)))
            torch.autograd.grad(out, (q, k, v), grad.transpose(1, 2))

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "hfa")
