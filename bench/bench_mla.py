#!/usr/bin/env python3
"""MLA decode benchmark: hfa.flash_mla_with_kvcache on the GPU (sm90's MLA decode kernel) beside
FlashMLA's flash_mla_with_kvcache when its module imports (HFA_FLASHMLA_DIR on sys.path, or
installed), the same inputs: q (b, s_q, h_q, 576), a bf16 cache of 64-token pages (shuffled
block table), v the first 512 columns of the same rows.

FlashMLA's counting (tests/test_flash_mla_dense_decoding.py): FLOP = 2·h_q·s_q·Σ s_k·(576+512),
bytes = Σ s_k·576·2 + b·s_q·h_q·(576+512)·2. Times are CUDA-event medians with the L2 flushed
(a 256 MB write) before every call, the whole call (kernel + combine) for both.
Accuracy: hfa's out against FlashMLA's (max |diff|), when both ran.

    python3 bench/bench_mla.py [--batch 64 128 --seqlens 1024 4096 16384 --heads 16 64 128
                                --seqlen-q 1 2 --ragged]
"""

import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

D_QK, D_V, PAGE = 576, 512, 64


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, nargs="+", default=[64, 128])
    p.add_argument("--seqlens", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument("--heads", type=int, nargs="+", default=[16, 64, 128])
    p.add_argument("--seqlen-q", type=int, nargs="+", default=[1, 2])
    p.add_argument("--ragged", action="store_true",
                   help="lengths max(normal(s_k, s_k/2), s_q) as FlashMLA's test, not fixed")
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--json", help="write the rows here too")
    return p.parse_args(argv)


def flashmla():
    """FlashMLA's module, or None."""
    where = os.environ.get("HFA_FLASHMLA_DIR")
    if where:
        sys.path.insert(0, where)
    try:
        import flash_mla  # noqa: PLC0415
        return flash_mla
    except ImportError:
        return None


def inputs(torch, batch, seqlen_k, heads, seqlen_q, ragged, dtype, gen):
    if ragged:
        lengths = torch.normal(float(seqlen_k), seqlen_k / 2, (batch,), generator=gen)
        lengths = lengths.clamp(min=seqlen_q).int()
    else:
        lengths = torch.full((batch,), seqlen_k, dtype=torch.int32)
    pages_each = (lengths + PAGE - 1) // PAGE
    max_pages = int(pages_each.max())
    total = int(pages_each.sum())
    order = torch.randperm(total, generator=gen).int()
    table = torch.zeros(batch, max_pages, dtype=torch.int32)
    start = 0
    for b in range(batch):
        n = int(pages_each[b])
        table[b, :n] = order[start:start + n]
        start += n
    cache = torch.randn(total, PAGE, 1, D_QK, generator=gen).to(dtype)
    q = torch.randn(batch, seqlen_q, heads, D_QK, generator=gen).to(dtype)
    return q.cuda(), cache.cuda(), table.cuda(), lengths.cuda()


def timed(torch, call, reps):
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    call()  # warm-up (and plan / schedule)
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    times.sort()
    return times[len(times) // 2]


def main(argv=None):
    args = parse_args(argv)
    import torch  # noqa: PLC0415
    import hfa  # noqa: PLC0415
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    peer = flashmla()
    gen = torch.Generator().manual_seed(0)
    rows = []
    print(f"{'b':>4} {'s_k':>6} {'h_q':>4} {'s_q':>3} | {'hfa us':>8} {'TB/s':>6} {'TFLOP/s':>8} | "
          f"{'FlashMLA us':>11} {'TB/s':>6} {'TFLOP/s':>8} | {'ratio':>5} {'max|diff|':>9}")
    for batch in args.batch:
        for seqlen_k in args.seqlens:
            for heads in args.heads:
                for seqlen_q in args.seqlen_q:
                    q, cache, table, lengths = inputs(torch, batch, seqlen_k, heads, seqlen_q,
                                                      args.ragged, dtype, gen)
                    causal = seqlen_q > 1
                    keys = int(lengths.sum())
                    flop = 2 * heads * seqlen_q * keys * (D_QK + D_V)
                    nbytes = keys * D_QK * 2 + batch * seqlen_q * heads * (D_QK + D_V) * 2
                    meta = hfa.get_mla_metadata()[0]
                    result = {}

                    def ours():
                        result["hfa"] = hfa.flash_mla_with_kvcache(q, cache, table, lengths, D_V,
                                                                   meta, causal=causal)
                    t_hfa = timed(torch, ours, args.reps)
                    t_peer = None
                    if peer is not None:
                        sched, splits = peer.get_mla_metadata(lengths, seqlen_q * heads, 1)

                        def theirs():
                            result["flashmla"] = peer.flash_mla_with_kvcache(
                                q, cache, table, lengths, D_V, sched, splits, causal=causal)
                        t_peer = timed(torch, theirs, args.reps)
                    diff = None
                    if "flashmla" in result:
                        diff = float((result["hfa"][0].float() - result["flashmla"][0].float())
                                     .abs().max())
                    row = {"batch": batch, "seqlen_k": seqlen_k, "heads": heads,
                           "seqlen_q": seqlen_q, "ragged": args.ragged, "hfa_s": t_hfa,
                           "flashmla_s": t_peer, "flop": flop, "bytes": nbytes,
                           "max_abs_diff": diff}
                    rows.append(row)
                    peer_cols = (f"{t_peer * 1e6:11.1f} {nbytes / t_peer / 1e12:6.2f} "
                                 f"{flop / t_peer / 1e12:8.1f}" if t_peer else f"{'-':>11} "
                                 f"{'-':>6} {'-':>8}")
                    ratio = f"{t_peer / t_hfa:5.2f}" if t_peer else f"{'-':>5}"
                    print(f"{batch:4d} {seqlen_k:6d} {heads:4d} {seqlen_q:3d} | "
                          f"{t_hfa * 1e6:8.1f} {nbytes / t_hfa / 1e12:6.2f} "
                          f"{flop / t_hfa / 1e12:8.1f} | {peer_cols} | {ratio} "
                          f"{'-' if diff is None else f'{diff:9.2e}'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
