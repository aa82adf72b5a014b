#!/usr/bin/env python3
"""hfa on the CPU with numpy: a causal GQA forward with its LSE, a varlen batch and a backward,
each checked against plain numpy. Exits 1 if any differs.

Runs with the installed package (pip install --no-build-isolation .), or in a checkout with
PYTHONPATH=python after a build; in both cases with a Python that has numpy.
"""

import sys

import numpy as np

import hfa


def reference(q, k, v, causal):
    """out and lse by the definition, in float64; k/v heads repeated for GQA."""
    group = q.shape[2] // k.shape[2]
    k, v = (np.repeat(x.astype(np.float64), group, axis=2) for x in (k, v))
    s = np.einsum("bihd,bjhd->bhij", q.astype(np.float64), k) / np.sqrt(q.shape[-1])
    if causal:  # bottom-right aligned: query i sees keys j <= i + seqlen_k - seqlen_q
        sq, sk = s.shape[-2:]
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    p = np.exp(s - lse[..., None])
    return np.einsum("bhij,bjhd->bihd", p, v), lse, p


def main():
    rng = np.random.default_rng(0)
    batch, seqlen_q, seqlen_k, heads_q, heads_kv, hdim = 2, 50, 70, 8, 2, 64
    q = rng.standard_normal((batch, seqlen_q, heads_q, hdim), dtype=np.float32)
    k = rng.standard_normal((batch, seqlen_k, heads_kv, hdim), dtype=np.float32)
    v = rng.standard_normal((batch, seqlen_k, heads_kv, hdim), dtype=np.float32)
    errors = {}

    # Fixed length: (batch, seqlen, heads, headdim); the LSE is (batch, heads_q, seqlen_q).
    out, lse = hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    want_out, want_lse, _ = reference(q, k, v, causal=True)
    errors["forward out"] = np.abs(out - want_out).max()
    errors["forward lse"] = np.abs(lse - want_lse).max()

    # Varlen: sequences of 20 and 30 queries packed as (total, heads, headdim).
    cu_q = np.array([0, 20, 50], dtype=np.int32)
    cu_k = np.array([0, 30, 70], dtype=np.int32)
    packed = hfa.flash_attn_varlen_func(q[0], k[0], v[0], cu_q, cu_k, max_seqlen_q=30,
                                        max_seqlen_k=40, causal=True)
    for b in range(2):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        want, _, _ = reference(q[None, 0, rows], k[None, 0, keys], v[None, 0, keys], causal=True)
        errors[f"varlen sequence {b}"] = np.abs(packed[rows] - want[0]).max()

    # Backward (no autograd in numpy: the gradients of a given dout), one kv head per q head.
    kh, vh = np.repeat(k, 4, axis=2), np.repeat(v, 4, axis=2)
    out, lse = hfa.flash_attn_func(q, kh, vh, causal=True, return_attn_probs=True)
    dout = rng.standard_normal(out.shape, dtype=np.float32)
    dq, dk, dv = hfa.flash_attn_backward(dout, q, kh, vh, out, lse, causal=True)
    _, _, p = reference(q, kh, vh, causal=True)
    do = dout.astype(np.float64)
    dp = np.einsum("bihd,bjhd->bhij", do, vh)
    ds = p * (dp - np.einsum("bihd,bihd->bhi", do, out)[..., None]) / np.sqrt(hdim)
    errors["backward dq"] = np.abs(dq - np.einsum("bhij,bjhd->bihd", ds, kh)).max()
    errors["backward dk"] = np.abs(dk - np.einsum("bhij,bihd->bjhd", ds, q)).max()
    errors["backward dv"] = np.abs(dv - np.einsum("bhij,bihd->bjhd", p, do)).max()

    print(f"hfa {hfa.__version__} ({hfa.library_path()})")
    for name, error in errors.items():
        print(f"  {name:20s} max abs error {error:.1e}")
    return 0 if max(errors.values()) < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
