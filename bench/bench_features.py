#!/usr/bin/env python3
"""Forward features benchmark (issue: forward for real models) on one GPU, peers in the same run.

Cells, bf16, hdim 128 unless said:
  varlen    a packed causal batch of 16k tokens, lengths drawn from 64..4096 (seeded): hfa's
            varlen forward vs PyTorch's FA2 varlen path (aten._flash_attention_forward with
            cu_seqlens), and vs hfa's and cuDNN's fixed-length causal forward on the same number of
            tokens at the mean length (the "equal work" reference).
  window    a 32k causal sequence with a 4096-token sliding window vs FA2's sliding window, and
            vs hfa's 4k-long causal run on the same number of tokens: time per token and TFLOP/s.
  softcap   softcap 30 (hdim 128 and 256), hfa against its own plain forward and, at hdim 128,
            against FlexAttention with a softcap score_mod (no SDPA backend has softcap).
  sinks     attention sinks, hfa against its own plain forward (no peer has them).
  packgqa   short queries with GQA (1, 16, 64 queries against an 8k cache, no mask,
            32 query heads on 4 kv heads): hfa vs SDPA cuDNN and FA2 (enable_gqa). Run it again
            with HFA_SM90_PACK_GQA=0 for hfa without packing (the JSON records which).
Every timed hfa cell is checked against float64 on sampled rows: docs/design.md §6's bound, 2x the
error of FA2 where it runs the same math (varlen, window), else of peer_rows (fp32 softmax, P
rounded to bf16 before P·V: what a 16-bit tensor-core kernel computes).

    python3 bench/bench_features.py --out DIR [--cells varlen window softcap sinks]
"""

import argparse
import datetime
import json
import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import git_commit, nan_filled_empty  # noqa: E402

CELLS = ["varlen", "window", "softcap", "sinks", "packgqa"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--cells", nargs="+", choices=CELLS, default=CELLS)
    p.add_argument("--tag", default="features")
    p.add_argument("--warmup", type=float, default=25)
    p.add_argument("--rep", type=float, default=100)
    return p.parse_args(argv)


def bench(fn, args):
    import triton.testing
    return triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep, return_mode="median")


def attention_flops(seqlens_q, seqlens_k, heads, hdim, window_left=-1, causal=True):
    """4·d·h·(visible (query, key) pairs), counted exactly, bottom-right aligned."""
    pairs = 0
    for sq, sk in zip(seqlens_q, seqlens_k):
        for i in range(sq):
            last = i + sk - sq if causal else sk - 1
            first = max(0, i + sk - sq - window_left) if window_left >= 0 else 0
            pairs += max(0, min(last, sk - 1) - first + 1)
    return 4.0 * hdim * heads * pairs


def reference_rows(q, k, v, rows, head, causal, window_left=-1, softcap=0.0, sink=None,
                   dtype=None, round_p=None):
    """float64 out rows of one sequence (q, k, v: (s, h, d) slices) and one head; GQA by ratio.
    dtype/round_p: compute in another dtype, round P to round_p before P·V (the peer)."""
    import torch
    dtype = dtype or torch.float64
    group = q.shape[1] // k.shape[1]
    qs = q[rows, head].to(dtype)
    ks, vs = k[:, head // group].to(dtype), v[:, head // group].to(dtype)
    s = qs @ ks.T / math.sqrt(q.shape[-1])
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    sq, sk = q.shape[0], k.shape[0]
    j = torch.arange(sk, device=q.device)[None, :]
    i = rows.to(q.device)[:, None] + (sk - sq)
    if causal:
        s = s.masked_fill(j > i, float("-inf"))
    if window_left >= 0:
        s = s.masked_fill(j < i - window_left, float("-inf"))
    if sink is not None:
        s = torch.cat([s, torch.full((s.shape[0], 1), float(sink), dtype=s.dtype,
                                     device=s.device)], dim=1)
        p = torch.softmax(s, dim=-1)[:, :-1]
    else:
        p = torch.softmax(s, dim=-1)
    if round_p is not None:
        p = p.to(round_p).to(dtype)
    return p @ vs


def peer_rows(q, k, v, rows, head, causal, window_left=-1, softcap=0.0, sink=None):
    """The §6 peer where no library runs the same math: fp32 scores and softmax, P rounded to
    the input dtype before P·V (as 16-bit tensor-core kernels feed it), out rounded likewise."""
    import torch
    ref = reference_rows(q.float(), k.float(), v.float(), rows, head, causal, window_left, softcap,
                         sink, dtype=torch.float32, round_p=q.dtype)
    return ref.to(q.dtype).double()


def max_error(out, q, k, v, gen, sinks=None, peer=False, **mask):
    """Largest |out − float64| over 64 sampled rows (first and last always) of 2 heads."""
    import torch
    sq = q.shape[0]
    rows = torch.randperm(sq, generator=gen)[:min(64, sq)]
    rows[0], rows[-1] = 0, sq - 1
    rows = rows.to(q.device)
    err = 0.0
    for h in (0, q.shape[1] - 1):
        sink = None if sinks is None else sinks[h].item()
        ref = reference_rows(q, k, v, rows, h, sink=sink, **mask)
        got = peer_rows(q, k, v, rows, h, sink=sink, **mask) if peer else out[rows, h].double()
        err = max(err, (got - ref).abs().max().item())
    return err


def fa2_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True, window_left=-1):
    import torch
    extra = {}
    if window_left >= 0:
        extra = {"window_size_left": window_left, "window_size_right": 0}
    return torch.ops.aten._flash_attention_forward(q, k, v, cu_q, cu_k, max_q, max_k, 0.0, causal,
                                                   False, **extra)[0]


