"""ALiBi (alibi_slopes, a row of the options' description taken by its name with no parameter of
its own) through the numpy front end: forward, backward and the KV cache against attention
written out densely here in float64, and its rejections.

FlashAttention-2's definition: score(i, j) = softcap(scale·q_i·k_j) - slope·|i + sk - sq - j|,
i and j counted within the sequence, sq and sk its used lengths.
"""

import numpy as np
import pytest

import hfa

RNG = np.random.default_rng(35)


def dense(q, k, v, slopes, *, causal=False, window=(-1, -1), softcap=0.0, scale=None):
    """(out, lse) of one sequence: q (sq, hq, d), k / v (sk, hk, d), slopes (hq,), float64."""
    sq, hq, d = q.shape
    sk, hk = k.shape[:2]
    scale = 1 / np.sqrt(d) if scale is None else scale
    out = np.zeros((sq, hq, v.shape[-1]))
    lse = np.full((hq, sq), -np.inf)
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    diagonal = i + sk - sq
    right = 0 if causal else window[1]
    seen = np.ones((sq, sk), bool)
    if right >= 0:
        seen &= j <= diagonal + right
    if window[0] >= 0:
        seen &= j >= diagonal - window[0]
    for h in range(hq):
        kh, vh = k[:, h // (hq // hk)].astype(np.float64), v[:, h // (hq // hk)].astype(np.float64)
        s = q[:, h].astype(np.float64) @ kh.T * scale
        if softcap:
            s = softcap * np.tanh(s / softcap)
        s = np.where(seen, s - slopes[h] * np.abs(diagonal - j), -np.inf)
        for r in range(sq):
            if seen[r].any():
                m = s[r].max()
                p = np.exp(s[r] - m)
                out[r, h] = p / p.sum() @ vh
                lse[h, r] = m + np.log(p.sum())
    return out, lse


def slopes_for(batch, heads, per_sequence):
    shape = (batch, heads) if per_sequence else (heads,)
    return RNG.uniform(0.02, 0.8, shape).astype(np.float32)


def slope_rows(slopes, b):
    return slopes[b] if slopes.ndim == 2 else slopes


def normal(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("per_sequence", [False, True])
@pytest.mark.parametrize("causal, window, softcap", [
    (False, (-1, -1), 0.0), (True, (-1, -1), 3.0), (False, (9, 2), 0.0), (True, (4, -1), 2.0)])
def test_forward_matches_dense(per_sequence, causal, window, softcap):
    q, k, v = normal(2, 13, 4, 64), normal(2, 21, 2, 64), normal(2, 21, 2, 64)
    slopes = slopes_for(2, 4, per_sequence)
    out, lse = hfa.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap,
                                   return_attn_probs=True, alibi_slopes=slopes)
    for b in range(2):
        want_out, want_lse = dense(q[b], k[b], v[b], slope_rows(slopes, b), causal=causal,
                                   window=window, softcap=softcap)
        np.testing.assert_allclose(out[b], want_out, atol=2e-5)
        np.testing.assert_allclose(lse[b], want_lse, atol=2e-5)
    # The slopes take part: the same call without them differs.
    plain = hfa.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap)
    assert np.abs(plain - out).max() > 1e-2


def test_varlen_and_seqused_count_within_each_sequence():
    lengths_q, lengths_k = [7, 0, 30], [19, 5, 11]
    used_q = np.array([5, 0, 30], np.int32)
    used_k = np.array([19, 2, 9], np.int32)
    cu_q = np.cumsum([0] + lengths_q).astype(np.int32)
    cu_k = np.cumsum([0] + lengths_k).astype(np.int32)
    q, k, v = normal(cu_q[-1], 6, 64), normal(cu_k[-1], 2, 64), normal(cu_k[-1], 2, 64)
    slopes = slopes_for(3, 6, True)
    out, lse = hfa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, None, None, causal=True,
                                          seqused_q=used_q, seqused_k=used_k,
                                          return_attn_probs=True, alibi_slopes=slopes)
    for b in range(3):
        rows = slice(cu_q[b], cu_q[b] + used_q[b])
        keys = slice(cu_k[b], cu_k[b] + used_k[b])
        want_out, want_lse = dense(q[rows], k[keys], v[keys], slopes[b], causal=True)
        np.testing.assert_allclose(out[rows], want_out, atol=2e-5)
        np.testing.assert_allclose(lse[:, rows], want_lse, atol=2e-5)


def dense_loss(q, k, v, dout, slopes, **options):
    return float((dense(q, k, v, slopes, **options)[0] * dout).sum())


