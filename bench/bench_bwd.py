#!/usr/bin/env python3
"""Backward benchmark: hfa vs PyTorch SDPA (cuDNN and FLASH = FlashAttention-2) and
FlashAttention-3 on one GPU.

docs/design.md §5, as bench_fwd.py: one process, the same inputs for every implementation,
triton.testing.do_bench medians, the FA3-paper grid (16k tokens in total, heads = 2048 / hdim).
Two modes per cell:
  bwd     the backward alone. SDPA: the forward runs once on inputs that require grad, and
          torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) is timed; hfa:
          hfa.flash_attn_backward on its own forward's out and lse; FA3: its backward op
          (_flash_attn_backward) on its own forward's out and lse, into dq, dk, dv allocated
          once before timing.
  fwdbwd  forward + backward through autograd, for every implementation (FA3: flash_attn_func).
FLOPs: the forward's 4·b·h·s_q·s_k·d (halved for causal) times 2.5 (bwd) or 3.5 (fwdbwd), h the
query heads. Gradients come from torch.autograd.grad, never .backward(): nothing accumulates
across calls. Each cell times its implementations twice, in the order of --impls and then in
reverse (benchlib.in_both_orders: the power limit moves the clock with what ran before); a
row's value is the mean of the two, "rounds" and "gpu_rounds" keep each round's.

Implementations: hfa (deterministic=False), hfa_det (deterministic=True), cudnn and fa2 (SDPA
on contiguous BHSD copies made before timing: the transpose-free variant; hfa takes BSHD), fa3
and fa3_det (FlashAttention-3, BSHD, deterministic False / True). FA3 is the folder HFA_FA3_DIR
names (benchlib.fa3_interface); fa3 and fa3_det are in the default --impls only where that is
set. Asked for without it, or where it does not import, they are null with the reason once for
the run; a cell FA3 was not built for (fp16, say) is null with its own error.

--gqa runs GQA_SHAPES instead of the grid: grouped- and multi-query attention, q and dout
(batch, seqlen, heads, hdim), k and v (batch, seqlen, heads_kv, hdim), the rows' case with
"heads" (query heads) and "heads_kv"; --hdims and --causal select among them. SDPA gets
enable_gqa=True (an SDPA backend that refuses it is null with the reason). No plot.

Design §6 on every cell: dq, dk, dv of every implementation against float64 gradients
computed on the GPU for every query row of a few KV heads of the last sequence and every query
head that reads them (query head h reads KV head h // (heads / heads_kv); dk and dv sum over
those query heads and need all rows; blocks of rows keep the float64 matrices small at 16k).
hfa passes when, for each of dq, dk, dv, max|hfa − ref| ≤ 2·max|cudnn − ref| + 1e-5, and all
its gradients are finite (they start as NaN). The peer is the first of cuDNN, FA2 and FA3 that
ran. hfa_det must give the same bytes twice.

Writes <out>/<date>-bwd-<tag>.{json,md,png} (--gqa: <date>-bwd-gqa-<tag>.{json,md}). Cells an
implementation cannot run (hfa's NotImplementedError, SDPA's "no kernel") are recorded as null
with the reason.

    python3 bench/bench_bwd.py --out DIR [--hdims 128 --seqlens 4096 --causal true --modes bwd]
    HFA_FA3_DIR=path/to/fa3 python3 bench/bench_bwd.py --out DIR --gqa --modes bwd
"""

import contextlib
import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (accuracy_of, announce, case_cells, check_grid_args,  # noqa: E402
                      conclude, do_bench_timing, fa3_for_run, fa3_forward, flops, fmt, grid,
                      grid_parser, in_both_orders, markdown, nan_filled_empty, new_result,
                      put_rounds, ratio, record_cell, skip_reason, under, utc_now, verdict,
                      worst, write_plot, write_results)

IMPLS = ["hfa", "hfa_det", "cudnn", "fa2", "fa3", "fa3_det"]  # column order
MODES = ["bwd", "fwdbwd"]
FLOP_FACTOR = {"bwd": 2.5, "fwdbwd": 3.5}  # times the forward's FLOPs (design §5)
GRADS = ("dq", "dk", "dv")
PEERS = ("cudnn", "fa2", "fa3")  # the accuracy peer: the first of these that ran
# Speed ratios of the table (bwd_markdown shows FA3's where they are among --impls).
RATIOS = [("hfa", "cudnn"), ("hfa", "fa2"), ("hfa_det", "hfa"), ("hfa", "fa3"),
          ("hfa_det", "fa3_det")]
