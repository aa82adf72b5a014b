#!/usr/bin/env python3
"""Where an MLA decode call's time goes (issue 34): one case of bench_mla.py, hfa and FlashMLA on
the same inputs, each call's kernels under torch.profiler (CUPTI's start and end of every
kernel). Per implementation: each kernel's mean duration and the mean gap before it (from the
end of the call's kernel before it), and the call's span, its first kernel's start to its last
kernel's end. Before each call the L2 is flushed and the GPU spins for --cover-us, as
bench_mla.py's timing does, so that the host has launched the whole call before it starts: the
gaps are the GPU's, not the host's.

    HFA_FLASHMLA_DIR=path/to/flashmla python3 bench/profile_mla.py --batch 64 --seqlen 1024 \\
        --heads 128 --seqlen-q 2 [--kind fixed] [--calls 20] [--json FILE]
"""

import argparse
import json
import os
import statistics
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_mla  # noqa: E402
import benchlib  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seqlen", type=int, default=1024, help="keys per sequence (mean if ragged)")
    p.add_argument("--kind", choices=bench_mla.KINDS, default="fixed")
    p.add_argument("--heads", type=int, default=128)
    p.add_argument("--seqlen-q", type=int, default=1)
    p.add_argument("--impls", nargs="+", choices=bench_mla.IMPLS, default=bench_mla.IMPLS)
    p.add_argument("--calls", type=int, default=20, help="profiled calls of each implementation")
    p.add_argument("--schedule", choices=["kept", "per-call"], default="kept",
                   help="as bench_mla.py's: per-call gives hfa's calls no holder")
    p.add_argument("--cover-us", type=float, default=200.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the summary here")
    return p.parse_args(argv)


def profiled_calls(step, calls, cover_us, trace_path):
    """[[(kernel name, start µs, end µs), ...] per call]: each call's kernels in stream order,
    from the profile's Chrome trace (its "kernel" and "gpu_memset" events)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    before_call = benchlib.flush_and_cover(cover_us)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            before_call()
            step()
        before_call()  # the last call's end: a flush (its spin is not read)
        torch.cuda.synchronize()
    prof.export_chrome_trace(trace_path)
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    os.remove(trace_path)
    kernels = sorted(((e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"]))
                      for e in events if e.get("cat") in ("kernel", "gpu_memset")),
                     key=lambda k: k[1])
    # The GPU ran flush, spin, the call's kernels, flush, spin, ...: a call is what runs between
    # a spin (torch.cuda._sleep's spin_kernel) and the flush that ends it (a fill kernel or a
    # memset, the last before the next spin).
    spins = [i for i, k in enumerate(kernels) if "spin_kernel" in k[0]]
    ends = spins[1:] + [len(kernels)]
    return [kernels[a + 1:b - 1] for a, b in zip(spins, ends) if b - a > 2]


def summary(calls):
    """Each kernel position's name, mean µs and mean gap before it; the mean span."""
    if not calls:
        return {"error": "no call found in the profile (no spin_kernel before it)"}
    shapes = {tuple(name for name, _, _ in c) for c in calls}
    if len(shapes) != 1:
        return {"error": f"calls differ in their kernels: {sorted(shapes)}"}
    kernels = []
    for i, name in enumerate(calls[0]):
        durations = [c[i][2] - c[i][1] for c in calls]
        gaps = [c[i][1] - c[i - 1][2] for c in calls] if i else [0.0]
        kernels.append({"kernel": name[0][:120], "us": round(statistics.mean(durations), 2),
                        "gap_before_us": round(statistics.mean(gaps), 2)})
    spans = [c[-1][2] - c[0][1] for c in calls]
    return {"span_us": round(statistics.mean(spans), 2),
            "span_median_us": round(statistics.median(spans), 2), "kernels": kernels}


def main(argv=None):
    import torch
    args = parse_args(argv)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    lens = bench_mla.seqlens_of(args.batch, args.seqlen, args.kind, args.seqlen_q, args.seed)
    cache_inputs = bench_mla.make_cache(lens, "cuda", gen)
    q = torch.randn((args.batch, args.seqlen_q, args.heads, bench_mla.D_QK),
                    dtype=torch.bfloat16, device="cuda", generator=gen)
    run = SimpleNamespace(impls=args.impls, device="cuda", schedule=args.schedule)
    flash_mla, why = (bench_mla.flashmla_module() if "flashmla" in args.impls else (None, None))
    if "flashmla" in args.impls and flash_mla is None:
        print(f"profile_mla: flashmla: {why}", flush=True)
    result = {"case": {"batch": args.batch, "seqlen_k": args.seqlen, "kind": args.kind,
                       "heads": args.heads, "seqlen_q": args.seqlen_q},
              "commit": benchlib.git_commit(), "device": torch.cuda.get_device_name(),
              "calls": args.calls, "cover_us": args.cover_us}
    for impl, make in bench_mla.calls(run, (q, *cache_inputs), flash_mla, None).items():
        step = make()
        step()  # fills the holder outside the profile
        trace = f"{args.json or 'profile_mla'}.{impl}.trace.json"
        result[impl] = summary(profiled_calls(step, args.calls, args.cover_us, trace))
        print(impl, json.dumps(result[impl], indent=1), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