@pytest.mark.parametrize("options", [dict(causal=True, softcap=2.0), dict(window=(3, 1))])
def test_backward_matches_finite_differences(options):
    q, k, v = (normal(1, 6, 2, 64, dtype=np.float64) for _ in range(3))
    k, v = k[:, :5, :1], v[:, :5, :1]  # seqlen_k 5 < seqlen_q 6, one kv-head (GQA)
    dout = normal(1, 6, 2, 64, dtype=np.float64)
    slopes = np.array([0.3, 0.9], np.float32)
    as32 = [a.astype(np.float32) for a in (dout, q, k, v)]
    out, lse = hfa.flash_attn_func(*as32[1:], window_size=options.get("window", (-1, -1)),
                                   causal=options.get("causal", False),
                                   softcap=options.get("softcap", 0.0), return_attn_probs=True,
                                   alibi_slopes=slopes)
    grads = hfa.flash_attn_backward(*as32, out, lse, window_size=options.get("window", (-1, -1)),
                                    causal=options.get("causal", False),
                                    softcap=options.get("softcap", 0.0), alibi_slopes=slopes)
    step = 1e-6
    for name, x, grad in zip("qkv", (q, k, v), grads):
        numeric = np.zeros_like(x)
        for index in np.ndindex(x.shape):
            saved = x[index]
            x[index] = saved + step
            up = dense_loss(q[0], k[0], v[0], dout[0], slopes, **options)
            x[index] = saved - step
            down = dense_loss(q[0], k[0], v[0], dout[0], slopes, **options)
            x[index] = saved
            numeric[index] = (up - down) / (2 * step)
        np.testing.assert_allclose(grad, numeric, atol=2e-4, err_msg=f"d{name}")


@pytest.mark.parametrize("per_sequence", [False, True])
def test_kvcache_with_appended_tokens(per_sequence):
    batch, heads_q, heads_kv, d = 3, 4, 2, 64
    k_cache, v_cache = normal(batch, 40, heads_kv, d), normal(batch, 40, heads_kv, d)
    seqlens = np.array([0, 17, 33], np.int32)
    q, k_new, v_new = normal(batch, 3, heads_q, d), normal(batch, 3, heads_kv, d), \
        normal(batch, 3, heads_kv, d)
    slopes = slopes_for(batch, heads_q, per_sequence)
    out, lse = hfa.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                           cache_seqlens=seqlens, causal=True, softcap=4.0,
                                           num_splits=2, return_softmax_lse=True,
                                           alibi_slopes=slopes)
    for b in range(batch):
        keys = seqlens[b] + 3  # the cache and its new tokens
        want_out, want_lse = dense(q[b], k_cache[b, :keys], v_cache[b, :keys],
                                   slope_rows(slopes, b), causal=True, softcap=4.0)
        np.testing.assert_allclose(out[b], want_out, atol=2e-5)
        np.testing.assert_allclose(lse[b], want_lse, atol=2e-5)


@pytest.mark.parametrize("bad, message", [
    (np.zeros(3, np.float32), r"alibi_slopes: expected shape \(heads_q\) = \(4\) or "
                              r"\(batch, heads_q\) = \(2, 4\), got \(3\)"),
    (np.zeros((2, 4, 1), np.float32), "alibi_slopes: expected shape"),
    (np.zeros(4, np.float16), "alibi_slopes: expected dtype f32, got f16"),
    (np.zeros(4, np.int32), "alibi_slopes: expected dtype f32, got i32"),
])
def test_rejections_name_alibi_slopes(bad, message):
    q, k, v = normal(2, 3, 4, 64), normal(2, 5, 2, 64), normal(2, 5, 2, 64)
    out = np.full((2, 3, 4, 64), 7.0, np.float32)
    with pytest.raises(ValueError, match=message):
        hfa.flash_attn_func(q, k, v, alibi_slopes=bad, out=out)
    assert (out == 7.0).all()  # nothing written
    with pytest.raises(ValueError, match=message):
        hfa.flash_attn_backward(q, q, k, v, q, np.zeros((2, 4, 3), np.float32), alibi_slopes=bad)


def test_strided_slopes_are_read_as_given():
    q, k, v = normal(1, 9, 4, 64), normal(1, 9, 4, 64), normal(1, 9, 4, 64)
    wide = np.zeros(8, np.float32)
    wide[::2] = [0.1, 0.2, 0.3, 0.4]
    want = hfa.flash_attn_func(q, k, v, alibi_slopes=np.ascontiguousarray(wide[::2]))
    np.testing.assert_array_equal(hfa.flash_attn_func(q, k, v, alibi_slopes=wide[::2]), want)


