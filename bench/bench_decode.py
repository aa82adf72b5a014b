#!/usr/bin/env python3
"""Decode (KV-cache) benchmark: hfa's split-KV kernel over a paged cache in bf16, FP8, NVFP4 and
MXFP4, beside PyTorch SDPA (cuDNN and FLASH = FlashAttention-2 backends) on a contiguous bf16
cache, one process, the same query.

Issue 5's setting: batch 64, 32 query heads / 8 kv heads, headdim 128, one new token, cache
lengths 8k and 32k, page size 64, block tables shuffled, pages in (slot, head, dim) order
(--layout hnd: (head, slot, dim), as the peers' cache). triton.testing.do_bench medians.
GB/s counts the K and V bytes (scales included) an implementation reads: hfa reads each kv-head
once for its 4 query heads; an SDPA backend that cannot do GQA is handed K/V expanded to 32
heads and its bytes count the expansion (the JSON says which). tokens/s = batch / time.
Accuracy: hfa's output for sequences 0 and batch-1, all heads, against float64 attention over
the dequantized cache, computed on the GPU: max |error| / max |reference output|.

Writes <out>/<date>-decode-<tag>.{json,md}.

    python3 bench/bench_decode.py --out DIR [--seqlens 8192 32768 --formats bf16 fp8 nvfp4 mxfp4]
"""

import argparse
import datetime
import json
import math
import os
import sys
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import fmt, git_commit, ratio  # noqa: E402  (one copy of the house helpers)

FORMATS = ["bf16", "fp8", "fp8_per_token", "nvfp4", "mxfp4"]
PEERS = ["cudnn", "fa2"]
E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--heads-q", type=int, default=32)
    p.add_argument("--heads-kv", type=int, default=8)
    p.add_argument("--hdim", type=int, default=128)
    p.add_argument("--seqlens", type=int, nargs="+", default=[8192, 32768])
    p.add_argument("--page-size", type=int, default=64)
    p.add_argument("--layout", choices=["nhd", "hnd"], default="nhd",
                   help="memory order of a page: nhd (page, slot, head, dim), FlashAttention's and "
                        "vLLM's, or hnd (page, head, slot, dim), each head's page contiguous as "
                        "in the SDPA peers' (b, h, s, d) cache; hfa reads both through strides")
    p.add_argument("--formats", nargs="+", choices=FORMATS, default=FORMATS)
    p.add_argument("--peers", nargs="*", choices=PEERS, default=PEERS)
    p.add_argument("--num-splits", type=int, default=0)
    p.add_argument("--warmup", type=float, default=25)
    p.add_argument("--rep", type=float, default=100)
    p.add_argument("--tag", default="bf16q")
    return p.parse_args(argv)


