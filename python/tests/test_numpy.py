"""The numpy front end over the CPU backend, against the float64 reference (docs/design.md §6).

Every case runs forward and backward; tolerances follow §6: max|ours − oracle| must stay within
2·max|peer − oracle| + 1e-5, the peer being the same math in fp32 with P and dS rounded to the
input dtype (reference.py).
"""

import re
import zlib

import numpy as np
import pytest

import hfa
from hfa import _numpy
from reference import attention, check_s6, lse_floor, max_err

DTYPES = ["float32", "float16"]


def seed(*parts):
    """A stable seed per test case (str hashes change from run to run)."""
    return zlib.crc32(repr(parts).encode())


def make(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def run_and_check(rng, dtype, q, k, v, *, backward=True, varlen=None, **opts):
    """Forward (+ backward) through hfa, checked against the oracle with the peer's tolerance.
    `opts` are flash_attn keyword arguments; `varlen` is (cu_q, cu_k) or None."""
    window = opts.get("window_size", (-1, -1))
    ref_opts = dict(softmax_scale=opts.get("softmax_scale"), causal=opts.get("causal", False),
                    window=window, softcap=opts.get("softcap", 0.0),
                    sinks=opts.get("learnable_sink"), seqused_q=opts.get("seqused_q"),
                    seqused_k=opts.get("seqused_k"))
    if varlen is not None:
        cu_q, cu_k = varlen
        out, lse = hfa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, None, None,
                                              return_attn_probs=True, **opts)
        ref_opts.update(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        bwd_var = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    else:
        out, lse = hfa.flash_attn_func(q, k, v, return_attn_probs=True, **opts)
        bwd_var = {}
    assert out.dtype == q.dtype and out.shape == q.shape[:-1] + (v.shape[-1],)
    assert lse.dtype == np.float32
    dout = make(rng, out.shape, dtype) if backward else None
    oracle = attention(q, k, v, dout, **ref_opts)
    lowp = None if dtype == "float32" else dtype
    peer = attention(q, k, v, dout, compute=np.float32, lowp=lowp, **ref_opts)
    check_s6("out", out, oracle["out"], peer["out"])
    check_s6("lse", lse, oracle["lse"], peer["lse"], floor=lse_floor(oracle["lse"]))
    if backward:
        grads = hfa.flash_attn_backward(dout, q, k, v, out, lse, **opts, **bwd_var)
        dq, dk, dv = grads[:3]
        for name, g, x in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
            assert g.shape == x.shape and g.dtype == x.dtype, name
            check_s6(name, g, oracle[name], peer[name])
        if opts.get("learnable_sink") is not None:
            assert len(grads) == 4 and grads[3].dtype == np.float32
            check_s6("dsink", grads[3], oracle["dsink"], peer["dsink"])
        else:
            assert len(grads) == 3
    return out, lse


# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, d_qk, d_v, options): odd lengths, seqlen 1,
# seqlen_q != seqlen_k both ways (bottom-right alignment), windows, softcap, GQA/MQA.
FIXED_CASES = {
    "plain": (2, 17, 17, 2, 2, 64, 64, {}),
    "causal": (2, 17, 17, 2, 2, 64, 64, {"causal": True}),
    "seqlen1": (3, 1, 1, 2, 2, 64, 64, {"causal": True}),
    "q1_k77_causal": (2, 1, 77, 2, 2, 128, 128, {"causal": True}),
    "causal_q_lt_k": (1, 65, 129, 3, 3, 64, 64, {"causal": True}),
    # seqlen_q > seqlen_k: the first rows see no key (O = 0, LSE = -inf).
    "causal_q_gt_k": (1, 130, 33, 2, 2, 64, 64, {"causal": True}),
    "d96": (1, 70, 50, 2, 2, 96, 96, {"causal": True}),
    "d128": (1, 100, 100, 2, 2, 128, 128, {"causal": True}),
    "d256": (1, 40, 50, 1, 1, 256, 256, {}),
    "d192_v128": (1, 45, 61, 2, 2, 192, 128, {"causal": True}),
    "window_left": (1, 90, 90, 2, 2, 64, 64, {"window_size": (16, 0)}),
    "window_both": (1, 70, 110, 2, 2, 64, 64, {"window_size": (8, 8)}),
    "window_right_only": (1, 60, 40, 2, 2, 64, 64, {"window_size": (-1, 4)}),
    "window_diag": (1, 33, 47, 2, 2, 64, 64, {"window_size": (0, 0)}),
    "window_causal": (2, 50, 80, 2, 2, 64, 64, {"window_size": (20, -1), "causal": True}),
    "softcap": (1, 64, 80, 2, 2, 64, 64, {"softcap": 5.0}),
    "softcap_causal": (1, 77, 77, 2, 2, 128, 128, {"softcap": 30.0, "causal": True}),
    "scale": (1, 40, 40, 2, 2, 64, 64, {"softmax_scale": 0.3}),
    "gqa": (2, 37, 53, 6, 2, 64, 64, {"causal": True}),
    "mqa": (1, 29, 70, 4, 1, 128, 128, {"window_size": (10, 3)}),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(FIXED_CASES), ids=list(FIXED_CASES))
def test_fixed(case, dtype):
    b, sq, sk, hq, hk, d, dv, opts = FIXED_CASES[case]
    rng = np.random.default_rng(seed(case, dtype))
    q = make(rng, (b, sq, hq, d), dtype)
    k = make(rng, (b, sk, hk, d), dtype)
    v = make(rng, (b, sk, hk, dv), dtype)
    run_and_check(rng, dtype, q, k, v, **opts)


def test_rows_that_see_no_key():
    """Causal with seqlen_q > seqlen_k: rows before the diagonal get O = 0, LSE = -inf."""
    rng = np.random.default_rng(1)
    q, k, v = make(rng, (1, 20, 2, 64), "float32"), make(rng, (1, 5, 2, 64), "float32"), \
        make(rng, (1, 5, 2, 64), "float32")
    out, lse = hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    # Query i sees keys j <= i + 5 - 20: rows 0..14 see nothing.
    assert np.all(out[:, :15] == 0)
    assert np.all(np.isneginf(lse[:, :, :15]))
    assert np.all(np.isfinite(lse[:, :, 15:]))
    dout = make(rng, out.shape, "float32")
    dq, dk, dv = hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=True)
    assert np.all(dq[:, :15] == 0) and np.isfinite(dk).all() and np.isfinite(dv).all()


