#!/usr/bin/env python3
"""LAB (session 35, with mla-trace.patch's library): where an MLA attention kernel's time goes,
CTA by CTA. One case of bench_mla.py (hfa alone, the holder kept), --calls calls each after an
L2 flush and a spin (profile_mla's protocol); the patched library appends each call's per-CTA
clocks to HFA_MLA_TRACE_FILE. Prints and writes (--json) per call-averaged: the launch ramp
(entry time after the first CTA's), the grid wait, per piece the Q load (start()), the tile loop
(per tile too), the epilogue (finish()) and the gap to the next piece, the tail (end before the
last CTA's), for the mean CTA and for the CTA that ends last.

    HFA_LIBRARY=.device/trace/libhfa.so PYTHONPATH=python python3 trace_mla.py --batch 64 \\
        --seqlen 1024 --heads 128 --seqlen-q 2 [--kind fixed] [--json F]
"""
import argparse
import json
import os
import statistics
import struct
import sys
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
import bench_mla  # noqa: E402
import benchlib  # noqa: E402


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    at, out = 0, []
    while at < len(data):
        magic, gx, gy, slots = struct.unpack_from("<4Q", data, at)
        assert magic == 0x4D4C4154, "not a trace record"
        at += 32
        n = gx * gy * slots
        values = struct.unpack_from(f"<{n}Q", data, at)
        at += 8 * n
        out.append([values[c * slots:(c + 1) * slots] for c in range(gx * gy)])
    return out


def analyse(call):
    ctas = []
    first_ns = min(c[0] for c in call)
    last_end_ns = max(c[7] for c in call)
    for c in call:
        entry_ns, smid, c0, c_wait, c_end, pieces, p_end, end_ns = c[:8]
        per_ns = (c_end - c0) / max(end_ns - entry_ns, 1)  # cycles a ns
        us = lambda cycles: cycles / per_ns / 1000.0  # noqa: E731
        row = {"ramp": (entry_ns - first_ns) / 1000.0, "wait": us(c_wait - c0),
               "tail": (last_end_ns - end_ns) / 1000.0, "total": us(c_end - c0), "pieces": pieces,
               "q": 0.0, "loop": 0.0, "finish": 0.0, "gaps": 0.0, "tiles": 0, "split": 0,
               "first_gap": 0.0, "end_after_last": 0.0, "ghz": per_ns}
        previous_end = c_wait
        for k in range(min(pieces, 8)):
            start, started, before, after, info, _ = c[8 + 6 * k:14 + 6 * k]
            gap = us(start - previous_end)
            if k == 0:
                row["first_gap"] = gap
            else:
                row["gaps"] += gap
            row["q"] += us(started - start)
            row["loop"] += us(before - started)
            row["finish"] += us(after - before)
            row["tiles"] += info & 0xFFFF
            row["split"] += ((info >> 16) & 0xFFFF) > 0
            previous_end = after
        row["end_after_last"] = us(c_end - previous_end)
        ctas.append(row)
    return ctas


def main():
    import torch
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--kind", choices=bench_mla.KINDS, default="fixed")
    p.add_argument("--heads", type=int, default=128)
    p.add_argument("--seqlen-q", type=int, default=2)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--cover-us", type=float, default=200.0)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    lens = bench_mla.seqlens_of(args.batch, args.seqlen, args.kind, args.seqlen_q, 0)
    cache_inputs = bench_mla.make_cache(lens, "cuda", gen)
    q = torch.randn((args.batch, args.seqlen_q, args.heads, bench_mla.D_QK), dtype=torch.bfloat16,
                    device="cuda", generator=gen)
    run = SimpleNamespace(impls=["hfa"], device="cuda", schedule="kept")
    step = bench_mla.calls(run, (q, *cache_inputs), None, None)["hfa"]()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    path = f"/tmp/mla-trace-{os.getpid()}.bin"
    os.environ["HFA_MLA_TRACE_FILE"] = path
    before_call = benchlib.flush_and_cover(args.cover_us)
    for _ in range(args.calls):
        before_call()
        step()
    torch.cuda.synchronize()
    del os.environ["HFA_MLA_TRACE_FILE"]
    calls = [analyse(c) for c in records(path)]
    os.remove(path)
    keys = ["ramp", "wait", "first_gap", "q", "loop", "finish", "gaps", "end_after_last", "tail",
            "total", "pieces", "tiles", "split", "ghz"]
    mean = {k: statistics.mean(statistics.mean(r[k] for r in c) for c in calls) for k in keys}
    last = {k: statistics.mean(max(c, key=lambda r: r["total"] + r["ramp"])[k] for c in calls)
            for k in keys}
    spread = {k: statistics.mean(max(r[k] for r in c) - min(r[k] for r in c) for c in calls)
              for k in ("total", "tiles", "pieces")}
    result = {"case": vars(args), "ctas": len(calls[0]), "mean_cta": mean, "last_cta": last,
              "spread": spread}
    print(json.dumps(result, indent=1, default=lambda x: round(x, 3)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
