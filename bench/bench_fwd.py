#!/usr/bin/env python3
"""Forward benchmark: hfa vs PyTorch SDPA (cuDNN and FLASH = FlashAttention-2) on one GPU.

Design §5: one process, the same inputs for every implementation, triton.testing.do_bench
medians, the FA3-paper grid (16k tokens in total, heads = 2048 / hdim), FLOPs 4·b·h·s_q·s_k·d
(halved for causal). Design §6 on every cell: max error of hfa and of cuDNN against a float64
reference on a sample of rows and heads, computed on the GPU; hfa passes when
max|hfa − ref| ≤ 2·max|cudnn − ref| + 1e-5 and its output is finite everywhere.

SDPA takes (B, H, S, D). It is timed twice: on contiguous BHSD copies made before timing
("cudnn", "fa2": the transpose-free variant, the headline numbers) and on transposed views of
our BSHD tensors ("cudnn_bshd", "fa2_bshd"), which is what a BSHD model would hand it.

Writes <out>/<date>-fwd-<tag>.{json,md,png}. Cells an implementation cannot run (hfa's
NotImplementedError, SDPA's "no kernel") are recorded as null with the reason.

    python3 bench/bench_fwd.py --out DIR [--hdims 128 --seqlens 4096 --causal true --dtype bf16]
"""

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

