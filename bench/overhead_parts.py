#!/usr/bin/env python3
"""Where the host time of one eager call goes: each layer of hfa's torch path timed alone.

bench_overhead.py says what a call costs; this says why. Each row times a loop of calls of one
layer (bench_overhead.host_us: a loop with no synchronize, then one), from the whole entry
point down to what the C++ op does, beside torch's own costs of the same steps:
  - flash_attn_func (b=1, s=128, 8 heads, d=128, causal, as bench_overhead.py) through the
    plain op and, asking for the LSE, through hfa::fwd; each op called alone; its backward
    called directly (flash_attn_backward, no autograd engine); for scale, two
    torch.empty calls (what hfa::fwd allocates) and SDPA (its default backend);
  - flash_attn_with_kvcache (batch 8, paged 4k cache) through the plain op and, asking for
    the LSE, through hfa::fwd_kvcache; the Python resolution of the cache format
    (hfa._kvcache.resolve) alone, and hfa::fwd_kvcache with resolved arguments;
  - no-op custom ops built here with torch.utils.cpp_extension (if a compiler and ninja are
    present): hfa::fwd's schema (21 arguments) and a 3-argument one, each returning its input,
    so the dispatcher's and the argument parser's share is visible.
Prints a table; --out writes it as JSON (docs/design.md §5 shape, "what": "overhead-parts").
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
from bench_overhead import host_us, paged_decode  # noqa: E402

_NOOP_SOURCE = r"""
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
using at::Tensor;
using OptTensor = std::optional<Tensor>;
std::tuple<Tensor, Tensor> wide(const Tensor& q, const Tensor& k, const Tensor& v,
    const OptTensor&, const OptTensor&, int64_t, int64_t, std::optional<double>, bool, int64_t,
    int64_t, double, bool, const OptTensor&, const OptTensor&, const OptTensor&,
    const OptTensor&, const OptTensor&, const OptTensor&, int64_t, int64_t) { return {q, k}; }
