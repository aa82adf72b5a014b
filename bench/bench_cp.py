#!/usr/bin/env python3
"""Context parallelism on one GPU: what a single H200 can show of hfa.distributed.

- merge: the merge of a ring step (an fp32 accumulator takes in a bf16 partial result, in place),
  fused (hfa.merge_partials, which hfa.distributed.merge_attn_partial calls on a GPU) beside
  the same merge in torch (merge_attn_partial_torch, the fallback), in GB/s of the bytes it must
  move, beside a plain device copy of an fp32 tensor; the two results' largest difference.
- merge_n: the fused merge of N = 2, 4, 8 fp32 partials (a ring's steps kept apart, merged once
  at the end) into a bf16 output and its LSE, in GB/s of the bytes it must move.
- ring_split: the cost of cutting one attention into P ring steps, before any communication:
  one hfa call over the whole sequence ÷ the emulated ring (hfa.distributed.emulated: the P
  ranks' steps and merges, on this one GPU), forward and forward + backward, P = 2, 4, 8,
  causal (zigzag) and not, --tokens-per-rank per step. 1.0 = splitting is free; this is the
  ceiling of the ring's efficiency on P GPUs. case.receive "none": the same without the
  emulation's receive copies (on P GPUs those are the transfer, beside the compute).
- ring_steps: where ring_split's causal loss is, the forward's step kinds of one rank timed alone
  (the diagonal: a causal call over the rank's own zigzag chunk; a full call of all its queries
  over half of an earlier rank's keys; a full call of its second half over a later rank's keys),
  in TFLOP/s beside the one call over the whole sequence; and the ring's forward with the
  kernels' time alone (the step kinds, each times the number of ranks' steps of its kind) as a
  ratio like ring_split's: the ceiling the kernels set before any merge. The same again for
  forward + backward (case.mode "fwdbwd"): each step kind's forward and backward kernels.
- prefill_1m: one causal forward of a Llama-8B-shaped layer (32 query / 8 KV heads, d128) over
  --prefill-tokens tokens in one call, its time and TFLOP/s.

JSON (docs/design.md §5): {"what": "cp", ..., "rows": [{"case": {"test", ...}, "metric":
"GBps" | "ratio" | "tflops", "hfa": x, ...}]}.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

HEADS, KV_HEADS, HDIM = 32, 8, 128
TESTS = ("merge", "ring_split", "ring_steps", "prefill_1m")


def _rand(torch, g, *shape, dtype=None):
    return torch.randn(*shape, device="cuda", generator=g).to(dtype or torch.float32)


def merge_rows(torch, tokens, reps):
    """The ring step's merge, fused and in torch, then the fused N-way merges (each row's tensors
    freed before the next row's are made)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    copy = copy_rate(torch, g, tokens, reps)
    rows = [ring_merge_row(torch, g, tokens, reps, copy)]
    rows += [merge_n_row(torch, g, n, tokens, reps, copy) for n in (2, 4, 8)]
    torch.cuda.empty_cache()
    return rows


def copy_rate(torch, g, tokens, reps):
    """GB/s (read + write) of a plain device copy of an fp32 (1, tokens, HEADS, HDIM) tensor."""
    src = _rand(torch, g, 1, tokens, HEADS, HDIM)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / benchlib.event_seconds(lambda: dst.copy_(src), 1, reps) / 1e9


def ring_merge_row(torch, g, tokens, reps, copy):
    from hfa.distributed import ring
    out = _rand(torch, g, 1, tokens, HEADS, HDIM)
    part = _rand(torch, g, 1, tokens, HEADS, HDIM, dtype=torch.bfloat16)
    lse, lse_part = _rand(torch, g, 1, HEADS, tokens), _rand(torch, g, 1, HEADS, tokens)
    if not ring._fused_merge_takes(out, lse, part, lse_part):
        raise SystemExit("bench: hfa.merge_partials does not take the ring's tensors here")
    # out read and written (fp32), out_part read (bf16), lse read and written, lse_part read.
    moved = out.numel() * (4 + 2 + 4) + lse.numel() * 4 * 3
    row = {"case": {"test": "merge", "tokens": tokens, "heads": HEADS, "hdim": HDIM},
           "metric": "GBps"}
    once = []  # each merge once from the same state: their difference
    for name, merge in (("hfa", ring.merge_attn_partial), ("torch", ring.merge_attn_partial_torch)):
        once.append((out.clone(), lse.clone()))
        merge(*once[-1], part, lse_part)
        state = out.clone(), lse.clone()
        row[name] = moved / benchlib.event_seconds(lambda: merge(*state, part, lse_part), 1,
                                                   reps) / 1e9
    row["copy"] = copy
    row["max_diff"] = max((a - b).abs().max().item() for a, b in zip(*once))
    return row


