#!/usr/bin/env python3
"""FP8 forward accuracy in FlashAttention-3's setup (paper Table 3): Q, K, V ~ N(0, 1) plus
0.1 % of entries N(0, 100) (outliers of σ 10); RMSE of the output against float64 attention on
the unquantized inputs, for per-tensor, per-head and per-block (128 rows) scaling, each with and
without the Hadamard rotation (q and k rotated with the same signs, v never), beside the bf16
forward. Small by default (batch 1, 4096 tokens, 8 heads, d 128) so that --device cpu runs too.

The FP8 forward takes e4m3 q, k, v with q_descale= / k_descale= / v_descale= (and
descale_block_q= / descale_block_kv= for per-block scales). Writes
<out>/<date>-fp8-accuracy.{json,md}.

    python3 bench/fp8_accuracy.py [--device cuda|cpu] [--seqlen 4096 --heads 8 --hdim 128]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchlib  # noqa: E402

SCALINGS = ["tensor", "head", "block"]
PAPER = {"fp8 per-tensor": 2.4e-2, "fp8 block + hadamard": 9.1e-3, "bf16/fp16": 1.9e-4}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(benchlib.REPO, "bench", "results"))
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--hdim", type=int, default=128)
    p.add_argument("--block", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def outlier_inputs(torch, shape, generator):
    """N(0, 1) with 0.1 % of the entries replaced by N(0, 100)."""
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    outliers = torch.rand(shape, generator=generator) < 1e-3
    return torch.where(outliers, 10 * torch.randn(shape, generator=generator,
                                                  dtype=torch.float64), x)


def reference(torch, q, k, v):
    """float64 softmax(q·kᵀ / sqrt(d))·v, (batch, seqlen, heads, d), head by head."""
    scale = q.shape[-1] ** -0.5
    out = torch.empty_like(q)
    for h in range(q.shape[2]):
        s = torch.einsum("bsd,btd->bst", q[:, :, h], k[:, :, h]) * scale
        out[:, :, h] = torch.softmax(s, dim=-1) @ v[:, :, h]
    return out


def rmse(torch, out, ref):
    return torch.sqrt(torch.mean((out.double().cpu() - ref) ** 2)).item()


def fp8_out(hfa, q, k, v, scaling, block, signs):
    """The FP8 forward's output with q, k rotated by `signs` (None: no rotation)."""
    kw = {"block": block}
    q8, qs = hfa.quantize_fp8(q, scaling, signs=signs, **kw)
    k8, ks = hfa.quantize_fp8(k, scaling, signs=signs, **kw)
    v8, vs = hfa.quantize_fp8(v, scaling, **kw)
    blocks = {"descale_block_q": block, "descale_block_kv": block} if scaling == "block" else {}
    return hfa.flash_attn_func(q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs, **blocks)


def main(argv=None):
    a = parse_args(argv)
    import torch

    import hfa
    now = benchlib.utc_now()
    g = torch.Generator().manual_seed(a.seed)
    shape = (a.batch, a.seqlen, a.heads, a.hdim)
    q, k, v = (outlier_inputs(torch, shape, g) for _ in range(3))
    t0 = time.time()
    ref = reference(torch, q, k, v)
    on = {name: t.float().to(a.device) for name, t in (("q", q), ("k", k), ("v", v))}
    signs = hfa.hadamard_signs(a.hdim, seed=a.seed, device=a.device)
    result = {"what": "fp8-accuracy", "commit": benchlib.git_commit(),
              "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
              "device": (torch.cuda.get_device_name() if a.device == "cuda" else "cpu"),
              "versions": {"torch": torch.__version__, "hfa": hfa.version()},
              "settings": {"shape": list(shape), "block": a.block, "seed": a.seed,
                           "inputs": "N(0,1) + 0.1% N(0,100) outliers", "reference": "float64",
                           "paper_table_3": PAPER},
              "rows": [], "skipped": []}
    bf16 = hfa.flash_attn_func(*(t.to(torch.bfloat16) for t in on.values()))
    result["rows"].append({"case": {"dtype": "bf16"}, "metric": "rmse",
                           "hfa": rmse(torch, bf16, ref)})
    for scaling in SCALINGS:
        for hadamard in (False, True):
            case = {"dtype": "e4m3", "scaling": scaling, "hadamard": hadamard,
                    "block": a.block if scaling == "block" else None}
            try:
                out = fp8_out(hfa, on["q"], on["k"], on["v"], scaling, a.block,
                              signs if hadamard else None)
                result["rows"].append({"case": case, "metric": "rmse",
                                       "hfa": rmse(torch, out, ref)})
            except Exception as e:  # noqa: BLE001  (a row says what failed; the run goes on)
                result["rows"].append({"case": case, "metric": "rmse", "hfa": None})
                result["skipped"].append({"case": case, "impl": "hfa",
                                          "reason": benchlib.skip_reason(e)})
    for r in result["rows"]:
        print(f"bench: {r['case']}: rmse {benchlib.sci(r['hfa'])}", flush=True)
    head = ["dtype", "scaling", "hadamard", "RMSE vs float64"]
    body = [[r["case"]["dtype"], r["case"].get("scaling", "–"),
             str(r["case"].get("hadamard", "–")), benchlib.sci(r["hfa"])]
            for r in result["rows"]]
    md = benchlib.markdown("FP8 forward accuracy (FlashAttention-3 Table 3 setup)", result, head,
                           body)
    stem = os.path.join(a.out, f"{now:%Y-%m-%d}-fp8-accuracy")
    return benchlib.conclude(result, benchlib.write_results(stem, result, md), t0, 0, False)


if __name__ == "__main__":
    sys.exit(main())
