"""Reference attention for the tests: the float64 oracle and a low-precision "peer" (design §6).

`attention(...)` computes the forward (out, lse) and, given dout, the backward (dq, dk, dv) by the
textbook formulas, one (sequence, head) at a time, on numpy arrays in FlashAttention's layouts:
fixed (batch, seqlen, heads, dim) or varlen (total, heads, dim) + cu_seqlens. With
compute=float64 it is the oracle; with compute=float32 and lowp=<input dtype> it rounds P and dS
to the input dtype before their matmuls and rounds the results, as a standard fp32-accumulating
GPU kernel does: that is the peer whose error sets the tolerance.
"""

import numpy as np


def round_bf16(x):
    """Round float values to bfloat16 (nearest even), returned as float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def round_to(x, lowp):
    """x rounded through dtype `lowp` ("float16", "bfloat16", "float32" or None = no rounding)."""
    if lowp is None:
        return x
    if lowp == "bfloat16":
        return round_bf16(x).astype(x.dtype)
    return x.astype(lowp).astype(x.dtype)


def visible(seqlen_q, seqlen_k, causal=False, window=(-1, -1)):
    """Boolean (seqlen_q, seqlen_k): may query i see key j? Bottom-right aligned (design §3)."""
    left, right = window
    if causal:
        right = 0  # FlashAttention: causal is a window with right = 0
    i = np.arange(seqlen_q)[:, None]
    j = np.arange(seqlen_k)[None, :]
    diag = i + seqlen_k - seqlen_q
    m = np.ones((seqlen_q, seqlen_k), dtype=bool)
    if left >= 0:
        m &= j >= diag - left
    if right >= 0:
        m &= j <= diag + right
    return m


def _head(q, k, v, do, scale, softcap, mask, compute, lowp, sink=None, p_rounding=None,
          rounded_sums=False):
    """One (sequence, head): q (sq, d), k (sk, d), v (sk, dv), do (sq, dv) or None. sink: the
    head's sink logit (one more term of the denominator, with no value), or None. p_rounding:
    what the unnormalized P goes through before P·V (default: rounding to lowp). rounded_sums:
    the denominator (and the LSE) sums the rounded P, as the FP8 forward's P·1 does."""
    s = (q @ k.T) * compute(scale)
    t = softcap * np.tanh(s / softcap) if softcap > 0 else s
    t = np.where(mask, t, -np.inf)
    seen = mask.any(axis=1)
    m = np.max(np.where(mask, t, -np.inf), axis=1, initial=-np.inf)
    if sink is not None:
        # The sink takes part in the max, so a row that sees no key has m = sink and l = 1.
        m = np.maximum(m, compute(sink))
        seen = np.ones_like(seen)
    m = np.where(seen, m, 0)
    p = np.where(mask, np.exp(t - m[:, None]), 0).astype(compute)
    # A kernel multiplies the unnormalized P (rounded to the input dtype) by V, divides at the end.
    rounded_p = round_to(p, lowp) if p_rounding is None else p_rounding(p).astype(compute)
    l = (rounded_p if rounded_sums else p).sum(axis=1)
    if sink is not None:
        l = l + np.exp(compute(sink) - m)
    l_safe = np.where(seen, l, 1)
    lse = np.where(seen, m + np.log(l_safe), -np.inf)
    o = (rounded_p @ v) / l_safe[:, None]
    res = {"out": o, "lse": lse}
    if do is not None:
        P = p / l_safe[:, None]
        Pr = round_to(P, lowp)
        dv = Pr.T @ do
        dp = do @ v.T
        # Kernels compute D = rowsum(dO∘O) from the stored output, i.e. O in the input dtype.
        delta = (do * round_to(o.astype(compute), lowp)).sum(axis=1)
        ds = P * (dp - delta[:, None])
        if softcap > 0:
            ds = ds * (1 - np.tanh(s / softcap) ** 2)
        ds = round_to(ds.astype(compute), lowp)
        res["dq"] = (ds @ k) * compute(scale)
        res["dk"] = (ds.T @ q) * compute(scale)
        res["dv"] = dv
        if sink is not None:  # dL/dsink = -sum_i P_sink,i * D_i
            res["dsink"] = -np.sum(np.exp(compute(sink) - lse) * delta)
    return res