def cell_varlen(args, gen, cpu_gen, dtype):
    import random

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import hfa
    heads, hdim, total = 16, 128, 16384
    rng = random.Random(0)
    lengths = []
    while sum(lengths) < total:
        lengths.append(min(rng.randint(64, 4096), total - sum(lengths)))
    cu = torch.tensor([0] + list(__import__("itertools").accumulate(lengths)), dtype=torch.int32,
                      device="cuda")
    q, k, v = (torch.randn(total, heads, hdim, dtype=dtype, device="cuda", generator=gen)
               for _ in range(3))
    mx = max(lengths)
    f = attention_flops(lengths, lengths, heads, hdim)

    def ours():
        return hfa.flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=True)

    with nan_filled_empty():
        out = ours()
    err = 0.0
    for s in range(len(lengths)):
        a, b = cu[s].item(), cu[s + 1].item()
        err = max(err, max_error(out[a:b], q[a:b], k[a:b], v[a:b], cpu_gen, causal=True))
    peer = fa2_varlen(q, k, v, cu, cu, mx, mx)
    peer_err = 0.0
    for s in range(len(lengths)):
        a, b = cu[s].item(), cu[s + 1].item()
        peer_err = max(peer_err, max_error(peer[a:b], q[a:b], k[a:b], v[a:b], cpu_gen, causal=True))
    row = {"cell": "varlen", "case": {"lengths": lengths, "heads": heads, "hdim": hdim,
                                      "causal": True, "tokens": total},
           "hfa_tflops": f / bench(ours, args) / 1e9,
           "fa2_varlen_tflops": f / bench(lambda: fa2_varlen(q, k, v, cu, cu, mx, mx), args) / 1e9,
           "hfa_max_err": err, "fa2_max_err": peer_err,
           "pass": bool(torch.isfinite(out).all().item()) and err <= 2 * peer_err + 1e-5}
    # Equal work at fixed length: the same tokens as batches of the mean length.
    mean = 1 << round(math.log2(total / len(lengths)))
    batch = total // mean
    qf, kf, vf = (x.reshape(batch, mean, heads, hdim) for x in (q, k, v))
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (qf, kf, vf))
    ff = attention_flops([mean] * batch, [mean] * batch, heads, hdim)
    row["fixed_seqlen"] = mean
    row["hfa_fixed_tflops"] = ff / bench(lambda: hfa.flash_attn_func(qf, kf, vf, causal=True),
                                         args) / 1e9
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        row["cudnn_fixed_tflops"] = ff / bench(
            lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True), args) / 1e9
    row["hfa_over_fa2_varlen"] = row["hfa_tflops"] / row["fa2_varlen_tflops"]
    row["hfa_varlen_over_hfa_fixed"] = row["hfa_tflops"] / row["hfa_fixed_tflops"]
    return [row]


