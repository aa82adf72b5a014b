#!/usr/bin/env python3
"""Backward benchmark: hfa vs PyTorch SDPA (cuDNN and FLASH = FlashAttention-2) on one GPU.

Design §5, as bench_fwd.py: one process, the same inputs for every implementation,
triton.testing.do_bench medians, the FA3-paper grid (16k tokens in total, heads = 2048 / hdim).
Two modes per cell:
  bwd     the backward alone. SDPA: the forward runs once on inputs that require grad, and
          torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) is timed; hfa:
          hfa.flash_attn_backward on its own forward's out and lse.
  fwdbwd  forward + backward through autograd, for every implementation.
FLOPs: the forward's 4·b·h·s_q·s_k·d (halved for causal) times 2.5 (bwd) or 3.5 (fwdbwd).
Gradients come from torch.autograd.grad, never .backward(): nothing accumulates across calls.

Implementations: hfa (deterministic=False), hfa_det (deterministic=True), cudnn and fa2 (SDPA
on contiguous BHSD copies made before timing: the transpose-free variant; hfa takes BSHD).

Design §6 on every cell: dq, dk, dv of hfa, hfa_det and cuDNN against float64 gradients
computed on the GPU for every query row of a few heads of the last sequence (dk and dv need
all rows; blocks of rows keep the float64 matrices small at 16k). hfa passes when, for each of
dq, dk, dv, max|hfa − ref| ≤ 2·max|cudnn − ref| + 1e-5, and all its gradients are finite (they
start as NaN). FA2 is the peer where cuDNN did not run. hfa_det must give the same bytes twice.

Writes <out>/<date>-bwd-<tag>.{json,md,png}. Cells an implementation cannot run (hfa's
NotImplementedError, SDPA's "no kernel") are recorded as null with the reason.

    python3 bench/bench_bwd.py --out DIR [--hdims 128 --seqlens 4096 --causal true --modes bwd]
"""

import contextlib
import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (accuracy_of, announce, case_cells, check_grid_args,  # noqa: E402
                      conclude, flops, fmt, grid, grid_parser, markdown, nan_filled_empty,
                      new_result, ratio, record_cell, skip_reason, timed_ms, under, utc_now,
                      verdict, worst, write_plot, write_results)

IMPLS = ["hfa", "hfa_det", "cudnn", "fa2"]  # column order
MODES = ["bwd", "fwdbwd"]
FLOP_FACTOR = {"bwd": 2.5, "fwdbwd": 3.5}  # times the forward's FLOPs (design §5)
GRADS = ("dq", "dk", "dv")
PEERS = ("cudnn", "fa2")  # the accuracy peer: the first of these that ran
# Query rows per float64 block of the reference: 2048 × 16384 doubles = 256 MiB a matrix.
REF_BLOCK_ROWS = 2048


def parse_args(argv=None):
    p = grid_parser(__doc__, IMPLS)
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--modes", nargs="+", choices=MODES, default=MODES)
    p.add_argument("--acc-heads", type=int, default=2,
                   help="heads of the last sequence checked, all rows")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if any cell errs (other than not-implemented), fails accuracy "
                        "or is not deterministic with hfa_det")
    return check_grid_args(p, p.parse_args(argv))


# --- what is timed ----------------------------------------------------------------------------
# A setup runs what must not be timed (the forward, for "bwd") and returns the step to time.

def hfa_setups(q, k, v, dout, causal, deterministic):
    """hfa's setups per mode, on BSHD tensors."""
    import torch

    import hfa

    def bwd():
        out, lse = hfa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
        return lambda: hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=causal,
                                               deterministic=deterministic)

    def fwdbwd():
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
        return lambda: torch.autograd.grad(
            hfa.flash_attn_func(*leaves, causal=causal, deterministic=deterministic),
            leaves, dout)

    return {"bwd": bwd, "fwdbwd": fwdbwd}


