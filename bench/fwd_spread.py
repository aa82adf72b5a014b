#!/usr/bin/env python3
"""How much one forward cell's speed moves, within a process and between processes (issue 13).

The grid (bench_fwd.py) times each cell once, hfa then cuDNN. Between grids the same hfa cell
has read 623-726 TFLOP/s (hdim 128, 16k, non-causal) while cuDNN's stayed within 594-622. This
benchmark times the cells it is given --rounds times, alternating hfa and cuDNN on the same
inputs, each time with do_bench (median) and the SM clock and power while it ran
(benchlib.timed_ms), so that a slow round can be told from a slow clock. (The run of
docs/decisions/030 read the clock once right after each timing; the sampling during it came
after.) With --fresh every
round draws new inputs at new addresses (a spacer of a random size is allocated before them),
so that a speed that depends on where the tensors lie shows as spread between rounds. Run it
twice to see the spread between processes. Writes <out>/<date>-fwd-spread-<tag>.{json,md}.

JSON (design §5): {"what": "fwd-spread", ..., "rows": [{"case": {"hdim", "causal", "seqlen_q",
"seqlen_k", "batch", "heads", "dtype", "round"}, "metric": "tflops", "hfa": x, "cudnn": y,
"gpu": {"hfa": {"sm_mhz", "watts"}, "cudnn": {...}}}]}

    HFA_LIBRARY=.device/libhfa.so PYTHONPATH=python python3 bench/fwd_spread.py --out DIR
        [--cells 128:0:16384 128:0:2048] [--rounds 6] [--tag NAME]
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--cells", nargs="+", default=["128:0:2048", "128:0:8192", "128:0:16384"],
                   help="HDIM:CAUSAL:SEQLEN, 16k tokens and 2048/hdim heads as in the grid")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--warmup", type=float, default=25, help="do_bench warmup, ms")
    p.add_argument("--rep", type=float, default=100, help="do_bench repetitions, ms")
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--head-budget", type=int, default=2048)
    p.add_argument("--fresh", action="store_true", help="new inputs at new addresses each round")
    p.add_argument("--tag", default="bf16")
    return p.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import hfa

    now, t0 = benchlib.utc_now(), time.time()
    a.dtype = "bf16"
    result = benchlib.new_result("fwd-spread", now, a, "none (timing only; bench_fwd.py checks)",
                                 rounds=a.rounds)
    benchlib.announce(result)
    gen = torch.Generator(device="cuda").manual_seed(0)
    spacers = []
    for cell in a.cells:
        hdim, causal, seqlen = (int(x) for x in cell.split(":"))
        causal = bool(causal)
        batch, heads = a.tokens // seqlen, a.head_budget // hdim
        shape = (batch, seqlen, heads, hdim)
        inputs = {}

        def draw():
            if a.fresh:
                spacers.append(torch.empty(int(torch.randint(1, 64, (1,))) << 20,
                                           dtype=torch.uint8, device="cuda"))
            inputs["bshd"] = [torch.randn(shape, dtype=torch.bfloat16, device="cuda",
                                          generator=gen) for _ in range(3)]
            inputs["bhsd"] = [x.transpose(1, 2).contiguous() for x in inputs["bshd"]]

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(*inputs["bhsd"], is_causal=causal)
        fns = {"hfa": lambda: hfa.flash_attn_func(*inputs["bshd"], causal=causal),
               "cudnn": cudnn}
        f = benchlib.flops(batch, heads, seqlen, seqlen, hdim, hdim, causal)
        case = {"hdim": hdim, "causal": causal, "seqlen_q": seqlen, "seqlen_k": seqlen,
                "batch": batch, "heads": heads, "dtype": "bf16"}
        series = {"hfa": [], "cudnn": []}
        draw()
        for r in range(a.rounds):
            if a.fresh and r > 0:
                draw()
            row = {"case": {**case, "round": r}, "metric": "tflops", "gpu": {}}
            for impl, fn in fns.items():
                t, row["gpu"][impl] = benchlib.timed_ms(fn, a)
                row[impl] = round(f / (t * 1e-3) / 1e12, 2)
                series[impl].append(row[impl])
            result["rows"].append(row)
            gpu = row["gpu"]
            print(f"hdim {hdim} causal {int(causal)} seqlen {seqlen} round {r}: hfa {row['hfa']}"
                  f" ({gpu['hfa']['sm_mhz']} MHz, {gpu['hfa']['watts']} W)  cudnn {row['cudnn']}"
                  f" ({gpu['cudnn']['sm_mhz']} MHz, {gpu['cudnn']['watts']} W)", flush=True)
        for impl, xs in series.items():
            print(f"  {impl}: min {min(xs):.1f} median {statistics.median(xs):.1f} "
                  f"max {max(xs):.1f} (spread {max(xs) / min(xs) - 1:.1%})", flush=True)
        inputs.clear()
        spacers.clear()
        torch.cuda.empty_cache()
    head = ["hdim", "causal", "seqlen", "round", "hfa TFLOP/s", "cudnn TFLOP/s", "hfa/cudnn",
            "MHz hfa/cudnn"]
    body = [[str(r["case"][k]) for k in ("hdim", "causal", "seqlen_q", "round")] +
            [benchlib.fmt(r["hfa"]), benchlib.fmt(r["cudnn"]), benchlib.ratio(r["hfa"], r["cudnn"]),
             benchlib.clocks(r, ["hfa", "cudnn"])] for r in result["rows"]]
    md = benchlib.markdown("Forward: one cell timed again and again", result, head, body)
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.join(a.out, f"{now:%Y-%m-%d}-fwd-spread-{a.tag}")
    written = benchlib.write_results(stem, result, md)
    return benchlib.conclude(result, written, t0, 0, False)


if __name__ == "__main__":
    sys.exit(main())
