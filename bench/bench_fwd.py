#!/usr/bin/env python3
"""Forward benchmark: hfa vs PyTorch SDPA (cuDNN and FLASH = FlashAttention-2) and
FlashAttention-3 on one GPU.

docs/design.md §5: one process, the same inputs for every implementation, triton.testing.do_bench
medians, the FA3-paper grid (16k tokens in total, heads = 2048 / hdim), FLOPs 4·b·h·s_q·s_k·d
(halved for causal). Design §6 on every cell: max error of hfa and of cuDNN against a float64
reference on a sample of rows and heads, computed on the GPU; hfa passes when
max|hfa − ref| ≤ 2·max|cudnn − ref| + 1e-5 and its output is finite everywhere.

SDPA takes (B, H, S, D). It is timed twice: on contiguous BHSD copies made before timing
("cudnn", "fa2": the transpose-free variant, the headline numbers) and on transposed views of
our BSHD tensors ("cudnn_bshd", "fa2_bshd"), which is what a BSHD model would hand it.
"fa3" is FlashAttention-3's forward op (BSHD, no autograd) from the folder HFA_FA3_DIR names
(benchlib.fa3_interface): in the default --impls only where that is set; asked for without it,
or where it does not import, null with the reason once for the run; a cell it was not built for
(fp16, other head dims) null with its own error. Its error joins the accuracy entry.

Each cell times its implementations twice, in the order of --impls and then in reverse
(benchlib.in_both_orders: the power limit moves the clock with what ran before); a row's value
is the mean of the two, "rounds" and "gpu_rounds" keep each round's.

Writes <out>/<date>-fwd-<tag>.{json,md,png}. Cells an implementation cannot run (hfa's
NotImplementedError, SDPA's "no kernel") are recorded as null with the reason.

    python3 bench/bench_fwd.py --out DIR [--hdims 128 --seqlens 4096 --causal true --dtype bf16]
"""

import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (accuracy_of, announce, case_cells, check_grid_args,  # noqa: E402
                      clocks, conclude, do_bench_timing, fa3_for_run, fa3_forward, flops, fmt,
                      forward_verdict, grid, grid_parser, in_both_orders, markdown,
                      nan_filled_empty, new_result, put_rounds, ratio, record_cell, sci,
                      skip_reason, under, utc_now, verdict, write_plot, write_results)

# Implementations in column order; the first three are the design's headline columns.
IMPLS = ["hfa", "cudnn", "fa2", "cudnn_bshd", "fa2_bshd", "fa3"]


def parse_args(argv=None):
    p = grid_parser(__doc__, IMPLS)
    p.add_argument("--hdim-v", type=int, default=None,
                   help="head dim of v and out (default: each hdim; DeepSeek: --hdims 192 --hdim-v 128)")
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--acc-rows", type=int, default=256, help="query rows per sampled head")
    p.add_argument("--acc-heads", type=int, default=2, help="heads sampled for accuracy")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if any cell errs (other than not-implemented) or fails accuracy")
    return check_grid_args(p, p.parse_args(argv))


# --- accuracy ----------------------------------------------------------------------------------

def sample(seqlen, heads, rows, nheads, gen):
    """Query rows (always the first and the last, the rest random) and heads to check."""
    import torch
    rows = min(rows, seqlen)
    picked = torch.randperm(seqlen, generator=gen)[:rows]
    picked[0], picked[-1] = 0, seqlen - 1
    heads_picked = torch.randperm(heads, generator=gen)[:min(nheads, heads)]
    return picked.sort().values, heads_picked


def reference_rows(q, k, v, b, h, rows, causal, group=1):
    """float64 attention of query rows `rows` of (batch b, head h), on the GPU: (out, lse).
    q, k, v are BSHD, query head h reads kv head h // group (GQA); causal is bottom-right
    aligned (s_q = s_k here, so the usual mask)."""
    import torch
    g = h // group
    qs = q[b, rows, h].double()                      # (n, d)
    ks, vs = k[b, :, g].double(), v[b, :, g].double()  # (s_k, d)
    s = qs @ ks.T / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > rows.to(q.device)[:, None] + (sk - sq), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.softmax(s, dim=-1) @ vs, lse


