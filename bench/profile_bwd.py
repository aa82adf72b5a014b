#!/usr/bin/env python3
"""One backward call of hfa or of SDPA's cuDNN backend between cudaProfilerStart/Stop, for
`ncu --profile-from-start off` (bench/results, "Backward: dQ from registers"): bf16, 16k
tokens of 8k (batch 2), 2048 / hdim heads, after three warm-up calls.

    ncu --profile-from-start off --section SpeedOfLight --section ComputeWorkloadAnalysis \\
        --section WarpStateStats --section MemoryWorkloadAnalysis \\
        python3 bench/profile_bwd.py {hfa,hfa_det,cudnn} [HDIM [causal]]
"""

import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import hfa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402


def main(impl, d, causal):
    b, s, h = 2, 8192, 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)

    def call():
        if impl.startswith("hfa"):
            out = hfa.flash_attn_func(q, k, v, causal=causal, deterministic=impl == "hfa_det")
            torch.autograd.grad(out, (q, k, v), grad)
        else:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                out = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)),
                                                     is_causal=causal)
            torch.autograd.grad(out, (q, k, v), grad.transpose(1, 2))

    benchlib.profile_once(call)


if __name__ == "__main__":
    args = sys.argv[1:] + ["hfa", "128"][len(sys.argv) - 1:]
    main(args[0], int(args[1]), len(args) > 2 and args[2] == "causal")