# --gqa: (batch, seqlen, heads, heads_kv, hdim, causal), issue 32's shapes first. One backward
# of each is at most tens of ms, so the list takes a few minutes with every implementation.
GQA_SHAPES = [
    (1, 16384, 8, 1, 128, True), (1, 16384, 8, 1, 128, False), (1, 32768, 8, 1, 128, True),
    (1, 8192, 32, 8, 128, True), (1, 8192, 32, 8, 128, False),
    (2, 8192, 64, 8, 128, True), (2, 8192, 64, 8, 128, False),
    (2, 16384, 8, 2, 128, True), (2, 16384, 16, 4, 128, False),
    (1, 16384, 16, 1, 64, True), (1, 16384, 16, 1, 64, False), (1, 32768, 16, 2, 64, True),
    (2, 8192, 32, 4, 64, True), (2, 8192, 32, 8, 64, False),
]
# Peers' cells that kill the process instead of raising (a segfault is no exception to catch):
# recorded as skipped, never called. FA3's deterministic backward at hdim 256 segfaults on its
# first call (this build of FA3, H100, 2026-12-06; causal or not, 512-2048 keys).
CRASHES = {("fa3_det", 256): "error: segfaults (FA3's deterministic backward at hdim 256)"}
# Query rows per float64 block of the reference: 2048 × 16384 doubles = 256 MiB a matrix.
REF_BLOCK_ROWS = 2048


def parse_args(argv=None):
    p = grid_parser(__doc__, IMPLS)
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--modes", nargs="+", choices=MODES, default=MODES)
    p.add_argument("--acc-heads", type=int, default=2,
                   help="KV heads of the last sequence checked, all rows, with every query head "
                        "that reads them")
    p.add_argument("--acc-max-seqlen", type=int, default=None,
                   help="cells with more keys than this skip the float64 check, whose cost "
                        "grows with seqlen² × the heads checked (0: no cell is checked, for "
                        "the arms of an A/B whose library a checked run covers)")
    p.add_argument("--gqa", action="store_true",
                   help="the GQA/MQA shapes (GQA_SHAPES) instead of the grid; --hdims and "
                        "--causal select among them")
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


def fa3_setups(fa3, q, k, v, dout, causal, deterministic):
    """FlashAttention-3's setups per mode, on BSHD tensors (fa3: its flash_attn_interface). bwd:
    its backward op alone on its own forward's out and lse, into dq, dk, dv allocated once here,
    outside the timing (its autograd allocates them every call); fwdbwd: its flash_attn_func
    through autograd."""
    import torch
    scale = q.shape[-1] ** -0.5

    def bwd():
        out, lse = fa3_forward(fa3, q, k, v, causal)
        dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))

        def step():
            fa3._flash_attn_backward(dout, q, k, v, out, lse, dq=dq, dk=dk, dv=dv,
                                     softmax_scale=scale, is_causal=causal,
                                     deterministic=deterministic)
            return dq, dk, dv
        return step

    def fwdbwd():
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
        return lambda: torch.autograd.grad(
            fa3.flash_attn_func(*leaves, softmax_scale=scale, causal=causal,
                                deterministic=deterministic),
            leaves, dout)

    return {"bwd": bwd, "fwdbwd": fwdbwd}


def sdpa_setups(qt, kt, vt, dout_t, causal, gqa):
    """SDPA's setups per mode, on BHSD tensors; run them and their steps under the backend's
    sdpa_kernel (the backend is chosen when the forward runs). gqa: k and v have fewer heads
    than q (enable_gqa, torch >= 2.5)."""
    import torch
    import torch.nn.functional as F

    leaves = [x.detach().requires_grad_() for x in (qt, kt, vt)]
    options = {"enable_gqa": True} if gqa else {}

    def forward():
        return F.scaled_dot_product_attention(*leaves, is_causal=causal, **options)

    def bwd():
        out = forward()
        # retain_graph: the one forward's graph serves every repetition.
        return lambda: torch.autograd.grad(out, leaves, dout_t, retain_graph=True)

    def fwdbwd():
        return lambda: torch.autograd.grad(forward(), leaves, dout_t)

    return {"bwd": bwd, "fwdbwd": fwdbwd}