GRID_HDIMS = [64, 128, 256]
GRID_SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
# Implementations in column order; the first three are the design's headline columns.
IMPLS = ["hfa", "cudnn", "fa2", "cudnn_bshd", "fa2_bshd"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory for the .json, .md and .png")
    p.add_argument("--hdims", type=int, nargs="+", default=GRID_HDIMS)
    p.add_argument("--hdim-v", type=int, default=None,
                   help="head dim of v and out (default: each hdim; DeepSeek: --hdims 192 --hdim-v 128)")
    p.add_argument("--seqlens", type=int, nargs="+", default=GRID_SEQLENS)
    p.add_argument("--causal", choices=["both", "true", "false"], default="both")
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--tokens", type=int, default=16384, help="batch = tokens / seqlen")
    p.add_argument("--head-budget", type=int, default=2048, help="heads = head_budget / hdim")
    p.add_argument("--impls", nargs="+", choices=IMPLS, default=IMPLS)
    p.add_argument("--tag", default=None, help="file name tag (default: the dtype)")
    p.add_argument("--warmup", type=float, default=25, help="do_bench warmup, ms")
    p.add_argument("--rep", type=float, default=100, help="do_bench repetitions, ms")
    p.add_argument("--acc-rows", type=int, default=256, help="query rows per sampled head")
    p.add_argument("--acc-heads", type=int, default=2, help="heads sampled for accuracy")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if any cell errs (other than not-implemented) or fails accuracy")
    a = p.parse_args(argv)
    a.causals = {"both": [False, True], "true": [True], "false": [False]}[a.causal]
    a.tag = a.tag or a.dtype
    for d in a.hdims:
        if a.head_budget % d:
            p.error(f"--hdims: {d} does not divide --head-budget {a.head_budget}")
    for s in a.seqlens:
        if a.tokens % s:
            p.error(f"--seqlens: {s} does not divide --tokens {a.tokens}")
    return a


def flops(batch, heads, seqlen_q, seqlen_k, d_qk, d_v, causal):
    """Design §5: 4·b·h·s_q·s_k·d (d: mean of the head dims), halved for causal at s_q = s_k."""
    f = 4.0 * batch * heads * seqlen_q * seqlen_k * (d_qk + d_v) / 2
    return f / 2 if causal and seqlen_q == seqlen_k else f


def git_commit():
    """HFA_COMMIT when set: the commit the binaries were built from. The GPU machine's copy of
    the repository carries the working tree but not always the newest .git, so its own
    `git rev-parse` can name an older commit (then marked -dirty)."""
    if os.environ.get("HFA_COMMIT"):
        return os.environ["HFA_COMMIT"]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# --- accuracy ----------------------------------------------------------------------------------

def sample(seqlen, heads, rows, nheads, gen):
    """Query rows (always the first and the last, the rest random) and heads to check."""
    import torch
    rows = min(rows, seqlen)
    picked = torch.randperm(seqlen, generator=gen)[:rows]
    picked[0], picked[-1] = 0, seqlen - 1
    heads_picked = torch.randperm(heads, generator=gen)[:min(nheads, heads)]
    return picked.sort().values, heads_picked


def reference_rows(q, k, v, b, h, rows, causal):
    """float64 attention of query rows `rows` of (batch b, head h), on the GPU: (out, lse).
    q, k, v are BSHD; causal is bottom-right aligned (s_q = s_k here, so the usual mask)."""
    import torch
    qs = q[b, rows, h].double()                      # (n, d)
    ks, vs = k[b, :, h].double(), v[b, :, h].double()  # (s_k, d)
    s = qs @ ks.T / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > rows.to(q.device)[:, None] + (sk - sq), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.softmax(s, dim=-1) @ vs, lse


# --- one cell ----------------------------------------------------------------------------------

def run_cell(args, hdim, causal, seqlen, dtype, gen, cpu_gen):
    import torch
    import torch.nn.functional as F
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import hfa

    batch, heads = args.tokens // seqlen, args.head_budget // hdim
    hdim_v = args.hdim_v or hdim
    case = {"hdim": hdim, "causal": causal, "seqlen_q": seqlen, "seqlen_k": seqlen,
            "batch": batch, "heads": heads, "dtype": args.dtype}
    if hdim_v != hdim:
        case["hdim_v"] = hdim_v
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
    }

    def under(backend):
        return sdpa_kernel(backend) if backend is not None else _null()

    # First calls: they decide which implementations can run this cell, and give the outputs
    # the accuracy check reads (BSHD for hfa, BHSD for SDPA).
    outs, notes = {}, {}
    hfa_lse = None
    # cuDNN's output is the accuracy peer (§6): computed even when it is not being timed.
    for impl in args.impls + [i for i in ("cudnn",) if i not in args.impls]:
        backend, fn = fns[impl]
        try:
            with under(backend):
                if impl == "hfa":
                    with nan_filled_empty():
                        outs[impl], hfa_lse = hfa.flash_attn_func(q, k, v, causal=causal,
                                                                  return_attn_probs=True)
                else:
                    outs[impl] = fn().transpose(1, 2)
            torch.cuda.synchronize()
        except NotImplementedError as e:
            notes[impl] = f"not implemented: {e}"
        except RuntimeError as e:  # SDPA: no kernel for this shape; hfa: CUDA or internal error
            notes[impl] = f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}"

    # Accuracy (§6) on a sample of rows and heads against float64 on the GPU.
    acc = {"case": case}
    rows, hs = sample(seqlen, heads, args.acc_rows, args.acc_heads, cpu_gen)
    rows_dev = rows.to("cuda")
    errs = {impl: 0.0 for impl in outs}
    lse_err = 0.0
    for b in sorted({0, batch - 1}):
        for h in hs.tolist():
            ref, ref_lse = reference_rows(q, k, v, b, h, rows_dev, causal)
            for impl, o in outs.items():
                errs[impl] = max(errs[impl], (o[b, rows_dev, h].double() - ref).abs().max().item())
            if hfa_lse is not None:
                got = hfa_lse[b, h, rows_dev].double()
                lse_err = max(lse_err, (got - ref_lse).abs().max().item())
    for impl, e in errs.items():
        acc[f"{impl}_max_err"] = e
    if "hfa" in outs:
        # out and lse started as NaN (nan_filled_empty): finite everywhere = all written.
        # (Every row sees a key here, s_q = s_k, so no LSE is -inf.)
        finite = bool(torch.isfinite(outs["hfa"]).all().item()
                      and torch.isfinite(hfa_lse).all().item())
        acc["hfa_finite"] = finite
        acc["hfa_lse_max_err"] = lse_err
        if "cudnn" in errs:
            bound = 2 * errs["cudnn"] + 1e-5
            acc["bound"] = bound
            acc["pass"] = finite and errs["hfa"] <= bound and lse_err <= 1e-3
        else:
            acc["pass"] = None  # no peer to set the tolerance
            acc["note"] = "cudnn did not run: no tolerance"
    else:
        acc["pass"] = None
    del outs, hfa_lse

    # Timing: median of do_bench, per implementation that ran.
    row = {"case": case, "metric": "tflops"}
    ms = {}
    f = flops(batch, heads, seqlen, seqlen, hdim, hdim_v, causal)
    for impl in args.impls:
        if impl in notes:
            row[impl] = None
            continue
        backend, fn = fns[impl]
        with under(backend):
            t = triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep,
                                        return_mode="median")
        ms[impl] = t
        row[impl] = round(f / (t * 1e-3) / 1e12, 2)
    return row, acc, notes, ms