def attention(q, k, v, dout=None, *, cu_seqlens_q=None, cu_seqlens_k=None, softmax_scale=None,
              causal=False, window=(-1, -1), softcap=0.0, compute=np.float64, lowp=None,
              sinks=None, seqused_q=None, seqused_k=None, p_rounding=None, rounded_sums=False):
    """dict with out, lse (and dq, dk, dv when dout is given, plus dsink with sinks), in
    `compute` precision, with out/dq/dk/dv rounded through `lowp`. lse is (batch, heads_q,
    seqlen_q) / (heads_q, total). sinks: (heads_q,) logits. seqused_q/k: used lengths per
    sequence; the rows beyond get out 0, lse -inf and zero gradients (what the package's
    wrappers return there). p_rounding: a function the unnormalized probabilities go through
    before P·V, for peers that feed them in another precision (FP8 kernels: e4m3), and
    rounded_sums whether the peer's denominator sums them as rounded (the FP8 forward's)."""
    varlen = cu_seqlens_q is not None
    if not varlen:  # treat a fixed batch as varlen over flattened rows
        b, sq, hq, d = q.shape
        sk = k.shape[1]
        cu_q = np.arange(b + 1) * sq
        cu_k = np.arange(b + 1) * sk
        q, k, v = (x.reshape((-1,) + x.shape[2:]) for x in (q, k, v))
        if dout is not None:
            dout = dout.reshape((-1,) + dout.shape[2:])
    else:
        cu_q, cu_k = np.asarray(cu_seqlens_q), np.asarray(cu_seqlens_k)
    q, k, v = (np.asarray(x, dtype=compute) for x in (q, k, v))
    if dout is not None:
        dout = np.asarray(dout, dtype=compute)
    hq, hk = q.shape[1], k.shape[1]
    group = hq // hk
    scale = softmax_scale if softmax_scale is not None else 1.0 / np.sqrt(q.shape[2])
    out = np.zeros(q.shape[:2] + (v.shape[2],), dtype=compute)
    lse = np.full((hq, q.shape[0]), -np.inf, dtype=compute)
    grads = dout is not None
    if grads:
        dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
        dsink = np.zeros(hq, dtype=compute)
    for bi in range(len(cu_q) - 1):
        qs, qe, ks, ke = cu_q[bi], cu_q[bi + 1], cu_k[bi], cu_k[bi + 1]
        if seqused_q is not None:
            qe = qs + int(seqused_q[bi])
        if seqused_k is not None:
            ke = ks + int(seqused_k[bi])
        mask = visible(qe - qs, ke - ks, causal, window)
        for h in range(hq):
            hk_ = h // group
            r = _head(q[qs:qe, h], k[ks:ke, hk_], v[ks:ke, hk_],
                      dout[qs:qe, h] if grads else None, scale, softcap, mask, compute, lowp,
                      None if sinks is None else sinks[h], p_rounding, rounded_sums)
            out[qs:qe, h] = r["out"]
            lse[h, qs:qe] = r["lse"]
            if grads:
                dq[qs:qe, h] = r["dq"]
                dk[ks:ke, hk_] += r["dk"]  # GQA: a kv head sums over its query heads
                dv[ks:ke, hk_] += r["dv"]
                if sinks is not None:
                    dsink[h] += r["dsink"]
    res = {"out": round_to(out, lowp), "lse": lse}
    if grads:
        res.update(dq=round_to(dq, lowp), dk=round_to(dk, lowp), dv=round_to(dv, lowp))
        if sinks is not None:
            res["dsink"] = dsink
    if not varlen:
        bsz = len(cu_q) - 1
        for name in ("out", "dq", "dk", "dv"):
            if name in res:
                res[name] = res[name].reshape((bsz, -1) + res[name].shape[1:])
        res["lse"] = res["lse"].reshape(hq, bsz, -1).transpose(1, 0, 2)
    return res


def max_err(a, b):
    """max |a - b| over finite entries; -inf must match -inf exactly (empty rows)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, f"shape {a.shape} != {b.shape}"
    assert not np.isnan(a).any(), "NaN in the result (an output left unwritten?)"
    ninf_a, ninf_b = np.isneginf(a), np.isneginf(b)
    assert (ninf_a == ninf_b).all(), "-inf (rows that see no key) at different places"
    fin = ~ninf_b
    return float(np.max(np.abs(a[fin] - b[fin]), initial=0.0))


def check_s6(name, ours, oracle, peer, floor=1e-5):
    """Design §6: max|ours − oracle| ≤ 2·max|peer − oracle| + floor."""
    err = max_err(ours, oracle)
    peer_err = max_err(peer, oracle)
    bound = 2 * peer_err + floor
    assert err <= bound, f"{name}: max err {err:.3g} > bound {bound:.3g} (peer err {peer_err:.3g})"


def lse_floor(oracle_lse):
    """The floor for LSE checks: 1e-5 relative to its largest magnitude. LSE is fp32 in every
    implementation, so its error grows with the scores (large inputs give LSE in the hundreds),
    where an absolute 1e-5 is below one fp32 ulp."""
    fin = np.abs(oracle_lse[np.isfinite(oracle_lse)])
    return 1e-5 * max(1.0, float(fin.max(initial=0.0)))