def test_empty_problems():
    """seqlen_k = 0 (every row sees nothing) and batch = 0 are valid, not errors."""
    rng = np.random.default_rng(10)
    q = make(rng, (1, 5, 2, 64), "float32")
    k = np.zeros((1, 0, 2, 64), np.float32)
    out, lse = hfa.flash_attn_func(q, k, k, return_attn_probs=True)
    assert np.all(out == 0) and np.all(np.isneginf(lse))
    dq, dk, dv = hfa.flash_attn_backward(out, q, k, k, out, lse)
    assert np.all(dq == 0) and dk.shape == k.shape and dv.shape == k.shape
    empty = np.zeros((0, 5, 2, 64), np.float32)
    out, lse = hfa.flash_attn_func(empty, empty, empty, return_attn_probs=True)
    assert out.shape == empty.shape and lse.shape == (0, 2, 5)


def test_large_magnitudes_and_outliers():
    rng = np.random.default_rng(2)
    q = make(rng, (1, 64, 2, 64), "float16", scale=4.0)
    k = make(rng, (1, 64, 2, 64), "float16", scale=4.0)
    k[0, 7] = 60.0  # one key that dominates every row
    v = make(rng, (1, 64, 2, 64), "float16")
    run_and_check(rng, "float16", q, k, v, causal=True)


VARLEN_CASES = {
    # lengths per sequence (q, k), including empty sequences and length 1.
    "same": ([17, 1, 40], [17, 1, 40], {}),
    "causal_mixed": ([1, 17, 0, 65], [5, 17, 3, 40], {"causal": True}),
    "window": ([33, 9], [50, 9], {"window_size": (7, 2)}),
    "softcap_causal": ([25, 31], [25, 44], {"softcap": 10.0, "causal": True}),
    "empty_k": ([4, 6], [0, 6], {}),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(VARLEN_CASES), ids=list(VARLEN_CASES))
def test_varlen(case, dtype):
    lq, lk, opts = VARLEN_CASES[case]
    rng = np.random.default_rng(seed(case, dtype))
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    hq, hk, d = 4, 2, 64  # GQA too
    q = make(rng, (cu_q[-1], hq, d), dtype)
    k = make(rng, (cu_k[-1], hk, d), dtype)
    v = make(rng, (cu_k[-1], hk, d), dtype)
    run_and_check(rng, dtype, q, k, v, varlen=(cu_q, cu_k), **opts)


