#!/usr/bin/env python3
"""FP8 quantization benchmark: GB/s of hfa.quantize_fp8 for each granularity, with and without
the Hadamard rotation, beside torch's device copy (x.clone()) in the same run.

Issue 12's shapes: (batch 4, seqlen 8192, heads 16, d) bf16 with d 128, 64 and 256, blocks of
128 rows, and the same at seqlen 32768 (4x the bytes: what stays of a fixed cost per call, a
launch, a grid's ramp and tail, shows as the difference between the two). GB/s counts the bytes
a pass must move: x read once, the codes and scales written (per-tensor and per-head
quantization read x twice, which the number does not count: it is the rate a one-pass kernel
would need to match). The copy's bytes are x read and written. triton.testing.do_bench medians.
Writes <out>/<date>-quantize-fp8.{json,md}.

    python3 bench/bench_quantize_fp8.py [--out DIR] [--hdims 128 64 256] [--seqlens 8192 32768]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchlib  # noqa: E402  (one copy of the house helpers; puts python/ on the path)

GRANULARITIES = ["tensor", "head", "block"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(benchlib.REPO, "bench", "results"))
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seqlens", type=int, nargs="+", default=[8192, 32768])
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--hdims", type=int, nargs="+", default=[128, 64, 256])
    p.add_argument("--block", type=int, default=128)
    p.add_argument("--warmup", type=float, default=25)
    p.add_argument("--rep", type=float, default=100)
    return p.parse_args(argv)


def gbps(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


def measure_hdim(torch, hfa, do_bench, a, seqlen, d):
    """One row per (granularity, hadamard) and the copy's rate, for head dim d."""
    x = torch.randn(a.batch, seqlen, a.heads, d, device="cuda", dtype=torch.bfloat16)
    copy = gbps(2 * x.numel() * x.element_size(),
                do_bench(lambda: x.clone(), warmup=a.warmup, rep=a.rep))
    signs = hfa.hadamard_signs(d, seed=0, device="cuda")
    rows = []
    for granularity in GRANULARITIES:
        for hadamard in (False, True):
            def call():
                return hfa.quantize_fp8(x, granularity, block=a.block,
                                        signs=signs if hadamard else None)
            codes, scales = call()
            moved = x.numel() * x.element_size() + codes.numel() + scales.numel() * 4
            ms = do_bench(call, warmup=a.warmup, rep=a.rep)
            rows.append({"case": {"batch": a.batch, "seqlen": seqlen, "heads": a.heads,
                                  "hdim": d, "dtype": "bf16", "granularity": granularity,
                                  "block": a.block if granularity == "block" else None,
                                  "hadamard": hadamard},
                         "metric": "GBps", "hfa": gbps(moved, ms), "torch_copy": copy})
            print(f"bench: seqlen {seqlen:5d} d {d:3d} {granularity:6s} "
                  f"hadamard {int(hadamard)}: "
                  f"hfa {rows[-1]['hfa']:7.1f} GB/s, copy {copy:7.1f} GB/s", flush=True)
    del x
    torch.cuda.empty_cache()
    return rows


def main(argv=None):
    a = parse_args(argv)
    import torch
    from triton.testing import do_bench

    import hfa
    now = benchlib.utc_now()
    a.dtype, a.tokens, a.head_budget = "bf16", [a.batch * n for n in a.seqlens], 0
    result = benchlib.new_result("quantize-fp8", now, a,
                                 accuracy="not checked here (python/tests/test_quantize_fp8.py)",
                                 batch=a.batch, seqlens=a.seqlens, heads=a.heads, block=a.block)
    benchlib.announce(result)
    t0 = time.time()
    for seqlen in a.seqlens:
        for d in a.hdims:
            result["rows"] += measure_hdim(torch, hfa, do_bench, a, seqlen, d)
    head = ["seqlen", "hdim", "granularity", "hadamard", "hfa GB/s", "copy GB/s", "hfa / copy"]
    body = [[str(r["case"]["seqlen"]), str(r["case"]["hdim"]), r["case"]["granularity"],
             str(r["case"]["hadamard"]),
             benchlib.fmt(r["hfa"]), benchlib.fmt(r["torch_copy"]),
             benchlib.ratio(r["hfa"], r["torch_copy"])] for r in result["rows"]]
    md = benchlib.markdown("FP8 quantization (GB/s)", result, head, body)
    stem = os.path.join(a.out, f"{now:%Y-%m-%d}-quantize-fp8")
    return benchlib.conclude(result, benchlib.write_results(stem, result, md), t0, 0, False)


if __name__ == "__main__":
    sys.exit(main())
