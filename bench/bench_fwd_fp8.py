#!/usr/bin/env python3
"""FP8 forward benchmark (issue 12): hfa on e4m3 q, k, v against its own bf16 forward, cuDNN
(bf16) and FlashAttention-3's FP8 forward, on one GPU.

bench_fwd.py's grid and method (design §5): 16k tokens, heads = 2048 / hdim, do_bench medians,
FLOPs 4·b·h·s_q·s_k·d (halved for causal). Inputs are N(0, 1) bf16, quantized per tensor to
torch.float8_e4m3fn (scale = amax / 448); the descales go in FlashAttention-3's shape
(batch, heads_kv) float32, a stride-0 expansion of the one scale. Rows: "hfa" (FP8, bf16
output), "hfa_bf16" (hfa's bf16 forward on the unquantized inputs), "cudnn" (PyTorch SDPA's
cuDNN backend on bf16: SDPA has no FP8 path on this GPU, so it is context, not a peer) and "fa3"
(FlashAttention-3's forward op on the FP8 inputs and descales, from the folder HFA_FA3_DIR names,
benchlib.fa3_interface: in the default --impls only where that is set; asked for without it, or
where it does not import, null with the reason once for the run). Each cell times its
implementations twice, in the order of --impls and then in reverse (benchlib.in_both_orders:
the power limit moves the clock with what ran before); a row's value is the mean of the two,
"rounds" and "gpu_rounds" keep each round's.

Accuracy on every cell (design §6, sampled rows and heads as in bench_fwd.py): max error against
float64 attention of the dequantized inputs (the kernel's own error) and against float64
attention of the unquantized bf16 inputs (what quantization costs on top). hfa passes when its
output and LSE are finite everywhere and its error against the dequantized reference is
<= 0.05 (P is rounded to e4m3 before P·V).

--granularity-costs adds two measurements at hdim 128: the FP8 forward at seqlen 8192,
non-causal, with per-tensor, per-(batch, head) and per-block (128 rows) descales, relative to
per-tensor; and the FP8 forward at seqlen_q 128 and 1024 against seqlen_k 16k beside the bytes
of v, where the transpose of v into the workspace is a visible part of the time (hfa's bf16
forward and a device copy of v at the same shape beside it).

Writes <out>/<date>-fwd-fp8-<tag>.{json,md,png} ("what": "fwd-fp8"), the targets of issue 12
with a met / missed verdict each. Implementations that cannot run a cell are recorded as null
with the reason.

    python3 bench/bench_fwd_fp8.py --out DIR [--hdims 128 --seqlens 4096 --granularity-costs]
"""

import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_fwd import cell_case, reference_rows, sample  # noqa: E402
from benchlib import (accuracy_of, announce, case_cells, check_grid_args,  # noqa: E402
                      conclude, do_bench_timing, fa3_for_run, fa3_forward, first_line, flops,
                      fmt, grid, grid_parser, in_both_orders, markdown, nan_filled_empty,
                      new_result, put_rounds, ratio, record_cell, sci, skip_reason, table,
                      timed_ms, under, utc_now, verdict, worst, write_plot, write_results)

IMPLS = ["hfa", "hfa_bf16", "cudnn", "fa3"]  # column order
OWN = ("hfa", "hfa_bf16")
E4M3_MAX = 448.0
FP8_MAX_ERR = 0.05  # hfa's bound against the dequantized reference
# What an implementation's first call raises when it cannot run a cell: NotImplementedError
# (a RuntimeError) from hfa, RuntimeError from SDPA and CUDA, TypeError from a Python API that
# does not take the descales.
CANNOT_RUN = (RuntimeError, TypeError)
# (text, which cells, the value checked, the bound) of issue 12's speed targets.
TARGETS = [
    ("hfa >= 1000 TFLOP/s at hdim 128, seqlen >= 4k, non-causal",
     lambda c: c["hdim"] == 128 and c["seqlen_q"] >= 4096 and not c["causal"],
     lambda r: r.get("hfa"), 1000),
    ("hfa >= 1150 TFLOP/s at hdim 256, seqlen >= 4k, non-causal",
     lambda c: c["hdim"] == 256 and c["seqlen_q"] >= 4096 and not c["causal"],
     lambda r: r.get("hfa"), 1150),
    ("hfa >= 1.6x hfa_bf16 on every cell with seqlen >= 2k",
     lambda c: c["seqlen_q"] >= 2048,
     lambda r: r["hfa"] / r["hfa_bf16"] if r.get("hfa") and r.get("hfa_bf16") else None, 1.6),
]
# --granularity-costs: name -> descale block rows (None: no block term).
GRANULARITIES = {"tensor": None, "head": None, "block": 128}
GRANULARITY_CELL = (128, 8192)  # hdim, seqlen (non-causal)
SHORT_QUERIES = (128, 1024)  # seqlen_q of the transposed-V measurement
LONG_KEYS = 16384  # its seqlen_k