def cell_window(args, gen, cpu_gen, dtype):
    import torch

    import hfa
    heads, hdim, seqlen, window = 16, 128, 32768, 4096
    q, k, v = (torch.randn(1, seqlen, heads, hdim, dtype=dtype, device="cuda", generator=gen)
               for _ in range(3))

    def ours():
        return hfa.flash_attn_func(q, k, v, causal=True, window_size=(window, 0))

    with nan_filled_empty():
        out = ours()
    err = max_error(out[0], q[0], k[0], v[0], cpu_gen, causal=True, window_left=window)
    cu = torch.tensor([0, seqlen], dtype=torch.int32, device="cuda")
    q2, k2, v2 = (x[0] for x in (q, k, v))
    peer = fa2_varlen(q2, k2, v2, cu, cu, seqlen, seqlen, window_left=window)
    peer_err = max_error(peer, q2, k2, v2, cpu_gen, causal=True, window_left=window)
    f = attention_flops([seqlen], [seqlen], heads, hdim, window_left=window)
    t = bench(ours, args)
    t_fa2 = bench(lambda: fa2_varlen(q2, k2, v2, cu, cu, seqlen, seqlen, window_left=window), args)
    # The 4k causal reference: the same 32k tokens as 8 sequences of 4096.
    short = 4096
    qs, ks, vs = (x.reshape(seqlen // short, short, heads, hdim) for x in (q, k, v))
    t_short = bench(lambda: hfa.flash_attn_func(qs, ks, vs, causal=True), args)
    f_short = attention_flops([short] * (seqlen // short), [short] * (seqlen // short), heads, hdim)
    row = {"cell": "window", "case": {"seqlen": seqlen, "window": [window, 0], "heads": heads,
                                      "hdim": hdim},
           "hfa_ms": t, "fa2_ms": t_fa2, "hfa_tflops": f / t / 1e9, "fa2_tflops": f / t_fa2 / 1e9,
           "hfa_causal4k_ms": t_short, "hfa_causal4k_tflops": f_short / t_short / 1e9,
           "time_per_token_over_causal4k": t / t_short,
           "tflops_over_causal4k": (f / t) / (f_short / t_short),
           "hfa_over_fa2": t_fa2 / t,
           "hfa_max_err": err, "fa2_max_err": peer_err,
           "pass": bool(torch.isfinite(out).all().item()) and err <= 2 * peer_err + 1e-5}
    return [row]


def flex_softcap(q, k, v, causal, cap):
    """FlexAttention (Triton, compiled) with a softcap score_mod: what a PyTorch user runs for
    softcap today. Takes BHSD."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def softcap_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    block_mask = None
    if causal:
        s = q.shape[2]
        block_mask = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, s,
                                       s, device="cuda")
    compiled = torch.compile(flex_attention)
    return lambda: compiled(q, k, v, score_mod=softcap_mod, block_mask=block_mask)


def cell_option(args, gen, cpu_gen, dtype, option):
    """softcap or sinks against hfa's plain forward on the same inputs (and FlexAttention for
    softcap at hdim 128). Accuracy: §6's bound against peer_rows."""
    import torch

    import hfa
    rows = []
    cap = 30.0
    for hdim in (128, 256):
        seqlen, heads, batch = 8192, 2048 // hdim, 2
        q, k, v = (torch.randn(batch, seqlen, heads, hdim, dtype=dtype, device="cuda",
                               generator=gen) for _ in range(3))
        sinks = torch.randn(heads, dtype=torch.float32, device="cuda", generator=gen) * 2
        kwargs = {"softcap": cap} if option == "softcap" else {"learnable_sink": sinks}
        ref_kw = {"softcap": cap} if option == "softcap" else {"sinks": sinks}
        for causal in (False, True):
            def with_option():
                return hfa.flash_attn_func(q, k, v, causal=causal, **kwargs)

            def plain():
                return hfa.flash_attn_func(q, k, v, causal=causal)

            with nan_filled_empty():
                out = with_option()
            err = max_error(out[0], q[0], k[0], v[0], cpu_gen, causal=causal, **ref_kw)
            peer_err = max_error(None, q[0], k[0], v[0], cpu_gen, causal=causal, peer=True,
                                 **ref_kw)
            f = attention_flops([seqlen] * batch, [seqlen] * batch, heads, hdim, causal=causal)
            t, t_plain = bench(with_option, args), bench(plain, args)
            row = {"cell": option,
                   "case": {"hdim": hdim, "causal": causal, "seqlen": seqlen, "batch": batch,
                            "heads": heads, **({"softcap": cap} if option == "softcap"
                                               else {"sinks": True})},
                   "hfa_tflops": f / t / 1e9, "hfa_plain_tflops": f / t_plain / 1e9,
                   "over_plain": t_plain / t, "hfa_max_err": err, "peer_max_err": peer_err,
                   "pass": bool(torch.isfinite(out).all().item()) and err <= 2 * peer_err + 1e-5}
            if option == "softcap" and hdim == 128:
                try:
                    flex = flex_softcap(*(x.transpose(1, 2).contiguous() for x in (q, k, v)),
                                        causal, cap)
                    flex()
                    row["flex_tflops"] = f / bench(flex, args) / 1e9
                    row["hfa_over_flex"] = row["hfa_tflops"] / row["flex_tflops"]
                except Exception as e:  # noqa: BLE001 - a peer that cannot run is recorded
                    row["flex_error"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
            rows.append(row)
    return rows


def cell_packgqa(args, gen, cpu_gen, dtype):
    """Non-causal: SDPA's is_causal is top-left aligned, ours bottom-right; with 16 queries on
    8k keys the masks differ in work by < 0.2 %, so the cell compares the unmasked forward."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import hfa
    rows = []
    batch, heads, heads_kv, hdim, seqlen_k = 16, 32, 4, 128, 8192
    for seqlen_q in (1, 16, 64):
        q = torch.randn(batch, seqlen_q, heads, hdim, dtype=dtype, device="cuda", generator=gen)
        k, v = (torch.randn(batch, seqlen_k, heads_kv, hdim, dtype=dtype, device="cuda",
                            generator=gen) for _ in range(2))
        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))

        def ours():
            return hfa.flash_attn_func(q, k, v)

        with nan_filled_empty():
            out = ours()
        err = max_error(out[0], q[0], k[0], v[0], cpu_gen, causal=False)
        peer_err = max_error(None, q[0], k[0], v[0], cpu_gen, causal=False, peer=True)
        f = attention_flops([seqlen_q] * batch, [seqlen_k] * batch, heads, hdim, causal=False)
        kv_bytes = 2 * batch * seqlen_k * heads_kv * hdim * q.element_size()
        t = bench(ours, args)
        row = {"cell": "packgqa", "case": {"batch": batch, "seqlen_q": seqlen_q,
                                           "seqlen_k": seqlen_k, "heads": heads,
                                           "heads_kv": heads_kv, "hdim": hdim, "causal": False},
               "pack_gqa_env": os.environ.get("HFA_SM90_PACK_GQA", "default (on)"),
               "hfa_tflops": f / t / 1e9, "hfa_kv_gbps": kv_bytes / t / 1e6,
               "hfa_max_err": err, "peer_max_err": peer_err,
               "pass": bool(torch.isfinite(out).all().item()) and err <= 2 * peer_err + 1e-5}
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("fa2", SDPBackend.FLASH_ATTENTION)):
            def peer():
                return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
            try:
                with sdpa_kernel(backend):
                    peer()
                    tp = bench(peer, args)
                row[f"{name}_tflops"] = f / tp / 1e9
                row[f"hfa_over_{name}"] = tp / t
            except RuntimeError as e:
                row[f"{name}_error"] = (str(e).splitlines() or [""])[0]
        rows.append(row)
    return rows


def main(argv=None):
    args = parse_args(argv)
    import torch
    import triton

    import hfa
    warnings.filterwarnings("ignore")
    os.makedirs(args.out, exist_ok=True)
    dtype = torch.bfloat16
    now = datetime.datetime.now(datetime.timezone.utc)
    result = {"what": "fwd-features", "commit": git_commit(),
              "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "device": torch.cuda.get_device_name(),
              "versions": {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "cudnn": torch.backends.cudnn.version(),
                           "triton": triton.__version__, "hfa": hfa.version()},
              "settings": {"dtype": "bf16",
                           "do_bench": f"median, warmup {args.warmup} ms, rep {args.rep} ms",
                           "tflops": "4·d·h·visible (query, key) pairs, counted exactly"},
              "rows": []}
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    cpu_gen = torch.Generator()
    cpu_gen.manual_seed(0)
    cells = {"varlen": cell_varlen, "window": cell_window,
             "softcap": lambda *a: cell_option(*a, "softcap"),
             "sinks": lambda *a: cell_option(*a, "sinks"), "packgqa": cell_packgqa}
    t0 = time.time()
    for name in args.cells:
        try:
            rows = cells[name](args, gen, cpu_gen, dtype)
        except Exception as e:  # noqa: BLE001 - record it, keep the other cells
            rows = [{"cell": name, "error": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"}]
        for row in rows:
            result["rows"].append(row)
            shown = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()
                     if k != "case"}
            print(f"{name}: {json.dumps(row.get('case', {}))[:120]}\n    {shown}  "
                  f"[{time.time() - t0:.0f}s]", flush=True)
        torch.cuda.empty_cache()
    path = os.path.join(args.out, f"{now.strftime('%Y-%m-%d')}-fwd-{args.tag}.json")
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1)
    print(f"bench: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
