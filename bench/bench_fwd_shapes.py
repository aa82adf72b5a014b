#!/usr/bin/env python3
"""Forward on batched short sequences (issue 13): hfa vs PyTorch SDPA (cuDNN and FLASH =
FlashAttention-2), kernel time by CUDA-graph replay, on one GPU.

bench_fwd.py's method (docs/design.md §5, §6), at shapes where a call lasts tens of microseconds and
launch cost and tile waste decide: one process, the same inputs for every implementation, hfa
on (batch, seqlen, heads, hdim) tensors, SDPA on contiguous (batch, heads, seqlen, hdim) copies
made before timing (enable_gqa when heads_q != heads_kv; a backend that refuses it gets K/V
expanded to heads_q, said in the row's "notes"). Each shape is timed two ways, a row each:
  - "graph" (the headline): --graph-calls (20) calls captured in one CUDA graph
    (bench_overhead.py's capture: a warm-up on a side stream, then torch.cuda.graph), replayed;
    the median over --graph-reps replays timed with CUDA events, divided by the calls. GPU time
    of back-to-back calls with no host in between; inputs stay warm in L2 across the calls.
  - "do_bench": triton.testing.do_bench's median through Python, as bench_fwd.py times: the
    host's cost per call shows where it exceeds the kernel's (and do_bench clears L2 first).
Each timing runs twice, the implementations in the order of --impls and then in reverse
(benchlib.in_both_orders: the power limit moves the clock with what ran before); a row's value
is the mean of the two.
Accuracy on every shape (design §6, as bench_fwd.py): max error of hfa and of cuDNN against
float64 attention on sampled rows and heads of the first and last sequence, on the GPU; hfa
passes when max|hfa − ref| ≤ 2·max|cudnn − ref| + 1e-5, its LSE is within 1e-3 and its output
and LSE are finite everywhere (they start as NaN).

Shapes (--list-shapes prints their names; --shapes takes names, fnmatch patterns such as
'*-s512-*' or '*-noncausal', or new names of the same form, e.g. b2-s777-h8-kv2-d128-causal):
  named: 64×128 tokens 16/4 heads d128, 32×256 32/8 d128, 16×384 32/8 d128, 8×512 32/8 d128,
         32×512 16/16 d128, 32×512 32/32 d64 (all causal), 3×1000 12/4 d64 non-causal
  grid:  design §5's short cells: --tokens (16k) in total, heads = --head-budget (2048) / hdim,
         hdim 64 / 128 / 256, seqlen 512 and 1024, causal and not (two of them are named
         shapes above and run once)

JSON (design §5): {"what": "fwd-shapes", ..., "rows": [{"case": {"batch", "seqlen_q",
"seqlen_k", "heads_q", "heads_kv", "hdim", "causal", "dtype", "timing": "graph" | "do_bench"},
"metric": "us", "hfa": x, "cudnn": y, "fa2": z, "shape": name, "flops": f, "gpu": {impl:
{"sm_mhz", "watts"}}, "rounds": {impl: [x1, x2]}, "gpu_rounds": {impl: [state1, state2]},
"round_order": [impl, ...]}]}: microseconds per call (the mean of the two rounds), null where
an implementation cannot run (the reason in "skipped"); "flops" is design §5's count (TFLOP/s =
flops / us / 1e6); "gpu" the mean SM clock and power while each was timed (benchlib.GpuState),
"gpu_rounds" each round's. The markdown has one line per shape:
graph µs of each implementation, hfa÷cudnn and hfa÷fa2 (speed ratios, the peer's time over
hfa's: above 1, hfa is faster, bench_fwd.py's hfa/cudnn of TFLOP/s), the do_bench µs, hfa's
TFLOP/s and accuracy.

Variants of libhfa.so (bench/build_variants.sh): the package loads one library per process
(ctypes, HFA_LIBRARY), so one run times one library; run once per build, each with its --tag.
With the default --impls each run measures cuDNN beside it, and its hfa÷cudnn is a same-run
ratio (compare those across runs, not µs); --impls hfa times hfa alone (cuDNN still runs once
per shape as the accuracy peer). The do_bench rows depend on the ops path (settings.torch_ops:
"native" needs libhfa_torch.so beside that libhfa.so; "ctypes" costs ~90 µs of host a call);
the graph rows do not.

Writes <out>/<date>-fwd-shapes-<tag>.{json,md}. HFA_COMMIT names the commit the library was
built from (benchlib.git_commit).

    HFA_LIBRARY=.device/libhfa.so PYTHONPATH=python python3 bench/bench_fwd_shapes.py --out DIR
        [--shapes '*-d64-*'] [--dtype fp16] [--impls hfa] [--tag NAME]
"""