def sdpa_backend(impl):
    """The SDPA backend a peer runs on; None for hfa and FA3 (BSHD, no SDPA)."""
    from torch.nn.attention import SDPBackend
    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}.get(impl)


def nan_filled(impl):
    # hfa's outputs start as NaN, so that finite gradients mean every element was written.
    # Not for SDPA: the filling comes from torch's deterministic mode, which SDPA may also
    # read when it picks a kernel.
    return nan_filled_empty() if impl.startswith("hfa") else contextlib.nullcontext()


def probe(args, setups):
    """First calls: which (impl, mode) can run this cell, with their steps to time, and the
    bwd-mode gradients (BSHD) the accuracy check reads. Returns (steps, grads, notes).
    An implementation without setups (FA3 not loaded) is left out: fa3_for_run said why."""
    import torch
    wanted = [(i, m) for m in args.modes for i in args.impls]
    # The accuracy check reads the backward of every implementation whether or not that mode
    # is timed, and cuDNN's even when cuDNN is not being timed (§6).
    wanted += [(i, "bwd") for i in IMPLS if (i in args.impls or i == "cudnn")
               and (i, "bwd") not in wanted]
    steps, grads, notes = {}, {}, {}
    for impl, mode in wanted:
        if impl not in setups:
            continue
        try:
            with under(sdpa_backend(impl)), nan_filled(impl):
                step = setups[impl][mode]()
                got = step()
                torch.cuda.synchronize()
        except RuntimeError as e:  # NotImplementedError included: it is a RuntimeError
            notes[impl, mode] = skip_reason(e)
            continue
        steps[impl, mode] = step
        if mode == "bwd":  # SDPA's BHSD gradients viewed as BSHD, as hfa's and FA3's
            bhsd = sdpa_backend(impl) is not None
            grads[impl] = tuple(g.transpose(1, 2) if bhsd else g for g in got)
    return steps, grads, notes


def time_modes(args, case, steps):
    """One row per mode: TFLOP/s from the do_bench medians of each step that ran, timed in
    both orders (benchlib.in_both_orders; the row's value the mean of the two rounds)."""
    f = flops(case["batch"], case["heads"], case["seqlen_q"], case["seqlen_k"], case["hdim"],
              case["hdim"], case["causal"])
    rows = []
    for mode in args.modes:
        row = {"case": {**case, "mode": mode}, "metric": "tflops", **dict.fromkeys(args.impls)}
        timings = {impl: do_bench_timing(args, sdpa_backend(impl), steps[impl, mode])
                   for impl in args.impls if (impl, mode) in steps}
        factor = FLOP_FACTOR[mode] * f
        put_rounds(row, in_both_orders(timings), lambda ms: round(factor / (ms * 1e-3) / 1e12, 2))
        rows.append(row)
    return rows


# --- accuracy ---------------------------------------------------------------------------------