def test_unknown_keyword_is_a_type_error():
    q = normal(1, 2, 1, 64)
    with pytest.raises(TypeError, match="alibi_slope: not an argument of this call"):
        hfa.flash_attn_func(q, q, q, alibi_slope=np.zeros(1, np.float32))
    # A field the entry points set by hand is no keyword either (the window is window_size).
    with pytest.raises(TypeError, match="window_left: not an argument"):
        hfa.flash_attn_func(q, q, q, window_left=3)


# --- torch: the ops carry the row in their `vectors` list, their autograd too ---------------------

def torch_or_skip():
    return pytest.importorskip("torch", minversion="2.4",
                               reason="torch is not installed: the torch ops are untested here")


def test_torch_forward_and_autograd_match_numpy():
    torch = torch_or_skip()
    q, k, v = normal(2, 9, 4, 64), normal(2, 11, 2, 64), normal(2, 11, 2, 64)
    dout = normal(2, 9, 4, 64)
    slopes = slopes_for(2, 4, True)
    out, lse = hfa.flash_attn_func(q, k, v, causal=True, softcap=3.0, return_attn_probs=True,
                                   alibi_slopes=slopes)
    grads = hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=True, softcap=3.0,
                                    alibi_slopes=slopes)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    tout = hfa.flash_attn_func(tq, tk, tv, causal=True, softcap=3.0,
                               alibi_slopes=torch.tensor(slopes))
    tout.backward(torch.tensor(dout))
    np.testing.assert_array_equal(tout.detach().numpy(), out)
    for t, grad in zip((tq, tk, tv), grads):
        np.testing.assert_array_equal(t.grad.numpy(), grad)
    # The op's list: entry n is the n-th VECTOR row of the description (alibi_slopes here).
    from hfa import _lib
    rows = [info.name.decode() for info in _lib.vector_rows(_lib.Options)]
    listed = [torch.tensor(slopes) if name == "alibi_slopes" else None for name in rows]
    op_out, _ = torch.ops.hfa.fwd(tq.detach(), tk.detach(), tv.detach(), None, None, 0, 0, None,
                                  True, -1, 0, 3.0, False, vectors=listed)
    np.testing.assert_array_equal(op_out.numpy(), out)


def test_torch_varlen_backward_and_kvcache_match_numpy():
    torch = torch_or_skip()
    cu = np.array([0, 5, 12], np.int32)
    q, k, v, dout = (normal(12, 4, 64) for _ in range(4))
    slopes = slopes_for(2, 4, False)
    args = (cu, cu, 7, 7)
    out, lse = hfa.flash_attn_varlen_func(q, k, v, *args, causal=True, return_attn_probs=True,
                                          alibi_slopes=slopes)
    want = hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=True, cu_seqlens_q=cu,
                                   cu_seqlens_k=cu, max_seqlen_q=7, max_seqlen_k=7,
                                   alibi_slopes=slopes)
    t = [torch.tensor(a) for a in (dout, q, k, v, out, lse)]
    got = hfa.flash_attn_backward(*t, causal=True, cu_seqlens_q=torch.tensor(cu),
                                  cu_seqlens_k=torch.tensor(cu), max_seqlen_q=7, max_seqlen_k=7,
                                  alibi_slopes=torch.tensor(slopes))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.numpy(), b)
    k_cache, v_cache = normal(2, 30, 2, 64), normal(2, 30, 2, 64)
    q1, seqlens = normal(2, 2, 4, 64), np.array([7, 30], np.int32)
    want = hfa.flash_attn_with_kvcache(q1, k_cache, v_cache, cache_seqlens=seqlens, causal=True,
                                       alibi_slopes=slopes)
    got = hfa.flash_attn_with_kvcache(*(torch.tensor(a) for a in (q1, k_cache, v_cache)),
                                      cache_seqlens=torch.tensor(seqlens), causal=True,
                                      alibi_slopes=torch.tensor(slopes))
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("bad, error, message", [
    ("float16", ValueError, "alibi_slopes: expected dtype f32, got f16"),
    ("shape", ValueError, r"alibi_slopes: expected shape \(heads_q\) = \(4\)"),
    ("meta", ValueError, "alibi_slopes: device meta is not supported"),
    ("list", TypeError, "alibi_slopes"),
])
def test_torch_rejections_name_alibi_slopes(bad, error, message):
    torch = torch_or_skip()
    q, k, v = torch.randn(2, 3, 4, 64), torch.randn(2, 5, 2, 64), torch.randn(2, 5, 2, 64)
    slopes = {"float16": torch.zeros(4, dtype=torch.float16), "shape": torch.zeros(5),
              "meta": torch.zeros(4, device="meta"), "list": [0.1] * 4}[bad]
    with pytest.raises(error, match=message):
        hfa.flash_attn_func(q, k, v, alibi_slopes=slopes)
