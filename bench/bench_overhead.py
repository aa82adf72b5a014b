#!/usr/bin/env python3
"""Host time per call: hfa's Python entry points beside PyTorch SDPA's flash and cuDNN backends.

What a call costs the CPU, not the GPU: a loop of --calls calls is timed with no synchronize
inside (the problems are tiny, so the GPU keeps up and the queue never fills), then one
synchronize ends it; the median over --reps loops, in microseconds per call. Modes: "eager"
(plain calls), "compile" (the same function under torch.compile(fullgraph=True)) and "graph"
(one call captured in a CUDA graph, replayed). Calls (issue 11's targets: <= 15 us eager,
<= 25 us compiled):
  - flash_attn_func: b=1, s=128, 8 heads, d=128, bf16, causal; SDPA on the same (b, h, s, d)
  - flash_attn_func_backward: autograd's backward of that call (retain_graph); SDPA's likewise
  - flash_attn_varlen_func: 3 sequences of 100 queries, d=64, 12 / 4 heads; SDPA runs the
    padded batch (no varlen API: its row says what a user of it pays)
  - flash_attn_with_kvcache: batch 8, one query each, a paged 4k-token cache (page 64), d=128,
    32 / 8 heads; SDPA attends over the contiguous cache
  - one_pointwise_op (and its backward): torch's cheapest call, x * 2 on a (1, 128, 8, 128)
    bf16 tensor, in each mode: what any implementation pays there before its own work (key
    "torch"), the floor under the targets

JSON (design §5): {"what": "overhead", ..., "rows": [{"case": {"call", "mode"}, "metric": "us",
"hfa": x, "sdpa_flash": y, "sdpa_cudnn": z}]}, null where an implementation cannot run.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402


def host_us(fn, calls, reps):
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def paged_decode(torch, rand, dev, batch=8, pages_per_seq=64, page=64):
    """(q, k_cache, v_cache, page_table, cache_seqlens): one query each over a paged 4k-token
    cache (page 64, 32 / 8 heads, d 128), the KV-cache call of these benchmarks."""
    kc, vc = rand(batch * pages_per_seq, page, 8, 128), rand(batch * pages_per_seq, page, 8, 128)
    table = torch.arange(batch * pages_per_seq, dtype=torch.int32,
                         device=dev).view(batch, pages_per_seq)
    seqlens = torch.full((batch,), 4000, dtype=torch.int32, device=dev)
    return rand(batch, 1, 32, 128), kc, vc, table, seqlens


def problems(torch, hfa):
    """call -> (hfa's fn, SDPA's fn) over fresh inputs; each fn makes one call."""
    import torch.nn.functional as F
    dev, bf16 = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape, grad=False):
        return torch.randn(*shape, device=dev, dtype=bf16, generator=g).requires_grad_(grad)

    # flash_attn_func and its backward; SDPA takes (b, h, s, d): the same memory, transposed.
    q, k, v = (rand(1, 8, 128, 128).transpose(1, 2) for _ in range(3))
    qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
    fwd = (lambda: hfa.flash_attn_func(q, k, v, causal=True),
           lambda: F.scaled_dot_product_attention(qs, ks, vs, is_causal=True))
    qg, kg, vg = (rand(1, 128, 8, 128, grad=True) for _ in range(3))
    out_h = hfa.flash_attn_func(qg, kg, vg, causal=True)
    dout = torch.randn_like(out_h)
    qgs, kgs, vgs = (rand(1, 8, 128, 128, grad=True) for _ in range(3))

    def sdpa_backward():
        out_s = F.scaled_dot_product_attention(qgs, kgs, vgs, is_causal=True)
        return lambda: out_s.backward(dout.transpose(1, 2), retain_graph=True)

    bwd = (lambda: out_h.backward(dout, retain_graph=True), sdpa_backward)

    # flash_attn_varlen_func: 3 x 100 tokens, GQA 12 / 4, d 64.
    lens = [100, 100, 100]
    cu = torch.tensor([0, 100, 200, 300], dtype=torch.int32, device=dev)
    qv, kv_, vv = rand(300, 12, 64), rand(300, 4, 64), rand(300, 4, 64)
    qp, kp, vp = rand(3, 12, 100, 64), rand(3, 4, 100, 64), rand(3, 4, 100, 64)
    varlen = (lambda: hfa.flash_attn_varlen_func(qv, kv_, vv, cu, cu, max(lens), max(lens)),
              lambda: F.scaled_dot_product_attention(qp, kp, vp, enable_gqa=True))

    # flash_attn_with_kvcache: batch 8 decode over a paged 4k cache.
    qd, kc, vc, table, seqlens = paged_decode(torch, rand, dev)
    batch = qd.shape[0]
    kd, vd = rand(batch, 8, 4096, 128), rand(batch, 8, 4096, 128)
    qds = qd.transpose(1, 2)
    decode = (lambda: hfa.flash_attn_with_kvcache(qd, kc, vc, cache_seqlens=seqlens,
                                                  page_table=table),
              lambda: F.scaled_dot_product_attention(qds, kd, vd, enable_gqa=True))
    return {"flash_attn_func": fwd, "flash_attn_func_backward": bwd,
            "flash_attn_varlen_func": varlen, "flash_attn_with_kvcache": decode}


def floors(torch):
    """The floor rows' calls: x * 2 and the autograd backward of it (key "torch")."""
    x = torch.randn(1, 128, 8, 128, device="cuda", dtype=torch.bfloat16)
    xg = x.clone().requires_grad_(True)
    y = xg * 2
    g = torch.randn_like(y)
    return {"one_pointwise_op": lambda: x * 2,
            "one_pointwise_op_backward": lambda: y.backward(g, retain_graph=True)}


