#!/usr/bin/env python3
"""One forward call of hfa, FlashAttention-3 or SDPA's cuDNN backend between
cudaProfilerStart/Stop, for `ncu --profile-from-start off` on a shape of bench_fwd_shapes.py:
bf16, BATCH sequences of SEQLEN tokens, HEADS / KV_HEADS heads of HDIM, after three warm-up
calls. hfa_fp8 and fa3_fp8: the FP8 forwards on the same inputs as e4m3 codes with per-tensor
descales. FA3 is imported from the folder HFA_FA3_DIR names.

    ncu --profile-from-start off --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section MemoryWorkloadAnalysis \\
        python3 bench/profile_fwd_shape.py {hfa,hfa_fp8,fa3,fa3_fp8,cudnn} \\
            BATCH SEQLEN HEADS KV_HEADS HDIM [causal]
"""

import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import hfa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402


IMPLS = ("hfa", "hfa_fp8", "fa3", "fa3_fp8", "cudnn")


def main(impl, b, s, h, h_kv, d, causal):
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s, h_kv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    if impl.endswith("fp8"):
        descales = [(x.float().abs().amax() / 448).reshape(1, 1).expand(b, x.shape[2])
                    for x in (q, k, v)]
        q, k, v = ((x.float() / scale[0, 0]).to(torch.float8_e4m3fn)
                   for x, scale in zip((q, k, v), descales))

    if impl.startswith("fa3"):
        fa3, why = benchlib.fa3_interface()
        if fa3 is None:
            sys.exit(why)
        # FA3 takes its descales per (batch, kv head), contiguous; the values are per tensor.
        names = ("q_descale", "k_descale", "v_descale")
        fp8 = ({n: x[:, :h_kv].contiguous() for n, x in zip(names, descales)}
               if impl == "fa3_fp8" else {})
        return benchlib.profile_once(lambda: benchlib.fa3_forward(fa3, q, k, v, causal, **fp8))

    def call():
        if impl == "hfa_fp8":
            return hfa.flash_attn_func(q, k, v, causal=causal, q_descale=descales[0],
                                       k_descale=descales[1], v_descale=descales[2])
        if impl == "hfa":
            return hfa.flash_attn_func(q, k, v, causal=causal)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)),
                                                  is_causal=causal, enable_gqa=h != h_kv)

    benchlib.profile_once(call)


if __name__ == "__main__":
    if len(sys.argv) not in (7, 8) or sys.argv[1] not in IMPLS:
        sys.exit(__doc__)
    main(sys.argv[1], *map(int, sys.argv[2:7]), len(sys.argv) == 8 and sys.argv[7] == "causal")