def parse_args(argv=None):
    p = grid_parser(__doc__, IMPLS, tag_default="e4m3")
    p.add_argument("--acc-rows", type=int, default=256, help="query rows per sampled head")
    p.add_argument("--acc-heads", type=int, default=2, help="heads sampled for accuracy")
    p.add_argument("--granularity-costs", action="store_true",
                   help="also time per-tensor / per-head / per-block descales and the fixed "
                        "cost of the transposed V (hdim 128)")
    p.add_argument("--no-grid", action="store_true",
                   help="skip the grid (with --granularity-costs: that section alone)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if an hfa row errs (other than not-implemented) or fails accuracy")
    # The grid helpers read these: the inputs' dtype (the cells' "dtype") and no separate hdim_v.
    p.set_defaults(dtype="e4m3", hdim_v=None)
    return check_grid_args(p, p.parse_args(argv))


# --- inputs ------------------------------------------------------------------------------------

def quantize(x, granularity, block=None):
    """(codes, descale, dequantized) of a BSHD tensor in e4m3, scale = amax / 448 per tensor,
    per (batch, head) or per (batch, `block` rows, head). The descale has the shape hfa and
    FlashAttention-3 take: (batch, heads), for a tensor a stride-0 expansion of one scalar; per
    block (batch, ceil(seqlen / block), heads). dequantized: codes · scale in float64."""
    import torch
    import torch.nn.functional as F
    b, s, h, _ = x.shape
    xf = x.float()

    def scale_of(amax):
        return (amax / E4M3_MAX).clamp_min(1e-12)
    if granularity == "tensor":
        scale = scale_of(xf.abs().amax()).reshape(1, 1)
        descale, per_row = scale.expand(b, h), scale.reshape(1, 1, 1, 1)
    elif granularity == "head":
        descale = scale_of(xf.abs().amax(dim=(1, 3)))  # (b, h)
        per_row = descale[:, None, :, None]
    else:  # block: pad the sequence to whole blocks, one amax per (batch, block, head)
        blocks = math.ceil(s / block)
        padded = F.pad(xf, (0, 0, 0, 0, 0, blocks * block - s))
        descale = scale_of(padded.view(b, blocks, block, h, -1).abs().amax(dim=(2, 4)))
        per_row = descale.repeat_interleave(block, dim=1)[:, :s, :, None]
    codes = (xf / per_row).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return codes, descale, codes.double() * per_row.double()


def quantize_inputs(tensors, granularity="tensor", block=None):
    """(codes, descales, dequantized), each a tuple over q, k, v."""
    return tuple(zip(*(quantize(x, granularity, block) for x in tensors)))


def hfa_fp8(codes, descales, causal, block=None):
    """hfa's FP8 forward on these codes, as a function of extra keyword arguments."""
    import hfa
    (q8, k8, v8), (qd, kd, vd) = codes, descales
    blocks = {"descale_block_q": block, "descale_block_kv": block} if block else {}

    def fn(**extra):
        return hfa.flash_attn_func(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd,
                                   v_descale=vd, **blocks, **extra)
    return fn


def median_ms(fn, args):
    return timed_ms(fn, args)[0]


def tflops_of(f, ms):
    return round(f / (ms * 1e-3) / 1e12, 2)