def bytes_per_token(fmt_name, heads_kv, d):
    """K+V bytes per cached token (all kv-heads), scales included."""
    row = {"bf16": 2 * d, "fp8": d, "fp8_per_token": d + 4, "nvfp4": d // 2 + d // 16,
           "mxfp4": d // 2 + d // 32}[fmt_name]
    return 2 * heads_kv * row


def in_layout(x, layout):
    """x (pages, slots, heads, ...) with the same values, stored in the layout's order."""
    return x.transpose(1, 2).contiguous().transpose(1, 2) if layout == "hnd" else x


def make_cache(fmt_name, pages, page, heads_kv, d, gen, layout="nhd"):
    """(k_cache, v_cache, kwargs for flash_attn_with_kvcache, dequantize(side) -> float64 pages)."""
    k, v, extra, deq = make_nhd_cache(fmt_name, pages, page, heads_kv, d, gen)
    per_slot = {name: t for name, t in extra.items() if t.dim() >= 3}  # scales per token or block
    extra.update({name: in_layout(t, layout) for name, t in per_slot.items()})
    return in_layout(k, layout), in_layout(v, layout), extra, deq


def make_nhd_cache(fmt_name, pages, page, heads_kv, d, gen):
    import torch
    dev = "cuda"
    shape = (pages, page, heads_kv, d)

    def normal(s):
        return torch.randn(s, device=dev, generator=gen)

    if fmt_name == "bf16":
        k, v = normal(shape).bfloat16(), normal(shape).bfloat16()
        return k, v, {}, lambda side, scales: side.double()
    if fmt_name in ("fp8", "fp8_per_token"):
        per_token = fmt_name == "fp8_per_token"
        scale_shape = (pages, page, heads_kv) if per_token else (heads_kv,)
        sides, scales = [], []
        for _ in range(2):
            x = normal(shape)
            amax = x.abs().amax(dim=-1) if per_token else x.abs().amax(dim=(0, 1, 3))
            s = (amax / 448.0).clamp_min(1e-12).float()
            codes = (x / (s[..., None] if per_token else s[None, None, :, None])).to(
                torch.float8_e4m3fn)
            sides.append(codes)
            scales.append(s.reshape(scale_shape).contiguous())
        k, v = sides
        extra = {"k_scale": scales[0], "v_scale": scales[1]}

        def deq(side, s):
            x = side.double()
            return x * (s.double()[..., None] if per_token else s.double()[None, None, :, None])
        return k, v, extra, deq
    # FP4: any byte is a valid pair of E2M1 codes.
    nv = fmt_name == "nvfp4"
    block = 16 if nv else 32
    packed = (pages, page, heads_kv, d // 2)
    k = torch.randint(0, 256, packed, device=dev, dtype=torch.uint8, generator=gen)
    v = torch.randint(0, 256, packed, device=dev, dtype=torch.uint8, generator=gen)
    sshape = (pages, page, heads_kv, d // block)
    if nv:
        ks = (torch.rand(sshape, device=dev, generator=gen) * 2 + 0.25).to(torch.float8_e4m3fn)
        vs = (torch.rand(sshape, device=dev, generator=gen) * 2 + 0.25).to(torch.float8_e4m3fn)
        ks, vs = ks.view(torch.uint8), vs.view(torch.uint8)
        glob = torch.tensor([0.5], device=dev)
        extra = {"k_scale": ks, "v_scale": vs, "k_global_scale": glob, "v_global_scale": glob}
    else:
        ks = torch.randint(124, 131, sshape, device=dev, dtype=torch.uint8, generator=gen)
        vs = torch.randint(124, 131, sshape, device=dev, dtype=torch.uint8, generator=gen)
        extra = {"k_scale": ks, "v_scale": vs}
    table = torch.tensor(E2M1_VALUES + [-x for x in E2M1_VALUES], device=dev,
                         dtype=torch.float64)

    def deq(side, scales):
        lo = table[(side & 0xF).long()]
        hi = table[(side >> 4).long()]
        vals = torch.stack([lo, hi], dim=-1).flatten(-2)  # element 2i in the low nibble
        if nv:
            sc = scales.view(torch.float8_e4m3fn).double() * float(glob.item())
        else:
            sc = torch.pow(2.0, scales.double() - 127)
        return vals * sc.repeat_interleave(block, dim=-1)
    return k, v, extra, deq


def run_format(args, fmt_name, seqlen, q, gen):
    import torch
    import triton.testing

    import hfa
    b, hkv, d, page = args.batch, args.heads_kv, args.hdim, args.page_size
    pages_per_seq = seqlen // page
    pages = b * pages_per_seq
    k, v, extra, deq = make_cache(fmt_name, pages, page, hkv, d, gen, args.layout)
    table = torch.randperm(pages, device="cuda", generator=gen).int().reshape(b, pages_per_seq)
    lengths = torch.full((b,), seqlen, dtype=torch.int32, device="cuda")

    def call():
        return hfa.flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths, page_table=table,
                                           num_splits=args.num_splits, return_softmax_lse=True,
                                           **extra)
    out = call()[0]
    torch.cuda.synchronize()
    ms = triton.testing.do_bench(call, warmup=args.warmup, rep=args.rep, return_mode="median")
    nbytes = bytes_per_token(fmt_name, hkv, d) * b * seqlen
    # Accuracy on the first and last sequences.
    scale = 1.0 / math.sqrt(d)
    errs = []
    for bi in (0, b - 1):
        idx = table[bi].long()
        ks_, vs_ = extra.get("k_scale"), extra.get("v_scale")
        if ks_ is not None and ks_.dim() > 1:
            kd, vd = deq(k[idx], ks_[idx]), deq(v[idx], vs_[idx])
        else:
            kd, vd = deq(k[idx], ks_), deq(v[idx], vs_)
        kd = kd.reshape(-1, hkv, d)[:seqlen]
        vd = vd.reshape(-1, hkv, d)[:seqlen]
        qb = q[bi]  # (1, Hq, d)
        group = qb.shape[1] // hkv
        s = torch.einsum("hd,shd->hs", qb[0].double(), kd.repeat_interleave(group, dim=1)) * scale
        ref = torch.einsum("hs,shd->hd", torch.softmax(s, dim=-1), vd.repeat_interleave(group, dim=1))
        errs.append((out[bi, 0].double() - ref).abs().max().item() / ref.abs().max().item())
        del kd, vd, s, ref
    del k, v, extra
    torch.cuda.empty_cache()
    return {"ms": ms, "gbps": nbytes / ms / 1e6, "tokens_per_s": b / ms * 1e3,
            "bytes": nbytes, "max_err_rel_to_max_out": max(errs), "finite": bool(torch.isfinite(out).all())}


def run_peer(args, peer, seqlen, q, gen):
    import torch
    import torch.nn.functional as F
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel
    b, hq, hkv, d = args.batch, args.heads_q, args.heads_kv, args.hdim
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}[peer]
    qt = q.transpose(1, 2).contiguous()  # (b, hq, 1, d)
    k = torch.randn((b, hkv, seqlen, d), device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn((b, hkv, seqlen, d), device="cuda", dtype=torch.bfloat16, generator=gen)
    note = "GQA (enable_gqa)"
    kv_heads_read = hkv
    try:
        with sdpa_kernel([backend]):
            fn = lambda: F.scaled_dot_product_attention(qt, k, v, enable_gqa=True)  # noqa: E731
            fn()
            torch.cuda.synchronize()
    except RuntimeError:
        k = k.repeat_interleave(hq // hkv, dim=1).contiguous()
        v = v.repeat_interleave(hq // hkv, dim=1).contiguous()
        kv_heads_read = hq
        note = f"no GQA in this backend: K/V expanded to {hq} heads (bytes counted as read)"
        with sdpa_kernel([backend]):
            fn = lambda: F.scaled_dot_product_attention(qt, k, v)  # noqa: E731
            fn()
            torch.cuda.synchronize()
    with sdpa_kernel([backend]):
        ms = triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep, return_mode="median")
    nbytes = 2 * kv_heads_read * 2 * d * b * seqlen
    del k, v
    torch.cuda.empty_cache()
    return {"ms": ms, "gbps": nbytes / ms / 1e6, "tokens_per_s": b / ms * 1e3, "bytes": nbytes,
            "note": note}


def write_markdown(path, result):
    lines = [f"# Decode, {result['device']}, commit {result['commit']}, {result['date']}", "",
             "batch {batch}, heads {heads_q}/{heads_kv}, hdim {hdim}, page {page_size}, "
             "layout {layout}".format(
                 **result["settings"]), "",
             "| seqlen | impl | ms | GB/s | tokens/s | ÷cuDNN GB/s | ÷FA2 GB/s | ÷hfa bf16 tokens/s"
             " | max err / max out |", "|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        if "gbps" not in row:
            lines.append(f"| {row['seqlen']} | {row['impl']} | {row['error']} | | | | | | |")
            continue
        lines.append(f"| {row['seqlen']} | {row['impl']} | {row['ms']:.3f} | {row['gbps']:.0f} | "
                     f"{row['tokens_per_s']:.0f} | {row.get('vs_cudnn_gbps') or '–'} | "
                     f"{row.get('vs_fa2_gbps') or '–'} | {row.get('vs_bf16_tokens') or '–'} | "
                     f"{row.get('max_err_rel_to_max_out', '–')} |")
    lines += ["", "| cache | bytes per cached token (all kv-heads, K+V, scales) | vs bf16 |",
              "|---|---|---|"]
    for name, n in result["bytes_per_token"].items():
        lines.append(f"| {name} | {n} | {n / result['bytes_per_token']['bf16']:.3f} |")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def main(argv=None):
    args = parse_args(argv)
    import torch
    import triton

    import hfa
    warnings.filterwarnings("ignore")
    os.makedirs(args.out, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    result = {"what": "decode", "commit": git_commit(),
              "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "device": torch.cuda.get_device_name(),
              "versions": {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "cudnn": torch.backends.cudnn.version(), "triton": triton.__version__,
                           "hfa": hfa.version()},
              "settings": {"batch": args.batch, "heads_q": args.heads_q,
                           "heads_kv": args.heads_kv, "hdim": args.hdim,
                           "page_size": args.page_size, "layout": args.layout,
                           "num_splits": args.num_splits,
                           "do_bench": f"median, warmup {args.warmup} ms, rep {args.rep} ms",
                           "q": "bf16, seqlen_q 1"},
              "bytes_per_token": {f: bytes_per_token(f, args.heads_kv, args.hdim)
                                  for f in FORMATS},
              "rows": []}
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    t0 = time.time()
    for seqlen in args.seqlens:
        q = torch.randn((args.batch, 1, args.heads_q, args.hdim), device="cuda",
                        dtype=torch.bfloat16, generator=gen)
        rows = {}
        for peer in args.peers:
            try:
                rows[peer] = run_peer(args, peer, seqlen, q, gen)
            except Exception as e:  # noqa: BLE001 - record and keep going
                rows[peer] = {"error": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"}
        for f in args.formats:
            try:
                rows[f"hfa_{f}"] = run_format(args, f, seqlen, q, gen)
            except Exception as e:  # noqa: BLE001
                rows[f"hfa_{f}"] = {"error": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"}
        for impl, r in rows.items():
            r.update({"seqlen": seqlen, "impl": impl})
            if "gbps" in r:
                for peer in PEERS:
                    if "gbps" in rows.get(peer, {}):
                        r[f"vs_{peer}_gbps"] = ratio(r["gbps"], rows[peer]["gbps"])
                if "tokens_per_s" in rows.get("hfa_bf16", {}):
                    r["vs_bf16_tokens"] = ratio(r["tokens_per_s"], rows["hfa_bf16"]["tokens_per_s"])
            result["rows"].append(r)
            print(f"seqlen {seqlen} {impl:18s} " + (
                f"{r['ms']:.3f} ms {r['gbps']:.0f} GB/s {r['tokens_per_s']:.0f} tok/s "
                f"cudnn x{r.get('vs_cudnn_gbps')} fa2 x{r.get('vs_fa2_gbps')} "
                f"bf16 tok x{r.get('vs_bf16_tokens')} err {r.get('max_err_rel_to_max_out', '-')}"
                if "gbps" in r else r["error"]) + f"  [{time.time() - t0:.0f}s]", flush=True)
    stem = os.path.join(args.out, f"{now.strftime('%Y-%m-%d')}-decode-{args.tag}")
    with open(stem + ".json", "w") as fh:
        json.dump(result, fh, indent=1)
    write_markdown(stem + ".md", result)
    print(f"bench: wrote {stem}.json, {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