def merge_n_row(torch, g, n, tokens, reps, copy):
    import hfa
    outs = [_rand(torch, g, 1, tokens, HEADS, HDIM) for _ in range(n)]
    lses = [_rand(torch, g, 1, HEADS, tokens) for _ in range(n)]
    out = torch.empty_like(outs[0], dtype=torch.bfloat16)
    lse = torch.empty_like(lses[0])
    # Each partial's out and lse read (fp32), out written (bf16), lse written.
    moved = n * (out.numel() + lse.numel()) * 4 + out.numel() * 2 + lse.numel() * 4
    seconds = benchlib.event_seconds(lambda: hfa.merge_partials(outs, lses, out=out, lse=lse), 1,
                                     reps)
    return {"case": {"test": "merge_n", "partials": n, "tokens": tokens, "heads": HEADS,
                     "hdim": HDIM, "out": "bf16"},
            "metric": "GBps", "hfa": moved / seconds / 1e9, "copy": copy}


def split_rows(torch, hfa, world, causal, tokens_per_rank, reps):
    from hfa.distributed import emulated, zigzag_shard
    seqlen = world * tokens_per_rank
    g = torch.Generator(device="cuda").manual_seed(world)

    def rand(heads, grad):
        return torch.randn(1, seqlen, heads, HDIM, device="cuda", dtype=torch.bfloat16,
                           generator=g).requires_grad_(grad)

    q, k, v = rand(HEADS, True), rand(KV_HEADS, True), rand(KV_HEADS, True)
    dout = torch.randn_like(q)
    layout = "zigzag" if causal else "contiguous"

    def shards(t):
        if layout == "zigzag":
            return [zigzag_shard(t.detach(), r, world).requires_grad_() for r in range(world)]
        return [c.detach().contiguous().requires_grad_() for c in t.chunk(world, 1)]

    qs, ks, vs = shards(q), shards(k), shards(v)
    douts = [d.contiguous() for d in (zigzag_shard(dout, r, world) for r in range(world))] \
        if layout == "zigzag" else [c.contiguous() for c in dout.chunk(world, 1)]

    def single_fwd():
        with torch.no_grad():
            hfa.flash_attn_func(q, k, v, causal=causal)

    def ring_fwd():
        with torch.no_grad():
            emulated.ring_flash_attn_func(qs, ks, vs, causal=causal, layout=layout)

    def single_fwdbwd():
        out = hfa.flash_attn_func(q, k, v, causal=causal)
        torch.autograd.grad(out, (q, k, v), dout)

    def ring_fwdbwd():
        outs = emulated.ring_flash_attn_func(qs, ks, vs, causal=causal, layout=layout)
        torch.autograd.grad(outs, qs + ks + vs, douts)

    from hfa.distributed import ring as ring_module
    rows = []
    for mode, single, ring in (("fwd", single_fwd, ring_fwd),
                               ("fwdbwd", single_fwdbwd, ring_fwdbwd)):
        one = benchlib.event_seconds(single, 1, reps)
        # A step's result reaches (O, LSE) through a merge pass, or in the forward's epilogue
        # (with the backward's D computed once): ring.ACCUMULATE_IN_KERNEL. And with the merge
        # pass, once more without the emulation's receive copies (emulated.SHIFT_COPIES), which
        # on P GPUs are the transfer running beside the compute.
        for in_kernel, copies in ((False, True), (True, True), (False, False)):
            ring_module.ACCUMULATE_IN_KERNEL = in_kernel
            emulated.SHIFT_COPIES = copies
            split = benchlib.event_seconds(ring, 1, reps)
            rows.append({"case": {"test": "ring_split", "world": world, "causal": causal,
                                  "layout": layout, "tokens_per_rank": tokens_per_rank,
                                  "heads": HEADS, "kv_heads": KV_HEADS, "hdim": HDIM,
                                  "mode": mode, "merge": "in-kernel" if in_kernel else "pass",
                                  "receive": "copy" if copies else "none"},
                         "metric": "ratio", "hfa": one / split, "single_s": one,
                         "ring_s": split})
    ring_module.ACCUMULATE_IN_KERNEL = False
    emulated.SHIFT_COPIES = True
    return rows