def sdpa_setups(qt, kt, vt, dout_t, causal):
    """SDPA's setups per mode, on BHSD tensors; run them and their steps under the backend's
    sdpa_kernel (the backend is chosen when the forward runs)."""
    import torch
    import torch.nn.functional as F

    leaves = [x.detach().requires_grad_() for x in (qt, kt, vt)]

    def forward():
        return F.scaled_dot_product_attention(*leaves, is_causal=causal)

    def bwd():
        out = forward()
        # retain_graph: the one forward's graph serves every repetition.
        return lambda: torch.autograd.grad(out, leaves, dout_t, retain_graph=True)

    def fwdbwd():
        return lambda: torch.autograd.grad(forward(), leaves, dout_t)

    return {"bwd": bwd, "fwdbwd": fwdbwd}


def sdpa_backend(impl):
    """The SDPA backend a peer runs on; None for hfa."""
    from torch.nn.attention import SDPBackend
    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}.get(impl)


def nan_filled(impl):
    # hfa's outputs start as NaN, so that finite gradients mean every element was written.
    # Not for SDPA: the filling comes from torch's deterministic mode, which SDPA may also
    # read when it picks a kernel.
    return nan_filled_empty() if impl.startswith("hfa") else contextlib.nullcontext()


def probe(args, setups):
    """First calls: which (impl, mode) can run this cell, with their steps to time, and the
    bwd-mode gradients (BSHD) the accuracy check reads. Returns (steps, grads, notes)."""
    import torch
    wanted = [(i, m) for m in args.modes for i in args.impls]
    # The accuracy check reads the backward of hfa, hfa_det and the peers whether or not that
    # mode is timed, and cuDNN's even when cuDNN is not being timed (§6).
    wanted += [(i, "bwd") for i in IMPLS if (i in args.impls or i == "cudnn")
               and (i, "bwd") not in wanted]
    steps, grads, notes = {}, {}, {}
    for impl, mode in wanted:
        try:
            with under(sdpa_backend(impl)), nan_filled(impl):
                step = setups[impl][mode]()
                got = step()
                torch.cuda.synchronize()
        except RuntimeError as e:  # NotImplementedError included: it is a RuntimeError
            notes[impl, mode] = skip_reason(e)
            continue
        steps[impl, mode] = step
        if mode == "bwd":  # SDPA's BHSD gradients viewed as BSHD, as hfa's
            grads[impl] = tuple(g if impl.startswith("hfa") else g.transpose(1, 2) for g in got)
    return steps, grads, notes


def time_modes(args, case, steps):
    """One row per mode: TFLOP/s from the do_bench median of each step that ran."""
    f = flops(case["batch"], case["heads"], case["seqlen_q"], case["seqlen_k"], case["hdim"],
              case["hdim"], case["causal"])
    rows = []
    for mode in args.modes:
        row = {"case": {**case, "mode": mode}, "metric": "tflops", "gpu": {}}
        for impl in args.impls:
            step = steps.get((impl, mode))
            if step is None:
                row[impl] = None
                continue
            with under(sdpa_backend(impl)):
                t, row["gpu"][impl] = timed_ms(step, args)
            row[impl] = round(FLOP_FACTOR[mode] * f / (t * 1e-3) / 1e12, 2)
        rows.append(row)
    return rows


# --- accuracy ---------------------------------------------------------------------------------

def reference_grads(q, k, v, dout, b, h, causal):
    """float64 (dq, dk, dv) of (batch b, head h), every row, on the GPU; BSHD inputs, s_q = s_k
    (so the bottom-right causal mask is the usual one). Blocks of query rows: dq per block,
    dk and dv summed over the blocks."""
    import torch
    qh, kh, vh, doh = (x[b, :, h].double() for x in (q, k, v, dout))  # (s, d)
    seqlen, scale = qh.shape[0], 1 / math.sqrt(qh.shape[1])
    dq = torch.empty_like(qh)
    dk, dv = torch.zeros_like(kh), torch.zeros_like(vh)
    cols = torch.arange(seqlen, device=q.device)
    for r0 in range(0, seqlen, REF_BLOCK_ROWS):
        r = slice(r0, min(r0 + REF_BLOCK_ROWS, seqlen))
        s = qh[r] @ kh.T * scale
        if causal:
            s.masked_fill_(cols[None, :] > cols[r, None], float("-inf"))
        p = torch.softmax(s, dim=-1)
        dp = doh[r] @ vh.T
        delta = (doh[r] * (p @ vh)).sum(-1, keepdim=True)  # rowsum(dO ∘ O), O exact
        ds = p * (dp - delta)
        dq[r] = ds @ kh * scale
        dk += ds.T @ qh[r] * scale
        dv += p.T @ doh[r]
    return dq, dk, dv