import argparse
import fnmatch
import json
import os
import re
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_fwd import max_errors, sample  # noqa: E402
from bench_overhead import in_graph  # noqa: E402
from benchlib import (GpuState, announce, conclude, event_seconds, first_line,  # noqa: E402
                      flops, fmt, forward_verdict, in_both_orders, markdown, nan_filled_empty,
                      new_result, put_rounds, ratio, record_cell, sci, skip_reason, timed_ms,
                      under, utc_now, verdict, write_results)

IMPLS = ["hfa", "cudnn", "fa2"]  # column order
TIMINGS = ["graph", "do_bench"]  # row order; "graph" is the headline
# (batch, seqlen, heads_q, heads_kv, hdim, causal): issue 13's shapes, before the grid's.
NAMED = [(64, 128, 16, 4, 128, True), (32, 256, 32, 8, 128, True), (16, 384, 32, 8, 128, True),
         (8, 512, 32, 8, 128, True), (32, 512, 16, 16, 128, True), (32, 512, 32, 32, 64, True),
         (3, 1000, 12, 4, 64, False)]
GRID_HDIMS = [64, 128, 256]
GRID_SEQLENS = [512, 1024]
NAME = re.compile(r"b(\d+)-s(\d+)-h(\d+)-kv(\d+)-d(\d+)-(causal|noncausal)")


# --- shapes (no torch) -------------------------------------------------------------------------

def shape_name(batch, seqlen, heads_q, heads_kv, hdim, causal):
    return (f"b{batch}-s{seqlen}-h{heads_q}-kv{heads_kv}-d{hdim}-"
            + ("causal" if causal else "noncausal"))


def parse_shape(name):
    """The shape tuple of a name of shape_name's form, or None."""
    m = NAME.fullmatch(name)
    if not m:
        return None
    return tuple(int(x) for x in m.groups()[:5]) + (m.group(6) == "causal",)


def all_shapes(tokens, head_budget):
    """name -> shape: the named ones, then the grid's short cells not among them."""
    shapes = {shape_name(*s): s for s in NAMED}
    for hdim in GRID_HDIMS:
        for causal in (False, True):
            for seqlen in GRID_SEQLENS:
                s = (tokens // seqlen, seqlen, head_budget // hdim, head_budget // hdim, hdim,
                     causal)
                shapes.setdefault(shape_name(*s), s)
    return shapes