# --- accuracy ----------------------------------------------------------------------------------

def sampled_errors(args, case, refs, outs, lses, gen):
    """Max |out − ref| over sampled query rows and heads of the first and the last sequence:
    {(impl, ref name): error} for each output (BSHD) and each reference (name -> q, k, v, read
    in float64), and {impl: LSE error} against the first reference for each LSE (BHS)."""
    rows, heads = sample(case["seqlen_q"], case["heads"], args.acc_rows, args.acc_heads, gen)
    rows = rows.to("cuda")
    errs = dict.fromkeys(((impl, name) for impl in outs for name in refs), 0.0)
    lse_errs = dict.fromkeys(lses, 0.0)
    for b in sorted({0, case["batch"] - 1}):
        for h in heads.tolist():
            for i, (name, (q, k, v)) in enumerate(refs.items()):
                ref, ref_lse = reference_rows(q, k, v, b, h, rows, case["causal"])
                for impl, o in outs.items():
                    e = (o[b, rows, h].double() - ref).abs().max().item()
                    errs[impl, name] = worst(errs[impl, name], e)
                if i == 0:
                    for impl, lse in lses.items():
                        e = (lse[b, h, rows].double() - ref_lse).abs().max().item()
                        lse_errs[impl] = worst(lse_errs[impl], e)
    return errs, lse_errs


def fp8_accuracy(case, errs, lse_errs, outs, lses):
    """The cell's accuracy entry: every output's errors, hfa's verdict."""
    import torch
    acc = {"case": case}
    for (impl, name), e in errs.items():
        acc[f"{impl}_max_err" + ("" if name == "dequantized" else "_unquantized")] = e
    if "hfa" not in outs:
        acc["pass"] = None
        return acc
    # out and lse started as NaN (nan_filled_empty): finite everywhere = all written.
    finite = bool(torch.isfinite(outs["hfa"]).all().item()
                  and torch.isfinite(lses["hfa"]).all().item())
    acc.update(hfa_finite=finite, hfa_lse_max_err=lse_errs["hfa"], bound=FP8_MAX_ERR)
    acc["pass"] = finite and acc["hfa_max_err"] <= FP8_MAX_ERR
    return acc


# --- one grid cell -----------------------------------------------------------------------------