SINK_CASES = {
    # (batch, seqlen_q, seqlen_k, heads_q, heads_kv, d, options)
    "plain": (2, 33, 47, 2, 2, 64, {}),
    # seqlen_q > seqlen_k: the first rows see no key and get O = 0, LSE = sink.
    "causal_gqa": (1, 70, 30, 4, 2, 64, {"causal": True}),
    "window_softcap": (1, 90, 90, 2, 1, 128, {"window_size": (16, 4), "softcap": 5.0}),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(SINK_CASES), ids=list(SINK_CASES))
def test_sinks(case, dtype):
    b, sq, sk, hq, hk, d, opts = SINK_CASES[case]
    rng = np.random.default_rng(seed("sinks", case, dtype))
    q, k, v = make(rng, (b, sq, hq, d), dtype), make(rng, (b, sk, hk, d), dtype), \
        make(rng, (b, sk, hk, d), dtype)
    sinks = (rng.standard_normal(hq) * 2).astype(np.float32)
    out, lse = run_and_check(rng, dtype, q, k, v, learnable_sink=sinks, **opts)
    # The sink is one more term of every row's denominator: LSE >= the sink, everywhere.
    assert np.all(lse >= sinks[None, :, None] - 1e-6)


def test_sink_rows_that_see_no_key():
    """A row that sees no key has only the sink: O = 0 and LSE = the sink, and its gradient
    flows to the sink alone."""
    rng = np.random.default_rng(11)
    q, k, v = make(rng, (1, 20, 2, 64), "float32"), make(rng, (1, 5, 2, 64), "float32"), \
        make(rng, (1, 5, 2, 64), "float32")
    sinks = np.array([0.25, -3.0], np.float32)
    out, lse = hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True,
                                   learnable_sink=sinks)
    assert np.all(out[:, :15] == 0)
    assert np.allclose(lse[:, :, :15], sinks[None, :, None], rtol=0, atol=1e-6)
    dout = make(rng, out.shape, "float32")
    dq, dk, dv, dsink = hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=True,
                                                learnable_sink=sinks)
    assert np.all(dq[:, :15] == 0) and dsink.shape == (2,) and np.isfinite(dsink).all()
    # float64 sinks are taken (converted to float32, the library's dtype).
    out64 = hfa.flash_attn_func(q, k, v, causal=True, learnable_sink=sinks.astype(np.float64))
    assert max_err(out64, out) == 0


SEQUSED_CASES = {
    # allocated lengths per sequence (q, k), used lengths (q, k), options
    "causal": ([20, 7, 33], [25, 9, 40], [13, 0, 33], [25, 3, 17], {"causal": True}),
    "window_softcap": ([40, 16], [50, 16], [37, 16], [12, 16],
                       {"window_size": (6, 2), "softcap": 8.0}),
    "sinks": ([30, 12], [30, 20], [17, 12], [30, 0],
              {"causal": True, "learnable_sink": np.array([0.5, -1, 2, 0.1], np.float32)}),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(SEQUSED_CASES), ids=list(SEQUSED_CASES))
def test_seqused_varlen(case, dtype):
    """Only the used part of each sequence takes part; causal and windows align on it."""
    lq, lk, uq, uk, opts = SEQUSED_CASES[case]
    rng = np.random.default_rng(seed("seqused", case, dtype))
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q = make(rng, (cu_q[-1], 4, 64), dtype)
    k = make(rng, (cu_k[-1], 2, 64), dtype)
    v = make(rng, (cu_k[-1], 2, 64), dtype)
    used_q, used_k = np.array(uq, np.int32), np.array(uk, np.int32)
    out, lse = run_and_check(rng, dtype, q, k, v, varlen=(cu_q, cu_k), seqused_q=used_q,
                             seqused_k=used_k, **opts)
    # The rows beyond seqused_q come back 0 / -inf from the wrapper.
    for b in range(len(lq)):
        rows = slice(cu_q[b] + uq[b], cu_q[b + 1])
        assert np.all(out[rows] == 0) and np.all(np.isneginf(lse[:, rows]))
    # Keys beyond seqused_k are not read: poisoning them changes nothing.
    k2, v2 = k.copy(), v.copy()
    for b in range(len(lk)):
        k2[cu_k[b] + uk[b]:cu_k[b + 1]] = np.nan
        v2[cu_k[b] + uk[b]:cu_k[b + 1]] = np.nan
    out2 = hfa.flash_attn_varlen_func(q, k2, v2, cu_q, cu_k, None, None, seqused_q=used_q,
                                      seqused_k=used_k, **opts)
    assert max_err(out2, out) == 0