def select_shapes(parser, patterns, known):
    """The shapes --shapes names, in the known order, then new names in the order given."""
    if not patterns:
        return dict(known)
    picked, extra = set(), {}
    for pat in patterns:
        hits = [n for n in known if fnmatch.fnmatchcase(n, pat)]
        if hits:
            picked.update(hits)
        elif parse_shape(pat):
            extra[pat] = parse_shape(pat)
        else:
            parser.error(f"--shapes: {pat!r} matches no shape and is not a name of the form "
                         f"b64-s128-h16-kv4-d128-causal; known: {', '.join(known)}")
    shapes = {n: s for n, s in known.items() if n in picked}
    shapes.update(extra)
    for name, (batch, seqlen, hq, hkv, hdim, _) in shapes.items():
        if min(batch, seqlen, hq, hkv, hdim) < 1 or hq % hkv:
            parser.error(f"--shapes: {name}: sizes must be positive and heads_kv must divide "
                         "heads_q")
    return shapes


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--out", help="directory for the .json and .md (required unless "
                                 "--list-shapes)")
    p.add_argument("--shapes", nargs="+", default=None, metavar="NAME",
                   help="names, fnmatch patterns or new names (default: all; see --list-shapes)")
    p.add_argument("--list-shapes", action="store_true", help="print the shapes and exit")
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--impls", nargs="+", choices=IMPLS, default=IMPLS)
    p.add_argument("--timings", nargs="+", choices=TIMINGS, default=TIMINGS)
    p.add_argument("--tag", default=None, help="file name tag (default: the dtype)")
    p.add_argument("--tokens", type=int, default=16384,
                   help="the grid cells' batch × seqlen")
    p.add_argument("--head-budget", type=int, default=2048,
                   help="the grid cells' heads × hdim")
    p.add_argument("--graph-calls", type=int, default=20, help="calls captured in one graph")
    p.add_argument("--graph-warmup", type=int, default=10, help="graph replays before timing")
    p.add_argument("--graph-reps", type=int, default=50, help="graph replays timed (median)")
    p.add_argument("--warmup", type=float, default=25, help="do_bench warmup, ms")
    p.add_argument("--rep", type=float, default=100, help="do_bench repetitions, ms")
    p.add_argument("--acc-rows", type=int, default=256, help="query rows per sampled head")
    p.add_argument("--acc-heads", type=int, default=2, help="heads sampled for accuracy")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if any shape errs (other than not-implemented) or fails accuracy")
    a = p.parse_args(argv)
    if a.out is None and not a.list_shapes:
        p.error("--out is required")
    for d in GRID_HDIMS:
        if a.head_budget % d:
            p.error(f"--head-budget: {a.head_budget} is not a multiple of hdim {d}")
    for s in GRID_SEQLENS:
        if a.tokens % s:
            p.error(f"--tokens: {a.tokens} is not a multiple of seqlen {s}")
    if min(a.graph_calls, a.graph_reps) < 1 or a.graph_warmup < 0:
        p.error("--graph-calls and --graph-reps must be positive, --graph-warmup not negative")
    a.tag = a.tag or a.dtype
    a.impls = [i for i in IMPLS if i in a.impls]
    a.timings = [t for t in TIMINGS if t in a.timings]
    a.shapes = select_shapes(p, a.shapes, all_shapes(a.tokens, a.head_budget))
    return a


def shape_case(shape, dtype):
    """A row's case without its "timing" (the key the two rows of a shape differ in)."""
    batch, seqlen, heads_q, heads_kv, hdim, causal = shape
    return {"batch": batch, "seqlen_q": seqlen, "seqlen_k": seqlen, "heads_q": heads_q,
            "heads_kv": heads_kv, "hdim": hdim, "causal": causal, "dtype": dtype}


def shape_key(case):
    return json.dumps({k: v for k, v in case.items() if k != "timing"}, sort_keys=True)


# --- one shape ---------------------------------------------------------------------------------

def graph_us(args, fn):
    """Microseconds per call: args.graph_calls calls of fn in one CUDA graph, the median replay
    (CUDA events) divided by the calls. Runs under the caller's SDPA backend context."""
    import torch

    def calls():
        for _ in range(args.graph_calls):
            fn()

    replay = in_graph(torch, calls)
    seconds = event_seconds(replay, args.graph_warmup, args.graph_reps)
    del replay  # the graph and its memory pool
    return seconds / args.graph_calls * 1e6


def us_timing(args, timing, backend, fn, impl, failed):
    """A timing for benchlib.in_both_orders: (µs per call of fn, GPU state) by `timing` ("graph"
    or "do_bench") under the SDPA backend `backend`. A RuntimeError (e.g. a capture the backend
    does not allow) gives (None, None), its first line kept in failed[impl]."""
    def measure():
        try:
            with under(backend):
                if timing == "graph":
                    with GpuState() as state:
                        us = graph_us(args, fn)
                    return us, state.as_dict()
                ms, state = timed_ms(fn, args)
                return 1e3 * ms, state
        except RuntimeError as e:
            failed.setdefault(impl, first_line(e))
            return None, None
    return measure


