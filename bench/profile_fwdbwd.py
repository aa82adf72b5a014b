#!/usr/bin/env python3
"""Where a forward + backward step's time goes, beside the forward and the backward timed alone
(issue 10's fwdbwd cells, bench/results): torch.profiler's CUDA kernel times per kernel name
and each mode's CUDA-event time per step, on one shape.

    python3 bench/profile_fwdbwd.py {hfa,hfa_det,cudnn} BATCH SEQLEN HDIM [causal] [--json FILE]

bf16, 2048 / HDIM heads, BSHD for hfa and BHSD for cuDNN (as bench_bwd.py). A mode's "kernels"
is the sum of its kernels' profiled time per step and "step" its event time per step: step −
kernels is the GPU's idle time between them.
"""

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


def modes(impl, b, s, d, causal):
    """The three steps: fwd, bwd (of one untimed forward), fwdbwd."""
    h = 2048 // d
    shape = (b, s, h, d) if impl.startswith("hfa") else (b, h, s, d)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)

    def forward():
        if impl.startswith("hfa"):
            return hfa.flash_attn_func(q, k, v, causal=causal, deterministic=impl == "hfa_det")
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    out = forward()
    return {"fwd": forward,
            "bwd": lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
            "fwdbwd": lambda: torch.autograd.grad(forward(), (q, k, v), dout)}


def main(argv):
    json_path = None
    if "--json" in argv:
        at = argv.index("--json")
        json_path, argv = argv[at + 1], argv[:at] + argv[at + 2:]
    impl, b, s, d = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    causal = len(argv) > 4 and argv[4] == "causal"
    result = {"impl": impl, "batch": b, "seqlen": s, "hdim": d, "causal": causal,
              "commit": benchlib.git_commit(), "device": torch.cuda.get_device_name(),
              "modes": {}}
    for mode, step in modes(impl, b, s, d, causal).items():
        kernels = benchlib.kernel_profile(step, STEPS)
        step_us = benchlib.event_seconds(step, warmup=3, reps=STEPS) * 1e6
        result["modes"][mode] = {"step_us": step_us, "kernels_us": sum(kernels.values()),
                                 "per_kernel_us": kernels}
        benchlib.print_kernel_profile(f"{impl} b{b} s{s} d{d} {'causal' if causal else 'full'} "
                                      f"{mode}, step {step_us:.0f} µs", kernels)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