def test_seqused_leaves_preallocated_rows_untouched():
    """The library writes no out or lse row beyond seqused_q: a preallocated buffer keeps its
    poison there."""
    rng = np.random.default_rng(12)
    q, k, v = (make(rng, (2, 24, 2, 64), "float32") for _ in range(3))
    used = np.array([10, 24], np.int32)
    out = np.full(q.shape, 7.0, np.float32)
    lse = np.full((2, 2, 24), 7.0, np.float32)
    _numpy.forward(q, k, v, causal=True, out=out, lse=lse, seqused_q=used, seqused_k=used)
    assert np.all(out[0, 10:] == 7.0) and np.all(lse[0, :, 10:] == 7.0)
    assert not np.any(out[0, :10] == 7.0) and not np.any(out[1] == 7.0)
    # The used part is the attention of the shorter sequence on its own.
    short = hfa.flash_attn_func(q[:1, :10], k[:1, :10], v[:1, :10], causal=True)
    assert max_err(out[:1, :10], short) <= 1e-6


def test_error_sinks_and_seqused():
    rng = np.random.default_rng(13)
    q = make(rng, (2, 8, 4, 64), "float32")
    with pytest.raises(ValueError, match=r"^learnable_sink: expected shape \(4\)"):
        hfa.flash_attn_func(q, q, q, learnable_sink=np.zeros(3, np.float32))
    cu = np.array([0, 8, 16], np.int32)
    flat = q.reshape(16, 4, 64)
    with pytest.raises(ValueError, match=r"^seqused_k: element 1 \(9\) exceeds"):
        hfa.flash_attn_varlen_func(flat, flat, flat, cu, cu, 8, 8,
                                   seqused_k=np.array([8, 9], np.int32))
    with pytest.raises(ValueError, match=r"^seqused_q: element 0 is negative"):
        hfa.flash_attn_varlen_func(flat, flat, flat, cu, cu, 8, 8,
                                   seqused_q=np.array([-1, 8], np.int32))
    with pytest.raises(ValueError, match=r"^seqused_q: expected shape \(2\)"):
        hfa.flash_attn_varlen_func(flat, flat, flat, cu, cu, 8, 8,
                                   seqused_q=np.array([8], np.int32))
    with pytest.raises(TypeError, match="seqused_q"):
        hfa.flash_attn_varlen_func(flat, flat, flat, cu, cu, 8, 8,
                                   seqused_q=np.array([8, 8], np.int64))


def test_varlen_matches_fixed():
    """A varlen batch of equal lengths gives what the fixed-length call gives."""
    rng = np.random.default_rng(3)
    b, s, h, d = 3, 21, 2, 64
    q, k, v = (make(rng, (b, s, h, d), "float32") for _ in range(3))
    cu = (np.arange(b + 1) * s).astype(np.int32)
    out_f, lse_f = hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    out_v, lse_v = hfa.flash_attn_varlen_func(
        q.reshape(b * s, h, d), k.reshape(b * s, h, d), v.reshape(b * s, h, d), cu, cu, s, s,
        causal=True, return_attn_probs=True)
    assert max_err(out_v.reshape(b, s, h, d), out_f) <= 1e-6
    assert max_err(lse_v.reshape(h, b, s).transpose(1, 0, 2), lse_f) <= 1e-6


def test_strided_inputs():
    """Views with non-packed strides are passed as they are and give the packed result."""
    rng = np.random.default_rng(4)
    big = make(rng, (2, 30, 6, 64), "float32")
    q = big[:, :, ::2]                                         # every other head
    k = np.ascontiguousarray(make(rng, (2, 3, 30, 64), "float32")).transpose(0, 2, 1, 3)  # BHSD
    v = make(rng, (2, 30, 3, 128), "float32")[..., :64]        # a slice of a wider head dim
    flipped = make(rng, (2, 30, 3, 64), "float32")[:, ::-1]    # negative stride: copied
    for kk in (k, flipped):
        out, lse = hfa.flash_attn_func(q, kk, v, causal=True, return_attn_probs=True)
        ref, ref_lse = hfa.flash_attn_func(*(np.ascontiguousarray(x) for x in (q, kk, v)),
                                           causal=True, return_attn_probs=True)
        assert max_err(out, ref) <= 1e-6 and max_err(lse, ref_lse) <= 1e-6
    last_dim_strided = make(rng, (2, 30, 3, 128), "float32")[..., ::2]  # copied by the wrapper
    out = hfa.flash_attn_func(q, k, last_dim_strided)
    ref = hfa.flash_attn_func(q, k, np.ascontiguousarray(last_dim_strided))
    assert max_err(out, ref) <= 1e-6


