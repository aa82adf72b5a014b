#!/usr/bin/env python3
"""Host time per call on the CPU backend, checkouts side by side in one run.

Tiny problems on one CPU thread (HFA_CPU_THREADS=1: no thread pool's wake-ups), where a call's
own work is a few microseconds and the rest is what the layers above the kernels cost, and empty
ones (batch 0), where nothing else is left: hfa's numpy entry points (flash_attn_func,
flash_attn_backward, flash_attn_with_kvcache with an append) and the C ABI's calls under them
(hfa_forward, hfa_backward, hfa_forward_kvcache, through ctypes on prebuilt structs); where
torch imports, flash_attn_func on torch tensors too (through the torch ops the package finds:
libhfa_torch beside the library, else its ctypes ops; HFA_TORCH_OPS chooses).

Each checkout given (a source tree with python/hfa, and its library at --library under it) is
timed in a child process of its own, one child per checkout a round, the checkouts interleaved
round by round (in turn reversed) so that a drift of the machine hits them alike. A round times
--reps loops of --calls calls of each case and keeps the median µs per call; the table gives the
median over --rounds rounds and their spread. Needs numpy.

  bench/cpu_host_cost.py BEFORE_CHECKOUT AFTER_CHECKOUT [--rounds 15]
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import timeit


def cases(hfa, _lib, np):
    """({name: a function that makes one call}, what the C calls write, to keep alive)."""
    rng = np.random.default_rng(0)

    def rand(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    q, k, v = rand(1, 4, 2, 64), rand(1, 8, 2, 64), rand(1, 8, 2, 64)
    out, lse = hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    dout = rand(*out.shape)
    q1, k_cache, v_cache = rand(2, 1, 4, 64), rand(2, 32, 2, 64), rand(2, 32, 2, 64)
    k_new, v_new = rand(2, 1, 2, 64), rand(2, 1, 2, 64)
    seqlens = np.array([5, 17], np.int32)  # the append writes at 5 and 17, the same every call
    q0, k0, v0 = rand(0, 4, 2, 64), rand(0, 8, 2, 64), rand(0, 8, 2, 64)
    calls = {
        "numpy flash_attn_func": lambda: hfa.flash_attn_func(q, k, v, causal=True),
        "numpy flash_attn_func (batch 0)": lambda: hfa.flash_attn_func(q0, k0, v0, causal=True),
        "numpy flash_attn_backward": lambda: hfa.flash_attn_backward(dout, q, k, v, out, lse,
                                                                     causal=True),
        "numpy flash_attn_with_kvcache": lambda: hfa.flash_attn_with_kvcache(
            q1, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=seqlens, causal=True),
    }

    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        tq0, tk0, tv0 = (torch.from_numpy(a) for a in (q0, k0, v0))
        calls["torch flash_attn_func"] = lambda: hfa.flash_attn_func(tq, tk, tv, causal=True)
        calls["torch flash_attn_func (batch 0)"] = lambda: hfa.flash_attn_func(tq0, tk0, tv0,
                                                                               causal=True)
        tcu_q, tcu_k = (torch.tensor([0, n], dtype=torch.int32) for n in (4, 8))
        tq1, tk_cache, tv_cache, tk_new, tv_new, tseqlens = (
            torch.from_numpy(a) for a in (q1, k_cache, v_cache, k_new, v_new, seqlens))
        calls["torch flash_attn_varlen_func"] = lambda: hfa.flash_attn_varlen_func(
            tq[0], tk[0], tv[0], tcu_q, tcu_k, 4, 8, causal=True)
        calls["torch flash_attn_with_kvcache"] = lambda: hfa.flash_attn_with_kvcache(
            tq1, tk_cache, tv_cache, k=tk_new, v=tv_new, cache_seqlens=tseqlens, causal=True)

    # The C ABI on views made once: what libhfa's entry points cost below the front end.
    def view(a):
        return _lib.make_tensor(a.ctypes.data, _lib.F32, a.shape,
                                [s // a.itemsize for s in a.strides])

    # Function objects of their own, without the argument types a package version may declare on
    # its copies (ctypes' checks of them would be timed too).
    lib = _lib.library()
    hfa_forward, hfa_backward, hfa_forward_kvcache = (
        lib[name] for name in ("hfa_forward", "hfa_backward", "hfa_forward_kvcache"))
    ref = ctypes.byref
    t = {name: view(a) for name, a in (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse),
                                       ("dout", dout), ("q1", q1), ("k_cache", k_cache),
                                       ("v_cache", v_cache), ("k_new", k_new), ("v_new", v_new),
                                       ("seqlens", seqlens))}
    t["seqlens"].dtype = _lib.I32
    empty = {name: view(a) for name, a in (("q", q0), ("k", k0), ("v", v0), ("out", q0))}
    grads = [np.empty_like(a) for a in (q, k, v)]
    dq, dk, dv = (view(g) for g in grads)
    out1, lse1 = np.empty_like(q1), np.empty((2, 4, 1), np.float32)
    out1_t, lse1_t = view(out1), view(lse1)
    options = _lib.make_options(causal=True)
    kv_options = _lib.make_kvcache_options(cache_seqlens=t["seqlens"], k_new=t["k_new"],
                                           v_new=t["v_new"], causal=True)
    keep = (grads, out1, lse1)  # what the C calls write: the caller keeps it alive
    calls.update({
        "C hfa_forward": lambda: hfa_forward(ref(t["q"]), ref(t["k"]), ref(t["v"]),
                                                 ref(t["out"]), ref(t["lse"]), ref(options)),
        "C hfa_forward (batch 0)": lambda: hfa_forward(
            ref(empty["q"]), ref(empty["k"]), ref(empty["v"]), ref(empty["out"]), None,
            ref(options)),
        "C hfa_backward": lambda: hfa_backward(
            ref(t["dout"]), ref(t["q"]), ref(t["k"]), ref(t["v"]), ref(t["out"]),
            ref(t["lse"]), ref(dq), ref(dk), ref(dv), ref(options)),
        "C hfa_forward_kvcache": lambda: hfa_forward_kvcache(
            ref(t["q1"]), ref(t["k_cache"]), ref(t["v_cache"]), ref(out1_t), ref(lse1_t),
            ref(kv_options)),
    })
    for name, call in calls.items():  # a call that fails would time its error path
        status = call()
        if isinstance(status, int) and status != _lib.SUCCESS:
            raise RuntimeError(f"{name}: {lib.hfa_last_error().decode()}")
    return calls, keep


def child(calls_per_loop, reps):
    """One round in this process: {case: median µs per call}, as JSON on stdout."""
    import numpy as np

    import hfa
    from hfa import _lib
    calls, kept = cases(hfa, _lib, np)  # kept: the arrays the C calls write, alive till the end
    result = {}
    for name, call in calls.items():
        timer = timeit.Timer(call)
        timer.timeit(number=calls_per_loop // 10)  # warm-up
        loops = timer.repeat(repeat=reps, number=calls_per_loop)
        result[name] = statistics.median(loops) / calls_per_loop * 1e6
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="*", help="source trees, each with python/hfa")
    parser.add_argument("--library", default="build/cpu/src/libhfa.so",
                        help="the library's path under each checkout")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed loop")
    parser.add_argument("--reps", type=int, default=5, help="timed loops per case and round")
    parser.add_argument("--threads", default="1", help="HFA_CPU_THREADS of the children")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.calls, args.reps)
    if not args.checkouts:
        parser.error("name at least one checkout")

    rounds = {c: [] for c in args.checkouts}
    for r in range(args.rounds):
        order = args.checkouts if r % 2 == 0 else args.checkouts[::-1]
        for checkout in order:
            env = dict(os.environ, PYTHONPATH=os.path.join(checkout, "python"),
                       HFA_LIBRARY=os.path.join(checkout, args.library),
                       PYTHONDONTWRITEBYTECODE="1", HFA_CPU_THREADS=args.threads)
            run = subprocess.run([sys.executable, __file__, "--child", "--calls", str(args.calls),
                                  "--reps", str(args.reps)], env=env, capture_output=True,
                                 text=True, check=True)
            rounds[checkout].append(json.loads(run.stdout))
    names = list(rounds[args.checkouts[0]][0])
    width = max(len(n) for n in names)
    print(f"µs per call: the median of {args.rounds} rounds [their least, their most]")
    print(f"{'':<{width}}  " + "  ".join(f"{os.path.basename(os.path.normpath(c)):>22}"
                                         for c in args.checkouts))
    for name in names:
        cells = []
        for c in args.checkouts:
            values = [r[name] for r in rounds[c]]
            cells.append(f"{statistics.median(values):7.2f} [{min(values):5.2f}, "
                         f"{max(values):5.2f}]")
        print(f"{name:<{width}}  " + "  ".join(f"{cell:>22}" for cell in cells))


if __name__ == "__main__":
    main()