def max_errors(q, k, v, outs, hfa_lse, batch, heads, rows, causal, group=1):
    """Each output's max |out − float64| over `rows` of query heads `heads` of the first and last
    sequence, and hfa's LSE error there (0 without hfa_lse): ({impl: err}, lse_err)."""
    errs = {impl: 0.0 for impl in outs}
    lse_err = 0.0
    for b in sorted({0, batch - 1}):
        for h in heads.tolist():
            ref, ref_lse = reference_rows(q, k, v, b, h, rows, causal, group)
            for impl, o in outs.items():
                errs[impl] = max(errs[impl], (o[b, rows, h].double() - ref).abs().max().item())
            if hfa_lse is not None:
                got = hfa_lse[b, h, rows].double()
                lse_err = max(lse_err, (got - ref_lse).abs().max().item())
    return errs, lse_err


# --- one cell ----------------------------------------------------------------------------------

def cell_case(args, hdim, causal, seqlen):
    batch, heads = args.tokens // seqlen, args.head_budget // hdim
    case = {"hdim": hdim, "causal": causal, "seqlen_q": seqlen, "seqlen_k": seqlen,
            "batch": batch, "heads": heads, "dtype": args.dtype}
    if args.hdim_v and args.hdim_v != hdim:
        case["hdim_v"] = args.hdim_v
    return case