class nan_filled_empty:
    """torch.empty returns NaN-filled memory inside this block (deterministic mode fills
    uninitialized memory), so outputs hfa allocates start as NaN (design §6)."""

    def __enter__(self):
        import torch
        self.prev = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
        torch.use_deterministic_algorithms(True, warn_only=True)
        return self

    def __exit__(self, *exc):
        import torch
        torch.use_deterministic_algorithms(self.prev[0], warn_only=self.prev[1])
        return False


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# --- outputs -----------------------------------------------------------------------------------

def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "–"


def fmt(x):
    return f"{x:.1f}" if x is not None else "–"


def write_markdown(path, result, impls):
    acc_by_key = {json.dumps(a["case"], sort_keys=True): a for a in result["accuracy"]}
    head = ["hdim", "causal", "seqlen", "batch×heads"] + [f"{i} TFLOP/s" for i in impls]
    head += ["hfa/cudnn", "hfa/fa2", "hfa err", "cudnn err", "accuracy"]
    lines = [f"# Forward: hfa vs PyTorch SDPA ({result['date']})", "",
             f"- device: {result['device']}", f"- commit: `{result['commit']}`",
             "- versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()),
             f"- settings: {result['settings']}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        c = r["case"]
        a = acc_by_key.get(json.dumps(c, sort_keys=True), {})
        verdict = {True: "pass", False: "**FAIL**", None: "–"}[a.get("pass")]
        cells = [str(c["hdim"]), "T" if c["causal"] else "F", str(c["seqlen_q"]),
                 f"{c['batch']}×{c['heads']}"]
        cells += [fmt(r.get(i)) for i in impls]
        cells += [ratio(r.get("hfa"), r.get("cudnn")), ratio(r.get("hfa"), r.get("fa2"))]
        cells += [f"{a[k]:.2e}" if a.get(k) is not None else "–"
                  for k in ("hfa_max_err", "cudnn_max_err")]
        cells.append(verdict)
        lines.append("| " + " | ".join(cells) + " |")
    if result["skipped"]:
        lines += ["", "Not run:", ""]
        for s in result["skipped"]:
            c = s["case"]
            lines.append(f"- {s['impl']} at hdim {c['hdim']}, causal {c['causal']}, seqlen "
                         f"{c['seqlen_q']}: {s['reason']}")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def write_plot(path, result, impls, hdims, causals):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"bench: no plot ({e})", file=sys.stderr)
        return False
    fig, axes = plt.subplots(len(causals), len(hdims), squeeze=False,
                             figsize=(4.2 * len(hdims), 3.4 * len(causals)))
    for i, causal in enumerate(causals):
        for j, hdim in enumerate(hdims):
            ax = axes[i][j]
            rows = [r for r in result["rows"]
                    if r["case"]["hdim"] == hdim and r["case"]["causal"] == causal]
            for impl in impls:
                pts = [(r["case"]["seqlen_q"], r[impl]) for r in rows if r.get(impl)]
                if pts:
                    xs, ys = zip(*pts)
                    ax.plot(xs, ys, marker="o", label=impl,
                            linestyle="--" if impl.endswith("_bshd") else "-")
            ax.set_xscale("log", base=2)
            ax.set_title(f"hdim {hdim}, {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("seqlen (batch x seqlen fixed)")
            ax.set_ylabel("TFLOP/s")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"forward, {result['device']}, {result['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main(argv=None):
    args = parse_args(argv)
    import torch
    import triton

    import hfa

    if not torch.cuda.is_available():
        sys.exit("bench: needs a CUDA GPU")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    warnings.filterwarnings("ignore", message=".*(kernel not used|Flash attention|cuDNN).*")
    os.makedirs(args.out, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    result = {
        "what": "fwd",
        "commit": git_commit(),
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": torch.cuda.get_device_name(),
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda,
                     "cudnn": torch.backends.cudnn.version(), "triton": triton.__version__,
                     "hfa": hfa.version()},
        "settings": {"dtype": args.dtype, "tokens": args.tokens, "head_budget": args.head_budget,
                     "do_bench": f"median, warmup {args.warmup} ms, rep {args.rep} ms",
                     "accuracy": f"{args.acc_rows} rows x {args.acc_heads} heads x first/last "
                                 "batch vs float64; pass: hfa err <= 2*cudnn err + 1e-5, "
                                 "lse err <= 1e-3, output finite"},
        "rows": [], "accuracy": [], "skipped": [],
    }
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    cpu_gen = torch.Generator()
    cpu_gen.manual_seed(0)
    print(f"bench: {result['device']}; " + ", ".join(f"{k} {v}" for k, v in
                                                   result["versions"].items()), flush=True)
    t0 = time.time()
    bad = 0
    for hdim in args.hdims:
        for causal in args.causals:
            for seqlen in args.seqlens:
                try:
                    row, acc, notes, _ = run_cell(args, hdim, causal, seqlen, dtype, gen,
                                                  cpu_gen)
                except Exception as e:  # noqa: BLE001 - keep the cells measured so far
                    # e.g. a sticky CUDA error: record it, keep going, write what we have.
                    case = {"hdim": hdim, "causal": causal, "seqlen_q": seqlen,
                            "seqlen_k": seqlen, "dtype": args.dtype}
                    row = {"case": case, "metric": "tflops", **{i: None for i in args.impls}}
                    acc = {"case": case, "pass": False}
                    first_line = (str(e).splitlines() or [""])[0]
                    notes = {"cell": f"error: {type(e).__name__}: {first_line}"}
                    bad += 1
                result["rows"].append(row)
                result["accuracy"].append(acc)
                for impl, reason in notes.items():
                    result["skipped"].append({"case": row["case"], "impl": impl,
                                              "reason": reason})
                    bad += reason.startswith("error") and impl == "hfa"
                bad += acc.get("pass") is False
                summary = "  ".join(f"{i} {fmt(row.get(i))}" for i in args.impls)
                print(f"hdim {hdim:3d} causal {int(causal)} seqlen {seqlen:5d}: {summary}  "
                      f"acc {acc.get('pass')}  [{time.time() - t0:.0f}s]", flush=True)
                torch.cuda.empty_cache()

    stem = os.path.join(args.out, f"{now.strftime('%Y-%m-%d')}-fwd-{args.tag}")
    with open(stem + ".json", "w") as fh:
        json.dump(result, fh, indent=1)
    write_markdown(stem + ".md", result, args.impls)
    written = [stem + ".json", stem + ".md"]
    if not args.no_plot and write_plot(stem + ".png", result, args.impls, args.hdims,
                                       args.causals):
        written.append(stem + ".png")
    print(f"bench: {len(result['rows'])} cells in {time.time() - t0:.0f}s; wrote "
          + ", ".join(written))
    if bad:
        print(f"bench: {bad} cell(s) with hfa errors or failed accuracy", file=sys.stderr)
    return 1 if (bad and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