def run_shape(args, name, case, dtype, gen, cpu_gen):
    """(rows, accuracy entry, skipped entries) of one shape (benchlib.record_cell's run)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend

    import hfa

    batch, seqlen, causal = case["batch"], case["seqlen_q"], case["causal"]
    hq, hkv, hdim = case["heads_q"], case["heads_kv"], case["hdim"]
    group = hq // hkv
    q = torch.randn((batch, seqlen, hq, hdim), dtype=dtype, device="cuda", generator=gen)
    k, v = (torch.randn((batch, seqlen, hkv, hdim), dtype=dtype, device="cuda", generator=gen)
            for _ in range(2))
    # Contiguous BHSD copies for SDPA, made before any timing.
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    backends = {"hfa": None, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "fa2": SDPBackend.FLASH_ATTENTION}

    def sdpa(kk, vv, gqa):
        return lambda: F.scaled_dot_product_attention(qt, kk, vv, is_causal=causal,
                                                      enable_gqa=gqa)

    fns = {"hfa": lambda: hfa.flash_attn_func(q, k, v, causal=causal),
           "cudnn": sdpa(kt, vt, group > 1), "fa2": sdpa(kt, vt, group > 1)}

    # First calls: they decide which implementations can run this shape, and give the outputs
    # the accuracy check reads (BSHD). cuDNN's output is the accuracy peer (§6): computed even
    # when it is not being timed.
    outs, notes, row_notes = {}, {}, {}
    hfa_lse = None
    expanded = None
    for impl in args.impls + [i for i in ("cudnn",) if i not in args.impls]:
        try:
            with under(backends[impl]):
                if impl == "hfa":
                    with nan_filled_empty():
                        outs[impl], hfa_lse = hfa.flash_attn_func(q, k, v, causal=causal,
                                                                  return_attn_probs=True)
                else:
                    try:
                        outs[impl] = fns[impl]().transpose(1, 2)
                    except RuntimeError:
                        if group == 1:
                            raise
                        # bench_decode.py's fallback: a backend without GQA gets K/V expanded.
                        if expanded is None:
                            expanded = tuple(x.repeat_interleave(group, dim=1).contiguous()
                                             for x in (kt, vt))
                        fns[impl] = sdpa(*expanded, False)
                        outs[impl] = fns[impl]().transpose(1, 2)
                        row_notes[impl] = (f"enable_gqa refused: K/V expanded to {hq} heads "
                                           "(the expansion is not timed)")
            torch.cuda.synchronize()
        except RuntimeError as e:  # NotImplementedError included: it is a RuntimeError
            notes[impl] = skip_reason(e)

    # Accuracy (§6) on a sample of rows and heads against float64 on the GPU.
    acc = {"case": case}
    rows, hs = sample(seqlen, hq, args.acc_rows, args.acc_heads, cpu_gen)
    rows_dev = rows.to("cuda")
    errs, lse_err = max_errors(q, k, v, outs, hfa_lse, batch, hs, rows_dev, causal, group)
    forward_verdict(acc, errs, lse_err, outs.get("hfa"), hfa_lse)
    del outs, hfa_lse

    # Timing: a row per timing, microseconds per call of each implementation that ran.
    f = flops(batch, hq, seqlen, seqlen, hdim, hdim, causal)
    skipped = [{"case": case, "impl": impl, "reason": r} for impl, r in notes.items()]
    out_rows = []
    for timing in args.timings:
        row = {"case": {**case, "timing": timing}, "metric": "us", **dict.fromkeys(args.impls)}
        failed = {}  # impl -> why its timing raised
        timings = {impl: us_timing(args, timing, backends[impl], fns[impl], impl, failed)
                   for impl in args.impls if impl not in notes}
        put_rounds(row, in_both_orders(timings), lambda us: round(us, 2))
        skipped += [{"case": row["case"], "impl": impl, "reason": f"error: {timing}: {why}"}
                    for impl, why in failed.items()]
        row["shape"], row["flops"] = name, f
        if row_notes:
            row["notes"] = dict(row_notes)
        out_rows.append(row)
    return out_rows, acc, skipped


# --- outputs -----------------------------------------------------------------------------------

def tflops_of(row, impl):
    us = row.get(impl) if row else None
    return row["flops"] / us / 1e6 if us else None


def shapes_markdown(result, impls, timings):
    """One line per shape: graph µs, speed ratios, do_bench µs, hfa TFLOP/s, accuracy."""
    by_shape = {}
    for r in result["rows"]:
        by_shape.setdefault(shape_key(r["case"]), {})[r["case"].get("timing")] = r
    acc_of = {shape_key(a["case"]): a for a in result["accuracy"]}
    peers = [i for i in impls if i != "hfa"] if "hfa" in impls else []
    head = ["shape", "batch×seqlen", "heads q/kv", "hdim", "causal"]
    for t in timings:
        head += [f"{i} µs ({t})" for i in impls] + [f"hfa÷{p} ({t})" for p in peers]
    if "hfa" in impls:
        head += [f"hfa TFLOP/s ({timings[0]})"]
    head += ["hfa err", "cudnn err", "accuracy"]
    body = []
    for key, rows in by_shape.items():
        c = json.loads(key)
        any_row = next(iter(rows.values()))
        cells = [any_row.get("shape", "–"), f"{c['batch']}×{c['seqlen_q']}",
                 f"{c['heads_q']}/{c['heads_kv']}", str(c["hdim"]), "T" if c["causal"] else "F"]
        for t in timings:
            r = rows.get(t, {})
            cells += [fmt(r.get(i)) for i in impls]
            cells += [ratio(r.get(p), r.get("hfa")) for p in peers]  # peer µs / hfa µs
        if "hfa" in impls:
            cells.append(fmt(tflops_of(rows.get(timings[0]), "hfa")))
        a = acc_of.get(key, {})
        cells += [sci(a.get("hfa_max_err")), sci(a.get("cudnn_max_err")), verdict(a)]
        body.append(cells)
    # benchlib.markdown's "Not run" names a cell by hdim, causal and seqlen only, which does
    # not tell these shapes apart: the list is written here with every key.
    md = markdown("Forward on short sequences: hfa vs PyTorch SDPA", {**result, "skipped": []},
                  head, body)
    md += ("\nhfa÷peer = the peer's µs / hfa's µs (above 1: hfa is faster). graph: "
           f"{result['settings']['graph']}. do_bench: {result['settings']['do_bench']}, "
           "through Python.\n")
    if result["skipped"]:
        md += "\nNot run:\n\n" + "".join(
            f"- {s['impl']} at " + ", ".join(f"{k} {v}" for k, v in s["case"].items())
            + f": {s['reason']}\n" for s in result["skipped"])
    notes = {(r["shape"], i): n for r in result["rows"] for i, n in r.get("notes", {}).items()}
    if notes:
        md += "\nNotes:\n\n" + "".join(f"- {i} at {s}: {n}\n" for (s, i), n in notes.items())
    return md


def main(argv=None):
    args = parse_args(argv)
    if args.list_shapes:
        for name in args.shapes:
            print(name)
        return 0
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench: needs a CUDA GPU")
    from hfa import _lib, _torch
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    warnings.filterwarnings("ignore", message=".*(kernel not used|Flash attention|cuDNN).*")
    os.makedirs(args.out, exist_ok=True)
    now = utc_now()
    library = _lib.library_path()  # loads it: the copy in use
    result = new_result(
        "fwd-shapes", now, args,
        f"{args.acc_rows} rows x {args.acc_heads} heads x first/last batch vs float64; pass: "
        "hfa err <= 2*cudnn err + 1e-5, lse err <= 1e-3, output finite",
        graph=(f"{args.graph_calls} calls in one CUDA graph, median of {args.graph_reps} "
               f"replays (CUDA events, after {args.graph_warmup}) / {args.graph_calls}"),
        timings=args.timings, shapes=list(args.shapes), torch_ops=_torch.OPS,
        library=library and os.path.relpath(os.path.realpath(library)))  # no machine paths
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    cpu_gen = torch.Generator()
    cpu_gen.manual_seed(0)
    announce(result)
    print(f"bench: {result['settings']['library']} (ops {_torch.OPS}), "
          f"{len(args.shapes)} shapes", flush=True)
    t0 = time.time()
    bad = 0
    for name, shape in args.shapes.items():
        case = shape_case(shape, args.dtype)
        print(f"bench: {name}", flush=True)
        first = len(result["rows"])
        bad += record_cell(result, lambda: run_shape(args, name, case, dtype, gen, cpu_gen),
                           case, args.impls, t0, variants=[{"timing": t} for t in args.timings])
        for r in result["rows"][first:]:  # record_cell's rows of a failed cell say "tflops"
            r["metric"] = "us"
            r.setdefault("shape", name)
            r.setdefault("flops", flops(shape[0], shape[2], shape[1], shape[1], shape[4],
                                        shape[4], shape[5]))

    stem = os.path.join(args.out, f"{now.strftime('%Y-%m-%d')}-fwd-shapes-{args.tag}")
    written = write_results(stem, result, shapes_markdown(result, args.impls, args.timings))
    return conclude(result, written, t0, bad, args.strict)


if __name__ == "__main__":
    sys.exit(main())