def test_outputs_all_written():
    """Outputs prefilled with NaN come back NaN-free (every element written)."""
    rng = np.random.default_rng(5)
    q, k, v = (make(rng, (2, 45, 2, 64), "float16") for _ in range(3))
    out = np.full(q.shape, np.nan, dtype=np.float16)
    lse = np.full((2, 2, 45), np.nan, dtype=np.float32)
    _numpy.forward(q, k, v, causal=True, window_size=(5, 0), out=out, lse=lse)
    assert not np.isnan(out).any() and not np.isnan(lse).any()


def test_return_attn_probs_and_defaults():
    rng = np.random.default_rng(6)
    q, k, v = (make(rng, (1, 10, 2, 64), "float32") for _ in range(3))
    out = hfa.flash_attn_func(q, k, v)
    assert isinstance(out, np.ndarray)
    out2, lse = hfa.flash_attn_func(q, k, v, return_attn_probs=True)
    assert lse.shape == (1, 2, 10) and np.array_equal(out, out2)
    # The default scale is 1/sqrt(headdim).
    out3 = hfa.flash_attn_func(q, k, v, softmax_scale=1 / np.sqrt(64))
    assert max_err(out, out3) <= 1e-7


def test_deterministic_backward_is_bitwise_reproducible():
    rng = np.random.default_rng(7)
    q = make(rng, (2, 70, 4, 64), "float32")
    k, v = make(rng, (2, 90, 2, 64), "float32"), make(rng, (2, 90, 2, 64), "float32")
    out, lse = hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    dout = make(rng, out.shape, "float32")
    first = hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=True, deterministic=True)
    for _ in range(3):
        again = hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=True, deterministic=True)
        for a, b in zip(first, again):
            assert np.array_equal(a, b)


# --- errors ------------------------------------------------------------------------------------

def names(arg):
    """A regex that finds argument `arg` named as a word in a message."""
    return re.compile(rf"\b{re.escape(arg)}\b")


@pytest.fixture
def qkv():
    rng = np.random.default_rng(8)
    return tuple(make(rng, (1, 8, 2, 64), "float32") for _ in range(3))


def test_error_headdim_mismatch(qkv):
    q, _, v = qkv
    k = np.zeros((1, 8, 2, 128), np.float32)
    with pytest.raises(ValueError, match=names("k")) as e:
        hfa.flash_attn_func(q, k, v)
    assert "headdim" in str(e.value)


def test_error_unsupported_headdim():
    q = np.zeros((1, 8, 2, 32), np.float32)
    with pytest.raises(ValueError, match=names("q")):
        hfa.flash_attn_func(q, q, q)


def test_error_heads_not_divisible(qkv):
    q = np.zeros((1, 8, 3, 64), np.float32)
    _, k, v = qkv
    with pytest.raises(ValueError, match=names("k")):
        hfa.flash_attn_func(q, k, v)


def test_error_dtype_mismatch(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=names("k")):
        hfa.flash_attn_func(q, k.astype(np.float16), v)


def test_error_float64_rejected_by_the_wrapper(qkv):
    q, k, v = qkv
    with pytest.raises(TypeError, match=names("q")):
        hfa.flash_attn_func(q.astype(np.float64), k, v)


def test_error_rank(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=names("q")):
        hfa.flash_attn_func(q[0], k, v)


def test_error_options(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=names("softcap")):
        hfa.flash_attn_func(q, k, v, softcap=-1.0)
    with pytest.raises(ValueError, match=names("window_size")):
        hfa.flash_attn_func(q, k, v, window_size=(-2, 0))
    with pytest.raises(ValueError, match=names("softmax_scale")):
        hfa.flash_attn_func(q, k, v, softmax_scale=float("nan"))


def test_error_descales(qkv):
    """numpy has no fp8 dtype: the FP8 arguments are for torch.float8_e4m3fn tensors."""
    q, k, v = qkv
    for fp8 in ({"q_descale": np.ones(1, np.float32)}, {"descale_block_kv": 128}):
        with pytest.raises(ValueError, match=names(next(iter(fp8))).pattern + ".*float8_e4m3fn"):
            hfa.flash_attn_func(q, k, v, **fp8)
    cu = np.array([0, q.shape[1]], np.int32)
    with pytest.raises(ValueError, match=names("v_descale")):
        hfa.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, q.shape[1], q.shape[1],
                                   v_descale=np.ones(1, np.float32))