def reference_grads(q, k, v, dout, b, h, causal, group=1):
    """float64 (dq, dk, dv) of (batch b, query head h), every row, on the GPU; BSHD inputs,
    s_q = s_k (so the bottom-right causal mask is the usual one). Query head h reads KV head
    h // group; dk and dv are this query head's share of that KV head's gradients (GQA: the
    sum over the group is the gradient). Blocks of query rows: dq per block, dk and dv summed
    over the blocks."""
    import torch
    qh, doh = (x[b, :, h].double() for x in (q, dout))  # (s, d)
    kh, vh = (x[b, :, h // group].double() for x in (k, v))
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


def note_errors(errs, grads, name, b, head, ref):
    """errs[impl][name] becomes the worst of itself and max |grad − ref| at (batch b, head
    `head`), for each implementation's gradient `name`."""
    i = GRADS.index(name)
    for impl, got in grads.items():
        e = (got[i][b, :, head].double() - ref).abs().max().item()
        errs[impl][name] = worst(errs[impl][name], e)


def grad_errors(grads, tensors, b, kv_heads, group, causal):
    """impl -> {grad name: max |grad − ref|} over the KV heads `kv_heads` of batch b: dq over
    every query head that reads them (group of each), dk and dv against the sum over those."""
    errs = {impl: dict.fromkeys(GRADS, 0.0) for impl in grads}
    for g in kv_heads:
        dk_ref = dv_ref = 0
        for h in range(g * group, (g + 1) * group):
            dq_ref, dk_part, dv_part = reference_grads(*tensors, b, h, causal, group)
            note_errors(errs, grads, "dq", b, h, dq_ref)
            dk_ref, dv_ref = dk_ref + dk_part, dv_ref + dv_part
        note_errors(errs, grads, "dk", b, g, dk_ref)
        note_errors(errs, grads, "dv", b, g, dv_ref)
    return errs


def bitwise_equal(xs, ys):
    import torch
    return all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(xs, ys))


def check_accuracy(case, grads, det_again, tensors, kv_heads):
    """The cell's accuracy entry (§6). det_again: hfa_det's gradients of a second call;
    kv_heads: the KV heads checked, with every query head that reads them."""
    import torch
    b = case["batch"] - 1  # the last sequence: its offsets are the furthest from the start
    group = case["heads"] // case.get("heads_kv", case["heads"])
    checked = {"batch": b, "heads": kv_heads, "rows": "all"}
    if group > 1:
        checked = {"batch": b, "kv_heads": kv_heads,
                   "heads": [h for g in kv_heads for h in range(g * group, (g + 1) * group)],
                   "rows": "all"}
    acc = {"case": case, "checked": checked, "pass": None}
    errs = grad_errors(grads, tensors, b, kv_heads, group, case["causal"])
    for impl, e in errs.items():
        for name in GRADS:
            acc[f"{impl}_{name}_max_err"] = e[name]
    peer = next((p for p in PEERS if p in errs), None)
    if peer is not None:
        acc["peer"] = peer
        bound = {name: 2 * errs[peer][name] + 1e-5 for name in GRADS}
        acc.update({f"bound_{name}": bound[name] for name in GRADS})
    elif "hfa" in grads or "hfa_det" in grads:
        acc["note"] = "none of cudnn, fa2, fa3 ran: no tolerance"
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


def gqa_case(args, batch, seqlen, heads, heads_kv, hdim, causal):
    return {"hdim": hdim, "causal": causal, "seqlen_q": seqlen, "seqlen_k": seqlen,
            "batch": batch, "heads": heads, "heads_kv": heads_kv, "dtype": args.dtype}


def cases(args):
    """The cases of this run, in order: the grid's, or with --gqa the GQA shapes that --hdims
    and --causal select."""
    if args.gqa:
        return [gqa_case(args, *shape) for shape in GQA_SHAPES
                if shape[4] in args.hdims and shape[5] in args.causals]
    return [cell_case(args, hdim, causal, seqlen) for hdim, causal, seqlen in grid(args)]


def run_cell(args, case, dtype, fa3, gen, cpu_gen):
    """(rows, accuracy entry, skipped entries) of one cell (benchlib.record_cell's run).
    fa3: FlashAttention-3's flash_attn_interface, None where it is not loaded."""
    import torch
    heads_kv = case.get("heads_kv", case["heads"])
    q_shape = (case["batch"], case["seqlen_q"], case["heads"], case["hdim"])
    kv_shape = q_shape[:2] + (heads_kv, case["hdim"])
    q, k, v, dout = (torch.randn(shape, dtype=dtype, device="cuda", generator=gen)
                     for shape in (q_shape, kv_shape, kv_shape, q_shape))
    # Contiguous BHSD copies for SDPA (the transpose-free variant), made before any timing.
    qt, kt, vt, dout_t = (x.transpose(1, 2).contiguous() for x in (q, k, v, dout))
    causal, gqa = case["causal"], heads_kv != case["heads"]
    setups = {"hfa": hfa_setups(q, k, v, dout, causal, False),
              "hfa_det": hfa_setups(q, k, v, dout, causal, True),
              "cudnn": sdpa_setups(qt, kt, vt, dout_t, causal, gqa),
              "fa2": sdpa_setups(qt, kt, vt, dout_t, causal, gqa)}
    if fa3 is not None:
        setups["fa3"] = fa3_setups(fa3, q, k, v, dout, causal, False)
        setups["fa3_det"] = fa3_setups(fa3, q, k, v, dout, causal, True)
    crashes = {impl: reason for (impl, hdim), reason in CRASHES.items()
               if hdim == case["hdim"] and setups.pop(impl, None) is not None}
    steps, grads, notes = probe(args, setups)
    notes.update({(impl, mode): reason for impl, reason in crashes.items() if impl in args.impls
                  for mode in args.modes})

    det_again = None
    if "hfa_det" in grads:
        det_again = steps["hfa_det", "bwd"]()
        torch.cuda.synchronize()
    kv_heads = torch.randperm(heads_kv, generator=cpu_gen)[:args.acc_heads].sort().values
    if args.acc_max_seqlen is not None and case["seqlen_k"] > args.acc_max_seqlen:
        acc = {"case": case, "pass": None,
               "note": f"not checked: seqlen_k > --acc-max-seqlen {args.acc_max_seqlen}"}
    else:
        acc = check_accuracy(case, grads, det_again, (q, k, v, dout), kv_heads.tolist())
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


def table_ratios(impls):
    """RATIOS as the table shows them: the first three always (as before FA3 joined), FA3's
    where its implementations are among `impls`."""
    return RATIOS[:3] + [(a, b) for a, b in RATIOS[3:] if a in impls and b in impls]


def bwd_markdown(result, impls, title):
    gqa = any("heads_kv" in r["case"] for r in result["rows"])
    ratios = table_ratios(impls)
    head = ["hdim", "causal", "seqlen", "batch×heads q/kv" if gqa else "batch×heads", "mode"]
    head += [f"{i} TFLOP/s" for i in impls]
    head += [f"{a}/{b}" for a, b in ratios]
    head += ["hfa err dq/dk/dv", "peer err dq/dk/dv"]
    head += ["fa3 err dq/dk/dv"] if "fa3" in impls else []
    head += ["det bitwise", "accuracy"]
    acc_of = accuracy_of(result)
    body = []
    for r in result["rows"]:
        a = acc_of(r["case"])
        cells = case_cells(r["case"]) + [r["case"]["mode"]] + [fmt(r.get(i)) for i in impls]
        cells += [ratio(r.get(x), r.get(y)) for x, y in ratios]
        cells += [grad_errs_cell(a, "hfa"), grad_errs_cell(a, a.get("peer"))]
        cells += [grad_errs_cell(a, "fa3")] if "fa3" in impls else []
        cells.append({True: "yes", False: "**NO**", None: "–"}[a.get("det_bitwise")])
        check = verdict(a) + (f" vs {a['peer']}" if a.get("peer") not in (None, "cudnn") else "")
        if a.get("hfa_det_pass") is False:
            check += "; hfa_det **FAIL**"
        cells.append(check)
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
    what = "bwd-gqa" if args.gqa else "bwd"
    result = new_result(
        what, now, args,
        f"dq, dk, dv of {args.acc_heads} KV heads (with every query head reading them) x all "
        "rows of the last sequence vs float64; pass: each err <= 2*peer err + 1e-5 (peer "
        "cudnn, else fa2, else fa3), gradients finite; hfa_det: the same bytes twice",
        modes=args.modes, flops="forward's 4*b*h*s_q*s_k*d (h: query heads; halved causal) x "
                                "2.5 bwd, x 3.5 fwdbwd",
        timing="each cell twice, --impls in order then reversed; value: mean of the two")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    cpu_gen = torch.Generator()
    cpu_gen.manual_seed(0)
    fa3 = fa3_for_run(result, args.impls)
    announce(result)
    t0 = time.time()
    bad = 0
    for case in cases(args):
        bad += record_cell(result, lambda: run_cell(args, case, dtype, fa3, gen, cpu_gen),
                           case, args.impls, t0, variants=[{"mode": m} for m in args.modes],
                           checks=("pass", "hfa_det_pass", "det_bitwise"),
                           own=("hfa", "hfa_det"))

    stem = os.path.join(args.out, f"{now.strftime('%Y-%m-%d')}-{what}-{args.tag}")
    panels = [{"causal": c, "mode": m} for m in args.modes for c in args.causals]
    plot = None if args.no_plot or args.gqa else (
        lambda path: write_plot(path, result, args.impls, args.hdims, panels, "backward"))
    title = ("Backward, GQA/MQA" if args.gqa else "Backward") + ": hfa vs PyTorch SDPA" + (
        " and FlashAttention-3" if fa3 is not None else "")
    written = write_results(stem, result, bwd_markdown(result, args.impls, title), plot)
    return conclude(result, written, t0, bad, args.strict)


if __name__ == "__main__":
    sys.exit(main())