def in_graph(torch, fn):
    """A CUDA graph of one call of fn, and its replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up on the side stream, as capture wants
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def measure(torch, fn, mode, calls, reps):
    if mode == "compile":
        fn = torch.compile(fn, fullgraph=True)
    elif mode == "graph":
        fn = in_graph(torch, fn)
    return host_us(fn, calls, reps)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(benchlib.REPO, "bench", "results"))
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--modes", nargs="+", default=["eager", "compile", "graph"],
                   choices=["eager", "compile", "graph"])
    a = p.parse_args()

    import torch
    from torch.nn.attention import SDPBackend

    import hfa
    from hfa import _torch
    now = benchlib.utc_now()
    a.dtype, a.tokens, a.head_budget = "bf16", 0, 0
    a.warmup = a.rep = 0
    result = benchlib.new_result("overhead", now, a, accuracy="not checked (host time only)",
                                 calls_per_loop=a.calls, loops=a.reps, torch_ops=_torch.OPS)
    result["settings"]["do_bench"] = (f"host time, median of {a.reps} loops of {a.calls} calls "
                                      f"(perf_counter, one synchronize after each loop)")
    benchlib.announce(result)
    peers = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}
    t0 = time.time()
    for call, (ours, sdpa) in problems(torch, hfa).items():
        for mode in a.modes:
            if call == "flash_attn_func_backward" and mode != "eager":
                continue  # a backward alone is not a function to compile or capture here
            row = {"case": {"call": call, "mode": mode}, "metric": "us"}
            try:
                row["hfa"] = measure(torch, ours, mode, a.calls, a.reps)
            except Exception as e:  # noqa: BLE001  (a row says what failed; the run goes on)
                row["hfa"] = None
                result["skipped"].append({"case": row["case"], "impl": "hfa",
                                          "reason": benchlib.skip_reason(e)})
            for name, backend in peers.items():
                try:
                    with benchlib.under(backend):
                        fn = sdpa() if call == "flash_attn_func_backward" else sdpa
                        row[name] = measure(torch, fn, mode, a.calls, a.reps)
                except Exception as e:  # noqa: BLE001
                    row[name] = None
                    result["skipped"].append({"case": row["case"], "impl": name,
                                              "reason": benchlib.skip_reason(e)})
            result["rows"].append(row)
            print(f"bench: {call:26s} {mode:8s} hfa {benchlib.fmt(row['hfa'])} us, flash "
                  f"{benchlib.fmt(row['sdpa_flash'])}, cudnn {benchlib.fmt(row['sdpa_cudnn'])}",
                  flush=True)
    for call, fn in floors(torch).items():
        for mode in a.modes:
            if call.endswith("_backward") and mode != "eager":
                continue
            row = {"case": {"call": call, "mode": mode}, "metric": "us",
                   "torch": measure(torch, fn, mode, a.calls, a.reps)}
            result["rows"].append(row)
            print(f"bench: {call:26s} {mode:8s} torch {benchlib.fmt(row['torch'])} us", flush=True)
    head = ["call", "mode", "hfa µs", "SDPA flash µs", "SDPA cuDNN µs", "torch, one op µs"]
    body = [[r["case"]["call"], r["case"]["mode"]] +
            [benchlib.fmt(r.get(k)) for k in ("hfa", "sdpa_flash", "sdpa_cudnn", "torch")]
            for r in result["rows"]]
    md = benchlib.markdown("Host time per call", result, head, body)
    stem = os.path.join(a.out, f"{now:%Y-%m-%d}-overhead")
    written = benchlib.write_results(stem, result, md)
    return benchlib.conclude(result, written, t0, 0, False)


if __name__ == "__main__":
    sys.exit(main())
