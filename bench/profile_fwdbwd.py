#!/usr/bin/env python3
"""Where a forward + backward step's time goes, beside the forward and the backward timed alone
(issue 10's fwdbwd cells, docs/decisions/030): torch.profiler's CUDA kernel times per kernel name
and each mode's CUDA-event time per step, on one shape.

    python3 bench/profile_fwdbwd.py {hfa,hfa_det,cudnn} BATCH SEQLEN HDIM [--causal]
        [--heads H] [--kv-heads KV] [--modes fwd bwd fwdbwd] [--json FILE]

bf16, 2048 / HDIM heads unless --heads (kv heads: as many), BSHD for hfa and BHSD for cuDNN
(as bench_bwd.py; cuDNN takes GQA through enable_gqa). JSON (docs/design.md §5):
rows {"case": {..., "mode", "part": "step" | "kernels" | "kernel", "kernel": name}, "metric":
"us", IMPL: µs a step}: "kernels" is the sum of the step's profiled kernel times, "step" its
CUDA-event time (from the host's first launch, so it includes the host's head start).
"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import hfa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

STEPS = 10


def modes(impl, b, s, d, h, h_kv, causal):
    """The three steps: fwd, bwd (of one untimed forward), fwdbwd."""
    def shape(heads):
        return (b, s, heads, d) if impl.startswith("hfa") else (b, heads, s, d)
    q, k, v = (torch.randn(shape(heads), device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for heads in (h, h_kv, h_kv))
    dout = torch.randn(shape(h), device="cuda", dtype=torch.bfloat16)

    def forward():
        if impl.startswith("hfa"):
            return hfa.flash_attn_func(q, k, v, causal=causal, deterministic=impl == "hfa_det")
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                  enable_gqa=h != h_kv)

    out = forward()
    return {"fwd": forward,
            "bwd": lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
            "fwdbwd": lambda: torch.autograd.grad(forward(), (q, k, v), dout)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("impl", choices=["hfa", "hfa_det", "cudnn"])
    p.add_argument("batch", type=int)
    p.add_argument("seqlen", type=int)
    p.add_argument("hdim", type=int)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--heads", type=int, default=None, help="query heads (default 2048 / hdim)")
    p.add_argument("--kv-heads", type=int, default=None, help="kv heads (default: --heads)")
    p.add_argument("--modes", nargs="+", choices=["fwd", "bwd", "fwdbwd"],
                   default=["fwd", "bwd", "fwdbwd"])
    p.add_argument("--json", default=None, help="write the result here")
    a = p.parse_args()
    h = a.heads or 2048 // a.hdim
    h_kv = a.kv_heads or h
    a.dtype, a.tokens, a.head_budget = "bf16", a.batch * a.seqlen, h * a.hdim
    a.warmup, a.rep = 3, STEPS  # new_result's do_bench entry: calls here, not ms
    result = benchlib.new_result(
        "profile-fwdbwd", benchlib.utc_now(), a, accuracy="none (a profile)",
        timing=f"torch.profiler CUDA kernel time and CUDA-event step time, per step, over "
               f"{STEPS} steps after 3")
    base = {"batch": a.batch, "seqlen_q": a.seqlen, "seqlen_k": a.seqlen, "heads_q": h,
            "heads_kv": h_kv, "hdim": a.hdim, "causal": a.causal, "dtype": "bf16"}
    steps = modes(a.impl, a.batch, a.seqlen, a.hdim, h, h_kv, a.causal)
    for mode in a.modes:
        kernels = benchlib.kernel_profile(steps[mode], STEPS)
        step_us = benchlib.event_seconds(steps[mode], warmup=3, reps=STEPS) * 1e6
        parts = [("step", None, step_us), ("kernels", None, sum(kernels.values()))]
        parts += [("kernel", name, us) for name, us in kernels.items()]
        for part, name, us in parts:
            case = {**base, "mode": mode, "part": part, **({"kernel": name} if name else {})}
            result["rows"].append({"case": case, "metric": "us", a.impl: us})
        benchlib.print_kernel_profile(
            f"{a.impl} b{a.batch} s{a.seqlen} h{h}/{h_kv} d{a.hdim} "
            f"{'causal' if a.causal else 'full'} {mode}, step {step_us:.0f} µs", kernels)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