def grad_errors(grads, tensors, b, heads, causal):
    """impl -> {grad name: max |grad − ref|} over the heads `heads` of batch b."""
    errs = {impl: dict.fromkeys(GRADS, 0.0) for impl in grads}
    for h in heads:
        ref = reference_grads(*tensors, b, h, causal)
        for impl, got in grads.items():
            for name, g, r in zip(GRADS, got, ref):
                e = (g[b, :, h].double() - r).abs().max().item()
                errs[impl][name] = worst(errs[impl][name], e)
    return errs


def bitwise_equal(xs, ys):
    import torch
    return all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(xs, ys))


def check_accuracy(case, grads, det_again, tensors, heads):
    """The cell's accuracy entry (§6). det_again: hfa_det's gradients of a second call."""
    import torch
    b = case["batch"] - 1  # the last sequence: its offsets are the furthest from the start
    acc = {"case": case, "checked": {"batch": b, "heads": heads, "rows": "all"}, "pass": None}
    errs = grad_errors(grads, tensors, b, heads, case["causal"])
    for impl, e in errs.items():
        for name in GRADS:
            acc[f"{impl}_{name}_max_err"] = e[name]
    peer = next((p for p in PEERS if p in errs), None)
    if peer is not None:
        acc["peer"] = peer
        bound = {name: 2 * errs[peer][name] + 1e-5 for name in GRADS}
        acc.update({f"bound_{name}": bound[name] for name in GRADS})
    elif "hfa" in grads or "hfa_det" in grads:
        acc["note"] = "neither cudnn nor fa2 ran: no tolerance"
    for impl in ("hfa", "hfa_det"):
        if impl not in grads:
            continue
        # The gradients started as NaN (nan_filled_empty): finite everywhere = all written.
        finite = all(bool(torch.isfinite(g).all().item()) for g in grads[impl])
        key = "pass" if impl == "hfa" else f"{impl}_pass"
        acc[f"{impl}_finite"] = finite
        if peer is not None:
            acc[key] = finite and all(errs[impl][n] <= bound[n] for n in GRADS)
    if det_again is not None:
        acc["det_bitwise"] = bitwise_equal(grads["hfa_det"], det_again)
    return acc


# --- one cell ---------------------------------------------------------------------------------

def cell_case(args, hdim, causal, seqlen):
    return {"hdim": hdim, "causal": causal, "seqlen_q": seqlen, "seqlen_k": seqlen,
            "batch": args.tokens // seqlen, "heads": args.head_budget // hdim,
            "dtype": args.dtype}


def run_cell(args, case, dtype, gen, cpu_gen):
    """(rows, accuracy entry, skipped entries) of one cell (benchlib.record_cell's run)."""
    import torch
    shape = (case["batch"], case["seqlen_q"], case["heads"], case["hdim"])
    q, k, v, dout = (torch.randn(shape, dtype=dtype, device="cuda", generator=gen)
                     for _ in range(4))
    # Contiguous BHSD copies for SDPA (the transpose-free variant), made before any timing.
    qt, kt, vt, dout_t = (x.transpose(1, 2).contiguous() for x in (q, k, v, dout))
    causal = case["causal"]
    setups = {"hfa": hfa_setups(q, k, v, dout, causal, False),
              "hfa_det": hfa_setups(q, k, v, dout, causal, True),
              "cudnn": sdpa_setups(qt, kt, vt, dout_t, causal),
              "fa2": sdpa_setups(qt, kt, vt, dout_t, causal)}
    steps, grads, notes = probe(args, setups)

    det_again = None
    if "hfa_det" in grads:
        det_again = steps["hfa_det", "bwd"]()
        torch.cuda.synchronize()
    heads = torch.randperm(case["heads"], generator=cpu_gen)[:args.acc_heads].sort().values
    acc = check_accuracy(case, grads, det_again, (q, k, v, dout), heads.tolist())
    del grads, det_again

    rows = time_modes(args, case, steps)
    skipped = [{"case": {**case, "mode": mode}, "impl": impl, "reason": reason}
               for (impl, mode), reason in notes.items()]
    return rows, acc, skipped