def test_error_varlen_arguments():
    rng = np.random.default_rng(9)
    q = make(rng, (10, 2, 64), "float32")
    cu = np.array([0, 4, 10], np.int32)
    with pytest.raises(TypeError, match=names("cu_seqlens_q")):
        hfa.flash_attn_varlen_func(q, q, q, cu.astype(np.int64), cu, 6, 6)
    with pytest.raises(ValueError, match=names("cu_seqlens_q")):
        hfa.flash_attn_varlen_func(q, q, q, np.array([0, 4, 11], np.int32), cu, 7, 6)
    with pytest.raises(ValueError, match=names("max_seqlen_q")):
        hfa.flash_attn_varlen_func(q, q, q, cu, cu, 3, 6)
    with pytest.raises(ValueError, match="cu_seqlens"):
        _numpy.forward(q, q, q, cu_seqlens_q=cu)


def test_error_backward_shapes(qkv):
    q, k, v = qkv
    out, lse = hfa.flash_attn_func(q, k, v, return_attn_probs=True)
    with pytest.raises(ValueError, match=names("lse")):
        hfa.flash_attn_backward(out, q, k, v, out, lse[:, :1])
    with pytest.raises(ValueError, match=names("dout")):
        hfa.flash_attn_backward(out[:, :4], q, k, v, out, lse)


def test_rejected_call_writes_nothing(qkv):
    q, _, v = qkv
    k = np.zeros((1, 8, 2, 128), np.float32)
    out = np.full((1, 8, 2, 64), np.nan, np.float32)
    lse = np.full((1, 2, 8), np.nan, np.float32)
    with pytest.raises(ValueError):
        _numpy.forward(q, k, v, out=out, lse=lse)
    assert np.isnan(out).all() and np.isnan(lse).all()


def test_not_a_tensor():
    with pytest.raises(TypeError, match=names("q")):
        hfa.flash_attn_func([1.0], [1.0], [1.0])


def test_empty_queries():
    """seqlen_q = 0: the forward returns an empty out and lse (numpy gives them any strides),
    and the backward zero gradients for k and v."""
    rng = np.random.default_rng(14)
    for varlen in (False, True):
        q = np.zeros((1, 0, 2, 64), np.float32)
        k = make(rng, (1, 7, 2, 64), "float32")
        if varlen:
            q, k = q.reshape(0, 2, 64), k.reshape(7, 2, 64)
            kw = dict(cu_seqlens_q=np.array([0, 0], np.int32),
                      cu_seqlens_k=np.array([0, 7], np.int32))
            out, lse = hfa.flash_attn_varlen_func(q, k, k, kw["cu_seqlens_q"],
                                                  kw["cu_seqlens_k"], None, None, causal=True,
                                                  return_attn_probs=True)
            assert lse.shape == (2, 0)
        else:
            kw = {}
            out, lse = hfa.flash_attn_func(q, k, k, causal=True, return_attn_probs=True)
            assert lse.shape == (1, 2, 0)
        assert out.shape == q.shape
        dq, dk, dv = hfa.flash_attn_backward(out, q, k, k, out, lse, causal=True, **kw)
        assert dq.shape == q.shape and np.all(dk == 0) and np.all(dv == 0)


def test_converted_vectors_stay_alive():
    """Vectors the wrapper converts (float16 sinks, a strided seqused) are kept with the
    options until the call returns, varlen included: every pointer the options hold views an
    array of `keep`."""
    sinks = np.array([0.5, -1.0], np.float16)
    seqused = np.array([3, 0, 5, 0], np.int32)[::2]  # strided: copied
    cu = np.array([0, 5, 10], np.int32)
    opts, keep = _numpy._options(None, False, (-1, -1), 0.0, False, cu, cu, None, None,
                                 sinks, seqused, seqused)
    kept = {a.ctypes.data for a in keep if isinstance(a, np.ndarray)}
    for name in ("sinks", "seqused_q", "seqused_k", "cu_seqlens_q", "cu_seqlens_k"):
        assert getattr(opts, name).contents.data in kept, name
    # And the call itself: converted inputs give the reference's answer.
    rng = np.random.default_rng(15)
    q = make(rng, (10, 2, 64), "float32")
    k = make(rng, (10, 2, 64), "float32")
    v = make(rng, (10, 2, 64), "float32")
    run_and_check(rng, "float32", q, k, v, varlen=(cu, cu), learnable_sink=sinks,
                  seqused_q=seqused, seqused_k=seqused)
