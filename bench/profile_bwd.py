#!/usr/bin/env python3
"""One backward call of hfa, FlashAttention-3 or SDPA's cuDNN backend between
cudaProfilerStart/Stop, for `ncu --profile-from-start off`: bf16, the backward alone on the
forward's out and LSE (as bench_bwd.py's "bwd" mode times it), after three warm-up calls.
Default shape: 16k tokens of 8k (batch 2), 2048 / hdim heads; --seqlen, --batch, --heads and
--heads-kv (GQA) change it. FA3 is imported from the folder HFA_FA3_DIR names.

    ncu --profile-from-start off --section SpeedOfLight --section ComputeWorkloadAnalysis \\
        --section WarpStateStats --section MemoryWorkloadAnalysis \\
        python3 bench/profile_bwd.py {hfa,hfa_det,fa3,fa3_det,cudnn} [HDIM [causal]] [--seqlen S ...]
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import hfa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("impl", choices=["hfa", "hfa_det", "fa3", "fa3_det", "cudnn"])
    p.add_argument("hdim", type=int, nargs="?", default=128)
    p.add_argument("causal", nargs="?", default="", choices=["", "causal"])
    p.add_argument("--seqlen", type=int, default=8192)
    p.add_argument("--batch", type=int, default=None, help="default: 16384 / seqlen")
    p.add_argument("--heads", type=int, default=None, help="default: 2048 / hdim")
    p.add_argument("--heads-kv", type=int, default=None, help="default: --heads")
    a = p.parse_args()
    a.batch = a.batch or max(1, 16384 // a.seqlen)
    a.heads = a.heads or 2048 // a.hdim
    a.heads_kv = a.heads_kv or a.heads
    return a


def backward_step(a, q, k, v, grad):
    """The backward alone, on out and LSE of one forward made here."""
    causal = a.causal == "causal"
    deterministic = a.impl.endswith("_det")
    if a.impl.startswith("hfa"):
        out, lse = hfa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
        return lambda: hfa.flash_attn_backward(grad, q, k, v, out, lse, causal=causal,
                                               deterministic=deterministic)
    if a.impl.startswith("fa3"):
        sys.path.insert(0, os.environ["HFA_FA3_DIR"])
        import flash_attn_interface as fa3
        scale = q.shape[-1] ** -0.5
        out, lse, *_ = fa3._flash_attn_forward(q, k, v, softmax_scale=scale, causal=causal)
        dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
        return lambda: fa3._flash_attn_backward(grad, q, k, v, out, lse, dq=dq, dk=dk, dv=dv,
                                                softmax_scale=scale, is_causal=causal,
                                                deterministic=deterministic)
    leaves = [x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal,
                                             enable_gqa=a.heads != a.heads_kv)
    return lambda: torch.autograd.grad(out, leaves, grad.transpose(1, 2), retain_graph=True)


def main():
    a = parse_args()
    shape_q = (a.batch, a.seqlen, a.heads, a.hdim)
    shape_kv = (a.batch, a.seqlen, a.heads_kv, a.hdim)
    q, grad = (torch.randn(shape_q, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(shape_kv, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    step = backward_step(a, q, k, v, grad)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        benchlib.profile_once(step)


if __name__ == "__main__":
    main()