# --- outputs ----------------------------------------------------------------------------------

def grad_errs_cell(acc, impl):
    errs = [acc.get(f"{impl}_{name}_max_err") for name in GRADS] if impl else []
    if not errs or None in errs:
        return "–"
    return "/".join(f"{e:.1e}" for e in errs)


def bwd_markdown(result, impls):
    head = ["hdim", "causal", "seqlen", "batch×heads", "mode"]
    head += [f"{i} TFLOP/s" for i in impls]
    head += ["hfa/cudnn", "hfa/fa2", "hfa_det/hfa", "hfa err dq/dk/dv", "peer err dq/dk/dv",
             "det bitwise", "accuracy"]
    acc_of = accuracy_of(result)
    body = []
    for r in result["rows"]:
        a = acc_of(r["case"])
        cells = case_cells(r["case"]) + [r["case"]["mode"]] + [fmt(r.get(i)) for i in impls]
        cells += [ratio(r.get("hfa"), r.get("cudnn")), ratio(r.get("hfa"), r.get("fa2")),
                  ratio(r.get("hfa_det"), r.get("hfa"))]
        cells += [grad_errs_cell(a, "hfa"), grad_errs_cell(a, a.get("peer"))]
        cells.append({True: "yes", False: "**NO**", None: "–"}[a.get("det_bitwise")])
        check = verdict(a) + (f" vs {a['peer']}" if a.get("peer") not in (None, "cudnn") else "")
        if a.get("hfa_det_pass") is False:
            check += "; hfa_det **FAIL**"
        cells.append(check)
        body.append(cells)
    return markdown("Backward: hfa vs PyTorch SDPA", result, head, body)


def main(argv=None):
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench: needs a CUDA GPU")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    warnings.filterwarnings("ignore", message=".*(kernel not used|Flash attention|cuDNN).*")
    os.makedirs(args.out, exist_ok=True)
    now = utc_now()
    result = new_result(
        "bwd", now, args,
        f"dq, dk, dv of {args.acc_heads} heads x all rows of the last sequence vs float64; "
        "pass: each err <= 2*peer err + 1e-5 (peer cudnn, else fa2), gradients finite; "
        "hfa_det: the same bytes twice",
        modes=args.modes, flops="forward's 4*b*h*s_q*s_k*d (halved causal) x 2.5 bwd, "
                                "x 3.5 fwdbwd")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    cpu_gen = torch.Generator()
    cpu_gen.manual_seed(0)
    announce(result)
    t0 = time.time()
    bad = 0
    for hdim, causal, seqlen in grid(args):
        case = cell_case(args, hdim, causal, seqlen)
        bad += record_cell(result, lambda: run_cell(args, case, dtype, gen, cpu_gen), case,
                           args.impls, t0, variants=[{"mode": m} for m in args.modes],
                           checks=("pass", "hfa_det_pass", "det_bitwise"),
                           own=("hfa", "hfa_det"))

    stem = os.path.join(args.out, f"{now.strftime('%Y-%m-%d')}-bwd-{args.tag}")
    panels = [{"causal": c, "mode": m} for m in args.modes for c in args.causals]
    plot = None if args.no_plot else (
        lambda path: write_plot(path, result, args.impls, args.hdims, panels, "backward"))
    written = write_results(stem, result, bwd_markdown(result, args.impls), plot)
    return conclude(result, written, t0, bad, args.strict)


if __name__ == "__main__":
    sys.exit(main())