def run_cell(args, case, dtype, fa3, gen, cpu_gen):
    """([row], accuracy entry, skipped entries) of one cell (benchlib.record_cell's run).
    fa3: FlashAttention-3's flash_attn_interface, None where it is not loaded."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend

    import hfa

    hdim, causal, seqlen = case["hdim"], case["causal"], case["seqlen_q"]
    batch, heads = case["batch"], case["heads"]
    hdim_v = case.get("hdim_v", hdim)
    shape = (batch, seqlen, heads, hdim)
    q, k = (torch.randn(shape, dtype=dtype, device="cuda", generator=gen) for _ in range(2))
    v = torch.randn(shape[:-1] + (hdim_v,), dtype=dtype, device="cuda", generator=gen)
    # Contiguous BHSD copies for the transpose-free SDPA runs, made before any timing.
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    qv, kv, vv = (x.transpose(1, 2) for x in (q, k, v))

    def sdpa(backend, a, b_, c):
        def fn():
            return F.scaled_dot_product_attention(a, b_, c, is_causal=causal)
        return backend, fn

    fns = {
        "hfa": (None, lambda: hfa.flash_attn_func(q, k, v, causal=causal)),
        "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION, qt, kt, vt),
        "fa2": sdpa(SDPBackend.FLASH_ATTENTION, qt, kt, vt),
        "cudnn_bshd": sdpa(SDPBackend.CUDNN_ATTENTION, qv, kv, vv),
        "fa2_bshd": sdpa(SDPBackend.FLASH_ATTENTION, qv, kv, vv),
        "fa3": (None, fa3 and (lambda: fa3_forward(fa3, q, k, v, causal)[0])),
    }

    # First calls: they decide which implementations can run this cell, and give the outputs
    # the accuracy check reads (BSHD for hfa and FA3, BHSD for SDPA).
    outs, notes = {}, {}
    hfa_lse = None
    # cuDNN's output is the accuracy peer (§6): computed even when it is not being timed.
    for impl in args.impls + [i for i in ("cudnn",) if i not in args.impls]:
        backend, fn = fns[impl]
        if fn is None:  # FA3 not loaded: fa3_for_run recorded why, once for the run
            notes[impl] = None
            continue
        try:
            with under(backend):
                if impl == "hfa":
                    with nan_filled_empty():
                        outs[impl], hfa_lse = hfa.flash_attn_func(q, k, v, causal=causal,
                                                                  return_attn_probs=True)
                else:
                    out = fn()
                    outs[impl] = out if backend is None else out.transpose(1, 2)
            torch.cuda.synchronize()
        except RuntimeError as e:  # NotImplementedError included: it is a RuntimeError
            notes[impl] = skip_reason(e)

    # Accuracy (§6) on a sample of rows and heads against float64 on the GPU.
    acc = {"case": case}
    rows, hs = sample(seqlen, heads, args.acc_rows, args.acc_heads, cpu_gen)
    rows_dev = rows.to("cuda")
    errs, lse_err = max_errors(q, k, v, outs, hfa_lse, batch, hs, rows_dev, causal)
    forward_verdict(acc, errs, lse_err, outs.get("hfa"), hfa_lse)
    del outs, hfa_lse

    # Timing: median of do_bench, per implementation that ran, in both orders.
    row = {"case": case, "metric": "tflops", **dict.fromkeys(args.impls)}
    f = flops(batch, heads, seqlen, seqlen, hdim, hdim_v, causal)
    timings = {impl: do_bench_timing(args, *fns[impl]) for impl in args.impls
               if impl not in notes}
    put_rounds(row, in_both_orders(timings), lambda ms: round(f / (ms * 1e-3) / 1e12, 2))
    skipped = [{"case": case, "impl": impl, "reason": r} for impl, r in notes.items() if r]
    return [row], acc, skipped


# --- outputs -----------------------------------------------------------------------------------

def fwd_markdown(result, impls, title):
    peers = ["cudnn", "fa2"] + [i for i in ("fa3",) if i in impls]  # hfa/peer columns
    errs = ["hfa", "cudnn"] + [i for i in ("fa3",) if i in impls]  # error columns
    head = ["hdim", "causal", "seqlen", "batch×heads"] + [f"{i} TFLOP/s" for i in impls]
    head += [f"hfa/{p}" for p in peers] + ["MHz " + "/".join(impls)]
    head += [f"{i} err" for i in errs] + ["accuracy"]
    acc_of = accuracy_of(result)
    body = []
    for r in result["rows"]:
        a = acc_of(r["case"])
        cells = case_cells(r["case"]) + [fmt(r.get(i)) for i in impls]
        cells += [ratio(r.get("hfa"), r.get(p)) for p in peers] + [clocks(r, impls)]
        cells += [sci(a.get(f"{i}_max_err")) for i in errs] + [verdict(a)]
        body.append(cells)
    return markdown(title, result, head, body)


def main(argv=None):
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench: needs a CUDA GPU")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    warnings.filterwarnings("ignore", message=".*(kernel not used|Flash attention|cuDNN).*")
    os.makedirs(args.out, exist_ok=True)
    now = utc_now()
    result = new_result("fwd", now, args,
                        f"{args.acc_rows} rows x {args.acc_heads} heads x first/last "
                        "batch vs float64; pass: hfa err <= 2*cudnn err + 1e-5, "
                        "lse err <= 1e-3, output finite",
                        timing="each cell twice, --impls in order then reversed; value: mean "
                               "of the two")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    cpu_gen = torch.Generator()
    cpu_gen.manual_seed(0)
    fa3 = fa3_for_run(result, args.impls)
    announce(result)
    t0 = time.time()
    bad = 0
    for hdim, causal, seqlen in grid(args):
        case = cell_case(args, hdim, causal, seqlen)
        bad += record_cell(result, lambda: run_cell(args, case, dtype, fa3, gen, cpu_gen), case,
                           args.impls, t0)

    stem = os.path.join(args.out, f"{now.strftime('%Y-%m-%d')}-fwd-{args.tag}")
    plot = None if args.no_plot else (
        lambda path: write_plot(path, result, args.impls, args.hdims,
                                [{"causal": c} for c in args.causals], "forward"))
    title = "Forward: hfa vs PyTorch SDPA" + (" and FlashAttention-3" if fa3 is not None else "")
    written = write_results(stem, result, fwd_markdown(result, args.impls, title), plot)
    return conclude(result, written, t0, bad, args.strict)


if __name__ == "__main__":
    sys.exit(main())