def run_cell(args, case, fa3, gen, cpu_gen):
    """([row], accuracy entry, skipped entries) of one cell (benchlib.record_cell's run).
    fa3: FlashAttention-3's flash_attn_interface, None where it is not loaded."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend

    import hfa

    causal = case["causal"]
    shape = (case["batch"], case["seqlen_q"], case["heads"], case["hdim"])
    bf16 = tuple(torch.randn(shape, dtype=torch.bfloat16, device="cuda", generator=gen)
                 for _ in range(3))
    codes, descales, dequantized = quantize_inputs(bf16)
    fp8 = hfa_fp8(codes, descales, causal)
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in bf16)  # SDPA's BHSD, before timing

    fns = {
        "hfa": (None, fp8),
        "hfa_bf16": (None, lambda: hfa.flash_attn_func(*bf16, causal=causal)),
        "cudnn": (SDPBackend.CUDNN_ATTENTION,
                  lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)),
        "fa3": (None, fa3 and (lambda: fa3_forward(fa3, *codes, causal, q_descale=descales[0],
                                                    k_descale=descales[1],
                                                    v_descale=descales[2])[0])),
    }

    # First calls: which implementations run this cell, and the outputs the accuracy reads.
    outs, lses, notes = {}, {}, {}
    for impl in args.impls:
        backend, fn = fns[impl]
        if fn is None:  # FA3 not loaded: fa3_for_run recorded why, once for the run
            notes[impl] = None
            continue
        try:
            with under(backend):
                if impl == "hfa":
                    with nan_filled_empty():
                        outs[impl], lses[impl] = fn(return_attn_probs=True)
                else:
                    out = fn()
                    outs[impl] = out.transpose(1, 2) if impl == "cudnn" else out
            torch.cuda.synchronize()
        except CANNOT_RUN as e:
            notes[impl] = skip_reason(e)

    refs = {"dequantized": dequantized, "unquantized": bf16}
    errs, lse_errs = sampled_errors(args, case, refs, outs, lses, cpu_gen)
    acc = fp8_accuracy(case, errs, lse_errs, outs, lses)
    del outs, lses

    row = {"case": case, "metric": "tflops", **dict.fromkeys(args.impls)}
    f = flops(case["batch"], case["heads"], case["seqlen_q"], case["seqlen_k"], case["hdim"],
              case["hdim"], causal)
    timings = {impl: do_bench_timing(args, *fns[impl]) for impl in args.impls
               if impl not in notes}
    put_rounds(row, in_both_orders(timings), lambda ms: tflops_of(f, ms))
    skipped = [{"case": case, "impl": impl, "reason": r} for impl, r in notes.items() if r]
    return [row], acc, skipped


# --- --granularity-costs -----------------------------------------------------------------------

def timed(fn, args):
    """(median ms, None) of fn, or (None, why its first call failed)."""
    import torch
    try:
        fn()
        torch.cuda.synchronize()
    except CANNOT_RUN as e:
        return None, skip_reason(e)
    return median_ms(fn, args), None


def granularity_rows(args, gen, cpu_gen):
    """TFLOP/s of the FP8 forward with each descale granularity on one cell, and its error
    against the unquantized inputs."""
    import torch
    hdim, seqlen = GRANULARITY_CELL
    case = cell_case(args, hdim, False, seqlen)
    shape = (case["batch"], seqlen, case["heads"], hdim)
    bf16 = tuple(torch.randn(shape, dtype=torch.bfloat16, device="cuda", generator=gen)
                 for _ in range(3))
    f = flops(case["batch"], case["heads"], seqlen, seqlen, hdim, hdim, False)
    rows = []
    for name, block in GRANULARITIES.items():
        codes, descales, _ = quantize_inputs(bf16, name, block)
        fn = hfa_fp8(codes, descales, False, block)
        row = {"case": {**case, "granularity": name,
                        "descale_shape": list(descales[0].shape)}, "metric": "tflops"}
        ms, note = timed(fn, args)
        row["hfa"] = ms and tflops_of(f, ms)
        if note:
            row["notes"] = {"hfa": note}
        else:
            errs, _ = sampled_errors(args, case, {"unquantized": bf16}, {"hfa": fn()}, {},
                                     cpu_gen)
            row["hfa_max_err_unquantized"] = errs["hfa", "unquantized"]
        rows.append(row)
        print(f"granularity {name}: hfa {fmt(row['hfa'])} TFLOP/s {note or ''}", flush=True)
    return rows


def v_transpose_rows(args, gen):
    """Microseconds of the FP8 forward at short seqlen_q against a long seqlen_k (non-causal,
    hdim 128), beside hfa's bf16 forward and a device copy of v: the fixed cost of v."""
    import torch

    import hfa
    hdim = GRANULARITY_CELL[0]
    batch, heads = max(1, args.tokens // LONG_KEYS), args.head_budget // hdim
    kv = tuple(torch.randn((batch, LONG_KEYS, heads, hdim), dtype=torch.bfloat16,
                           device="cuda", generator=gen) for _ in range(2))
    rows = []
    for seqlen_q in SHORT_QUERIES:
        q = torch.randn((batch, seqlen_q, heads, hdim), dtype=torch.bfloat16, device="cuda",
                        generator=gen)
        codes, descales, _ = quantize_inputs((q, *kv))
        v8 = codes[2]
        row = {"case": {"hdim": hdim, "causal": False, "seqlen_q": seqlen_q,
                        "seqlen_k": LONG_KEYS, "batch": batch, "heads": heads},
               "metric": "us", "v_bytes": v8.numel() * v8.element_size()}
        notes = {}
        for impl, fn in (("hfa", hfa_fp8(codes, descales, False)),
                         ("hfa_bf16", lambda: hfa.flash_attn_func(q, *kv)),
                         ("v_copy", v8.clone)):
            ms, notes[impl] = timed(fn, args)
            row[impl] = ms and round(ms * 1e3, 2)
        notes = {impl: note for impl, note in notes.items() if note}
        if notes:
            row["notes"] = notes
        rows.append(row)
        print(f"v transpose, seqlen_q {seqlen_q}: hfa {fmt(row['hfa'])} us, hfa_bf16 "
              f"{fmt(row['hfa_bf16'])} us, copy of v {fmt(row['v_copy'])} us", flush=True)
    return rows


def granularity_costs(args, gen, cpu_gen):
    """The section's JSON entry, and how many hfa FP8 errors it met (other than
    not-implemented). An exception out of it (a sticky CUDA error) is recorded, not raised,
    so that the grid measured before is written."""
    try:
        section = {"granularity": granularity_rows(args, gen, cpu_gen),
                   "v_transpose": v_transpose_rows(args, gen)}
    except Exception as e:  # noqa: BLE001 - keep the grid
        return {"error": f"{type(e).__name__}: {first_line(e)}"}, 1
    bad = sum(r.get("notes", {}).get(impl, "").startswith("error")
              for rows in section.values() for r in rows for impl in OWN)
    return section, bad


# --- outputs -----------------------------------------------------------------------------------

def target_verdicts(result):
    """Issue 12's targets against the grid: met (every such cell reaches the bound), missed
    (some cell does not, or did not run), not measured (no such cell ran)."""
    verdicts = []
    for text, cells, value, bound in TARGETS:
        rows = [r for r in result["rows"] if cells(r["case"])]
        values = [(r["case"], value(r)) for r in rows]
        short = [(c, x) for c, x in values if x is None or x < bound]
        if all(x is None for _, x in values):
            word, short = "not measured", []
        else:
            word = "missed" if short else "met"
        detail = ", ".join(f"hdim {c['hdim']} causal {int(c['causal'])} seqlen {c['seqlen_q']}: "
                           + ("null" if x is None else f"{x:.2f}") for c, x in short)
        verdicts.append({"target": text, "verdict": word, "cells": len(rows),
                         "short": detail})
    return verdicts


def grid_table(result, impls):
    fa3 = "fa3" in impls
    head = ["hdim", "causal", "seqlen", "batch×heads"] + [f"{i} TFLOP/s" for i in impls]
    head += ["hfa/hfa_bf16", "hfa/cudnn"] + (["hfa/fa3"] if fa3 else [])
    head += ["hfa err (deq)", "hfa err (bf16 in)"] + (["fa3 err (deq)"] if fa3 else [])
    head += ["hfa_bf16 err (bf16 in)", "accuracy"]
    acc_of = accuracy_of(result)
    body = []
    for r in result["rows"]:
        a = acc_of(r["case"])
        cells = case_cells(r["case"]) + [fmt(r.get(i)) for i in impls]
        cells += [ratio(r.get("hfa"), r.get("hfa_bf16")), ratio(r.get("hfa"), r.get("cudnn"))]
        cells += [ratio(r.get("hfa"), r.get("fa3"))] if fa3 else []
        cells += [sci(a.get("hfa_max_err")), sci(a.get("hfa_max_err_unquantized"))]
        cells += [sci(a.get("fa3_max_err"))] if fa3 else []
        cells += [sci(a.get("hfa_bf16_max_err_unquantized")), verdict(a)]
        body.append(cells)
    return head, body


def notes_cell(row):
    return "; ".join(f"{impl}: {note}" for impl, note in row.get("notes", {}).items())


def section_markdown(section):
    if "error" in section:
        return ["", "## Granularity costs", "", f"Not run: {section['error']}"]
    gran, vt = section["granularity"], section["v_transpose"]
    base = next((r["hfa"] for r in gran if r["case"]["granularity"] == "tensor"), None)
    c = gran[0]["case"]
    lines = ["", "## Cost of the descale granularity",
             "", f"hdim {c['hdim']}, seqlen {c['seqlen_q']}, non-causal, "
             f"batch×heads {c['batch']}×{c['heads']}; time relative to per-tensor descales.", ""]
    lines += table(["granularity", "descale shape", "hfa TFLOP/s", "time ÷ per-tensor",
                    "hfa err (bf16 in)", "not run"],
                   [[r["case"]["granularity"], "×".join(map(str, r["case"]["descale_shape"])),
                     fmt(r["hfa"]), ratio(base, r["hfa"]),
                     sci(r.get("hfa_max_err_unquantized")), notes_cell(r)] for r in gran])
    lines += ["", "## Fixed cost of v (the transpose into the workspace)", "",
              "FP8 forward at short seqlen_q against seqlen_k "
              f"{vt[0]['case']['seqlen_k']} (hdim {vt[0]['case']['hdim']}, non-causal), "
              "in µs, beside hfa's bf16 forward (no transpose) and a device copy of v.", ""]
    lines += table(["seqlen_q", "seqlen_k", "batch×heads", "v MiB", "hfa µs", "hfa_bf16 µs",
                    "copy of v µs", "not run"],
                   [[str(r["case"]["seqlen_q"]), str(r["case"]["seqlen_k"]),
                     f"{r['case']['batch']}×{r['case']['heads']}",
                     f"{r['v_bytes'] / 2**20:.1f}", fmt(r["hfa"]), fmt(r["hfa_bf16"]),
                     fmt(r["v_copy"]), notes_cell(r)] for r in vt])
    return lines


def fp8_markdown(result, impls):
    head, body = grid_table(result, impls)
    doc = markdown("FP8 forward: hfa e4m3 vs its bf16 forward, cuDNN (bf16) and "
                   "FlashAttention-3", result, head, body)
    lines = ["", "## Targets (issue 12)", ""]
    lines += [f"- {t['target']}: **{t['verdict']}** ({t['cells']} cells"
              + (f"; short: {t['short']}" if t["short"] else "") + ")"
              for t in result["targets"]]
    if "granularity_costs" in result:
        lines += section_markdown(result["granularity_costs"])
    return doc + "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench: needs a CUDA GPU")
    warnings.filterwarnings("ignore", message=".*(kernel not used|Flash attention|cuDNN).*")
    os.makedirs(args.out, exist_ok=True)
    now = utc_now()
    result = new_result(
        "fwd-fp8", now, args,
        f"{args.acc_rows} rows x {args.acc_heads} heads x first/last batch vs float64 "
        "attention of the dequantized inputs (*_max_err) and of the unquantized bf16 inputs "
        f"(*_max_err_unquantized); pass: hfa err <= {FP8_MAX_ERR}, out and lse finite",
        quantization="N(0, 1) bf16 inputs, per-tensor e4m3 scale amax / 448, descales "
                     "(batch, heads) float32 with stride 0", impls=args.impls,
        timing="each cell twice, --impls in order then reversed; value: mean of the two")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    cpu_gen = torch.Generator()
    cpu_gen.manual_seed(0)
    fa3 = fa3_for_run(result, [] if args.no_grid else args.impls)
    announce(result)
    t0 = time.time()
    bad = 0
    for hdim, causal, seqlen in ([] if args.no_grid else grid(args)):
        case = cell_case(args, hdim, causal, seqlen)
        bad += record_cell(result, lambda: run_cell(args, case, fa3, gen, cpu_gen), case,
                           args.impls, t0, own=OWN)
    result["targets"] = target_verdicts(result)
    for t in result["targets"]:
        print(f"target: {t['target']}: {t['verdict']}" + (f" ({t['short']})" if t["short"]
                                                          else ""), flush=True)
    if args.granularity_costs:
        result["granularity_costs"], section_bad = granularity_costs(args, gen, cpu_gen)
        bad += section_bad

    stem = os.path.join(args.out, f"{now.strftime('%Y-%m-%d')}-fwd-fp8-{args.tag}")
    plot = None if args.no_plot or args.no_grid else (
        lambda path: write_plot(path, result, args.impls, args.hdims,
                                [{"causal": c} for c in args.causals], "FP8 forward"))
    written = write_results(stem, result, fp8_markdown(result, args.impls), plot)
    return conclude(result, written, t0, bad, args.strict)


if __name__ == "__main__":
    sys.exit(main())