std::tuple<Tensor, Tensor> narrow(const Tensor& q, const Tensor& k, const Tensor& v) {
  return {q, k};
}
std::tuple<Tensor, Tensor> wide_alloc(const Tensor& q, const Tensor& k, const Tensor& v,
    const OptTensor&, const OptTensor&, int64_t, int64_t, std::optional<double>, bool, int64_t,
    int64_t, double, bool, const OptTensor&, const OptTensor&, const OptTensor&,
    const OptTensor&, const OptTensor&, const OptTensor&, int64_t, int64_t) {
  return {at::empty(q.sizes(), q.options()),
          at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat))};
}
TORCH_LIBRARY(hfa_noop, m) {
  m.def("wide(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, "
        "int max_seqlen_q, int max_seqlen_k, float? softmax_scale, bool causal, "
        "int window_left, int window_right, float softcap, bool deterministic, "
        "Tensor? sinks=None, Tensor? seqused_q=None, Tensor? seqused_k=None, "
        "Tensor? q_descale=None, Tensor? k_descale=None, Tensor? v_descale=None, "
        "int descale_block_q=0, int descale_block_kv=0) -> (Tensor, Tensor)");
  m.def("wide_alloc(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, "
        "int max_seqlen_q, int max_seqlen_k, float? softmax_scale, bool causal, "
        "int window_left, int window_right, float softcap, bool deterministic, "
        "Tensor? sinks=None, Tensor? seqused_q=None, Tensor? seqused_k=None, "
        "Tensor? q_descale=None, Tensor? k_descale=None, Tensor? v_descale=None, "
        "int descale_block_q=0, int descale_block_kv=0) -> (Tensor, Tensor)");
  m.def("narrow(Tensor q, Tensor k, Tensor v) -> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(hfa_noop, CUDA, m) {
  m.impl("wide", wide);
  m.impl("wide_alloc", wide_alloc);
  m.impl("narrow", narrow);
}
"""


def noop_ops(torch):
    """torch.ops.hfa_noop after building it, or None with the reason printed."""
    try:
        from torch.utils import cpp_extension
        cpp_extension.load_inline("hfa_noop_ops", cpp_sources=_NOOP_SOURCE, functions=None,
                                  is_python_module=False, verbose=False)
        return torch.ops.hfa_noop
    except Exception as e:  # noqa: BLE001 (a diagnostic: say why and go on)
        print(f"overhead_parts: no-op ops not built: {benchlib.skip_reason(e)}", flush=True)
        return None


def parts(torch, hfa):
    import torch.nn.functional as F

    from hfa import _kvcache, _torch
    dev, bf16 = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device=dev, dtype=bf16, generator=g)

    q, k, v = (rand(1, 8, 128, 128).transpose(1, 2) for _ in range(3))
    qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
    fwd_args = (q, k, v, None, None, 0, 0, None, True, -1, -1, 0.0, False, None, None, None,
                None, None, None, 0, 0)
    rows = [
        ("flash_attn_func", lambda: hfa.flash_attn_func(q, k, v, causal=True)),
        ("flash_attn_func, return_attn_probs (hfa::fwd)",
         lambda: hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)),
        ("torch.ops.hfa.fwd.default, all arguments", lambda: _torch._fwd(*fwd_args)),
        ("torch.empty x2 (out, lse)", lambda: (torch.empty_like(q),
                                               torch.empty((1, 8, 128), device=dev))),
    ]
    out, lse = hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    dout = torch.randn_like(out)
    rows.append(("flash_attn_backward (hfa::bwd, no autograd)",
                 lambda: hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=True)))
    rows.append(("SDPA (its default backend)",
                 lambda: F.scaled_dot_product_attention(qs, ks, vs, is_causal=True)))

    ops = noop_ops(torch)
    if ops is not None:
        rows += [("no-op op, hfa::fwd's 21 arguments", lambda: ops.wide.default(*fwd_args)),
                 ("no-op op, 21 arguments, allocates out and lse",
                  lambda: ops.wide_alloc.default(*fwd_args)),
                 ("no-op op, 3 arguments", lambda: ops.narrow.default(q, k, v))]

    qd, kc, vc, table, seqlens = paged_decode(torch, rand, dev)
    _, kinds = _kvcache._torch_dtypes()

    def resolve():
        return _kvcache.resolve(qd, kc, vc, kind_of=lambda t: kinds.get(t.dtype, "other"),
                                full_seqlens=None, longest_sequence=None,
                                cache_seqlens=seqlens, page_table=table, k_scale=None,
                                k_global_scale=None, cu_seqlens_q=None, max_seqlen_q=None)

    cache_code, scale_code = resolve()[:2]
    kv_args = (qd, kc, vc, cache_code, scale_code, seqlens, table, None, None, None, None,
               None, None, None, None, True, None, 0, None, None, False, -1, -1, 0.0, 0, 0)
    if _torch.NATIVE and hasattr(_torch, "_attention"):
        rows.insert(3, ("torch.ops.hfa.attention.default (the plain op)",
                        lambda: _torch._attention(q, k, v, None, True, -1, -1, 0.0, False)))
    rows += [
        ("flash_attn_with_kvcache", lambda: hfa.flash_attn_with_kvcache(
            qd, kc, vc, cache_seqlens=seqlens, page_table=table)),
        ("flash_attn_with_kvcache, return_softmax_lse (hfa::fwd_kvcache)",
         lambda: hfa.flash_attn_with_kvcache(qd, kc, vc, cache_seqlens=seqlens,
                                             page_table=table, return_softmax_lse=True)),
        ("hfa._kvcache.resolve alone", resolve),
    ]
    if _torch.NATIVE:
        rows.append(("torch.ops.hfa.fwd_kvcache.default, resolved",
                     lambda: _torch._fwd_kvcache(*kv_args)))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--reps", type=int, default=15)
    a = p.parse_args()

    import torch

    import hfa
    from hfa import _torch
    now = benchlib.utc_now()
    a.dtype, a.tokens, a.head_budget, a.warmup, a.rep = "bf16", 0, 0, 0, 0
    result = benchlib.new_result("overhead-parts", now, a, accuracy="not checked (host time)",
                                 torch_ops=_torch.OPS)
    result["settings"]["do_bench"] = (f"host time, median of {a.reps} loops of {a.calls} calls")
    benchlib.announce(result)
    t0 = time.time()
    with torch.no_grad():
        for name, fn in parts(torch, hfa):
            us = host_us(fn, a.calls, a.reps)
            result["rows"].append({"case": {"part": name}, "metric": "us", "hfa": us})
            print(f"bench: {name:55s} {us:7.2f} us", flush=True)
    if a.out:
        md = benchlib.markdown("Host time by layer", result, ["part", "µs"],
                               [[r["case"]["part"], benchlib.fmt(r["hfa"])]
                                for r in result["rows"]])
        benchlib.write_results(os.path.join(a.out, f"{now:%Y-%m-%d}-overhead-parts"), result, md)
    print(f"bench: done in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