def step_rows(torch, hfa, world, tokens_per_rank, reps, mode):
    """The causal zigzag ring's step kinds, timed alone (see the module's ring_steps)."""
    from hfa.distributed import ring, zigzag_shard
    seqlen, half = world * tokens_per_rank, tokens_per_rank // 2
    g = torch.Generator(device="cuda").manual_seed(world)
    q, k, v = (torch.randn(1, seqlen, heads, HDIM, device="cuda", dtype=torch.bfloat16,
                           generator=g) for heads in (HEADS, KV_HEADS, KV_HEADS))
    local = [zigzag_shard(t, 0, world) for t in (q, k, v)]

    def call(q, k, v, causal):
        """One attention as the mode times it: the forward, or the forward and its backward."""
        if mode == "fwd":  # no input requires a gradient: no graph is recorded
            return lambda: hfa.flash_attn_func(q, k, v, causal=causal)
        leaves = [t.detach().contiguous().requires_grad_() for t in (q, k, v)]
        dout = torch.randn_like(leaves[0])
        return lambda: torch.autograd.grad(hfa.flash_attn_func(*leaves, causal=causal),
                                           leaves, dout)

    def seconds(q_rows, k_rows, causal):
        step = call(local[0][:, q_rows], local[1][:, k_rows], local[2][:, k_rows], causal)
        return benchlib.event_seconds(step, 1, reps)

    single = benchlib.event_seconds(call(q, k, v, True), 1, reps)
    # (name, query rows, key rows, causal, how many of the ring's P^2 steps are of this kind):
    # ring._step_block's three answers under a causal zigzag layout.
    full, first, second = slice(None), slice(0, half), slice(half, None)
    kinds = [("diagonal", full, full, True, world),
             ("earlier keys", full, first, False, world * (world - 1) // 2),
             ("later keys", second, full, False, world * (world - 1) // 2)]
    assert ring._step_block(0, 0, tokens_per_rank, True, "zigzag") == (full, full, True)
    rows, kernels = [], 0.0
    work = 1.0 if mode == "fwd" else 3.5  # the backward's FLOPs are 2.5 times the forward's
    total = work * benchlib.flops(1, HEADS, seqlen, seqlen, HDIM, HDIM, True)
    case = {"test": "ring_steps", "mode": mode, "world": world,
            "tokens_per_rank": tokens_per_rank, "heads": HEADS, "kv_heads": KV_HEADS,
            "hdim": HDIM}
    for name, q_rows, k_rows, causal, count in kinds:
        sq = len(range(tokens_per_rank)[q_rows])
        sk = len(range(tokens_per_rank)[k_rows])
        s = seconds(q_rows, k_rows, causal)
        kernels += count * s
        rows.append({"case": {**case, "step": name, "seqlen_q": sq, "seqlen_k": sk,
                              "causal": causal, "steps": count}, "metric": "tflops",
                     "hfa": work * benchlib.flops(1, HEADS, sq, sk, HDIM, HDIM, causal) / s / 1e12,
                     "seconds": s})
    rows.append({"case": {**case, "step": "one call", "seqlen_q": seqlen, "seqlen_k": seqlen,
                          "causal": True, "steps": 1}, "metric": "tflops",
                 "hfa": total / single / 1e12, "seconds": single})
    rows.append({"case": {**case, "step": "kernels alone"}, "metric": "ratio",
                 "hfa": single / kernels, "single_s": single, "ring_s": kernels})
    return rows


def prefill_row(torch, hfa, tokens):
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(1, tokens, HEADS, HDIM, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, tokens, KV_HEADS, HDIM, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn_like(k)
    warm = 65536
    hfa.flash_attn_func(q[:, :warm], k[:, :warm], v[:, :warm], causal=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = hfa.flash_attn_func(q, k, v, causal=True)
    torch.cuda.synchronize()
    s = time.perf_counter() - t0
    flops = benchlib.flops(1, HEADS, tokens, tokens, HDIM, HDIM, True)
    finite = bool(torch.isfinite(out).all())
    return {"case": {"test": "prefill_1m", "tokens": tokens, "heads": HEADS,
                     "kv_heads": KV_HEADS, "hdim": HDIM, "causal": True},
            "metric": "tflops", "hfa": flops / s / 1e12, "seconds": s, "finite": finite}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(benchlib.REPO, "bench", "results"))
    p.add_argument("--tokens-per-rank", type=int, default=16384)
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--prefill-tokens", type=int, default=1 << 20)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--causal", choices=["both", "true", "false"], default="both",
                   help="ring_split's masks")
    p.add_argument("--tests", nargs="+", choices=TESTS, default=list(TESTS),
                   help="what to measure (default: all; merge includes merge_n)")
    a = p.parse_args()
    if a.tokens_per_rank % 2:
        p.error("--tokens-per-rank: the zigzag layout needs an even number")

    import torch

    import hfa
    now, t0 = benchlib.utc_now(), time.time()
    a.dtype, a.tokens, a.head_budget = "bf16", a.prefill_tokens, HEADS * HDIM
    a.warmup, a.rep = 1, a.reps
    result = benchlib.new_result("cp", now, a, accuracy="not checked here (tests: "
                                 "python/tests/test_distributed.py)", worlds=a.worlds)
    result["settings"]["do_bench"] = f"CUDA events, median of {a.reps} after 1 warm-up"
    benchlib.announce(result)
    for row in merge_rows(torch, a.tokens_per_rank * 8, 10) if "merge" in a.tests else []:
        result["rows"].append(row)
        torch_merge = f", torch {row['torch']:.0f} GB/s" if "torch" in row else ""
        print(f"bench: {row['case']['test']} {row['case'].get('partials', 2)} partials: fused "
              f"{row['hfa']:.0f} GB/s{torch_merge}, copy {row['copy']:.0f} GB/s", flush=True)
    masks = {"both": (False, True), "true": (True,), "false": (False,)}[a.causal]
    for causal in masks if "ring_split" in a.tests else ():
        for world in a.worlds:
            for row in split_rows(torch, hfa, world, causal, a.tokens_per_rank, a.reps):
                result["rows"].append(row)
                print(f"bench: ring split P={world} causal={int(causal)} {row['case']['mode']:6s}"
                      f" {row['case']['merge']:9s} receive {row['case']['receive']:4s}"
                      f" single {row['single_s'] * 1e3:.1f} ms, ring {row['ring_s'] * 1e3:.1f} "
                      f"ms, ratio {row['hfa']:.3f}", flush=True)
            torch.cuda.empty_cache()
    for mode in ("fwd", "fwdbwd") if "ring_steps" in a.tests else ():
        for world in a.worlds:
            for row in step_rows(torch, hfa, world, a.tokens_per_rank, a.reps, mode):
                result["rows"].append(row)
                c = row["case"]
                value = (f"ratio {row['hfa']:.3f}" if row["metric"] == "ratio"
                         else f"{row['hfa']:.0f} TFLOP/s x {c['steps']}")
                print(f"bench: ring steps {mode:6s} P={world} {c['step']:13s} {value}", flush=True)
            torch.cuda.empty_cache()
    if "prefill_1m" in a.tests:
        row = prefill_row(torch, hfa, a.prefill_tokens)
        result["rows"].append(row)
        print(f"bench: prefill {a.prefill_tokens} tokens causal: {row['seconds']:.2f} s, "
              f"{row['hfa']:.0f} TFLOP/s", flush=True)
    head = ["test", "case", "metric", "hfa", "beside"]
    body = []
    for r in result["rows"]:
        c = dict(r["case"])
        test = c.pop("test")
        beside = {"merge": lambda: f"torch {r['torch']:.0f}, copy {r['copy']:.0f}, max diff "
                                   f"{r['max_diff']:.1e}",
                  "merge_n": lambda: f"copy {r['copy']:.0f}",
                  "ring_split": lambda: f"single {r['single_s'] * 1e3:.1f} ms, ring "
                                        f"{r['ring_s'] * 1e3:.1f} ms",
                  "ring_steps": lambda: (f"single {r['single_s'] * 1e3:.1f} ms, steps "
                                         f"{r['ring_s'] * 1e3:.1f} ms" if "ring_s" in r
                                         else f"{r['seconds'] * 1e3:.2f} ms"),
                  "prefill_1m": lambda: f"{r['seconds']:.2f} s"}[test]()
        body.append([test, ", ".join(f"{k} {v}" for k, v in c.items()), r["metric"],
                     f"{r['hfa']:.3f}" if r["metric"] == "ratio" else f"{r['hfa']:.0f}", beside])
    md = benchlib.markdown("Context parallelism on one GPU", result, head, body)
    written = benchlib.write_results(os.path.join(a.out, f"{now:%Y-%m-%d}-cp"), result, md)
    return benchlib.conclude(result, written, t0, 0, False)


if __name__ == "__main__":
    sys.exit(main())
