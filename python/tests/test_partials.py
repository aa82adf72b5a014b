"""Attention split over keys from Python (numpy over the CPU backend): hfa.flash_attn_accumulate
merges calls over the parts of the keys into the whole result; flash_attn_backward's softmax_d
replaces D = rowsum(dout * out). The C++ suite (tests/api/test_partials.cpp) holds the library's
semantics; these check what Python adds: the arguments, float32 outs of float16 inputs, slices,
errors by name. (torch's path to the same calls runs with the GPU suites.)
"""

import numpy as np
import pytest

import hfa
from hfa import _lib
from reference import attention


def make(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


def whole(q, k, v, causal=False, learnable_sink=None):
    return hfa.flash_attn_func(q, k, v, causal=causal, learnable_sink=learnable_sink,
                               return_attn_probs=True)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cut", [0, 7, 40, 53])
def test_two_parts_give_the_whole(dtype, causal, cut):
    rng = np.random.default_rng(cut * 2 + causal)
    q, k, v = make(rng, (2, 37, 4, 64), dtype), make(rng, (2, 53, 2, 64), dtype), \
        make(rng, (2, 53, 2, 64), dtype)
    sinks = np.array([0.5, -1.0, 2.0, 0.0], dtype=np.float32)
    oracle = attention(q, k, v, causal=causal, sinks=sinks)
    out = np.empty((2, 37, 4, 64), dtype=np.float32)  # garbage: lse -inf says "no result yet"
    lse = np.full((2, 4, 37), -np.inf, dtype=np.float32)
    # Bottom-right causal over all keys: the first part's right edge sits 53 - cut further right.
    hfa.flash_attn_accumulate(q, k[:, :cut], v[:, :cut], out, lse, learnable_sink=sinks,
                              window_size=(-1, 53 - cut) if causal else (-1, -1))
    got = hfa.flash_attn_accumulate(q, k[:, cut:], v[:, cut:], out, lse, causal=causal)
    assert got[0] is out and got[1] is lse
    # f32 throughout: the inputs' rounding is all the error there is (the oracle saw them).
    assert np.max(np.abs(out - oracle["out"])) < 1e-5
    assert np.max(np.abs(lse - oracle["lse"])) < 1e-5


def test_varlen_parts_give_the_whole():
    rng = np.random.default_rng(5)
    lengths_q, lengths_k, cuts = [5, 0, 17], [9, 4, 30], [3, 4, 11]
    cu_q = np.concatenate([[0], np.cumsum(lengths_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lengths_k)]).astype(np.int32)
    q, k, v = make(rng, (22, 2, 64)), make(rng, (43, 2, 64)), make(rng, (43, 2, 64))
    parts = []
    for first in (True, False):
        rows = [np.arange(cu_k[b], cu_k[b] + c) if first else np.arange(cu_k[b] + c, cu_k[b + 1])
                for b, c in enumerate(cuts)]
        cu = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int32)
        index = np.concatenate(rows)
        parts.append((k[index], v[index], cu))
    out = np.empty((22, 2, 64), dtype=np.float32)
    lse = np.full((2, 22), -np.inf, dtype=np.float32)
    # Non-causal: with a different cut in every sequence, one window could not place the first
    # part under a causal mask for all of them (a ring cuts every sequence alike).
    for k_part, v_part, cu_part in parts:
        hfa.flash_attn_accumulate(q, k_part, v_part, out, lse, cu_seqlens_q=cu_q,
                                  cu_seqlens_k=cu_part)
    out_whole, lse_whole = hfa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, None, None,
                                                      return_attn_probs=True)
    assert np.max(np.abs(out - out_whole)) < 1e-5
    assert np.max(np.abs(lse - lse_whole)) < 1e-5


def test_slices_of_out_and_lse():
    """A zigzag ring's half-steps merge into the second half of the rows only."""
    rng = np.random.default_rng(6)
    q, k, v = make(rng, (1, 40, 2, 64)), make(rng, (1, 60, 2, 64)), make(rng, (1, 60, 2, 64))
    out_whole, lse_whole = whole(q, k, v)
    out = np.empty((1, 40, 2, 64), dtype=np.float32)
    lse = np.full((1, 2, 40), -np.inf, dtype=np.float32)
    hfa.flash_attn_accumulate(q, k[:, :25], v[:, :25], out, lse)
    for rows in (slice(0, 16), slice(16, 40)):
        hfa.flash_attn_accumulate(q[:, rows], k[:, 25:], v[:, 25:], out[:, rows], lse[:, :, rows])
    assert np.max(np.abs(out - out_whole)) < 1e-5
    assert np.max(np.abs(lse - lse_whole)) < 1e-5


def test_float16_inputs_into_a_float32_out():
    rng = np.random.default_rng(7)
    q, k, v = (make(rng, shape, "float16") for shape in ((1, 9, 2, 64), (1, 12, 2, 64),
                                                           (1, 12, 2, 64)))
    out16, lse16 = whole(q, k, v)
    out = np.empty((1, 9, 2, 64), dtype=np.float32)
    lse = np.full((1, 2, 9), -np.inf, dtype=np.float32)
    hfa.flash_attn_accumulate(q, k, v, out, lse)
    assert np.array_equal(out.astype(np.float16), out16)  # the same result before rounding
    assert np.array_equal(lse, lse16)


def test_softmax_d_replaces_out():
    rng = np.random.default_rng(8)
    q, k, v = make(rng, (2, 11, 4, 64)), make(rng, (2, 19, 2, 64)), make(rng, (2, 19, 2, 64))
    out, lse = hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    dout = make(rng, out.shape)
    computed = hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=True)
    d = np.einsum("bshd,bshd->bhs", dout.astype(np.float64), out).astype(np.float32)
    poisoned = np.full_like(out, np.nan)  # with D given, out is not read
    given = hfa.flash_attn_backward(dout, q, k, v, poisoned, lse, causal=True, softmax_d=d)
    for a, b in zip(computed, given):
        assert np.max(np.abs(a - b)) < 1e-5


def test_errors_name_the_argument():
    rng = np.random.default_rng(9)
    q, k, v = make(rng, (1, 4, 2, 64)), make(rng, (1, 6, 2, 64)), make(rng, (1, 6, 2, 64))
    lse = np.full((1, 2, 4), -np.inf, dtype=np.float32)
    with pytest.raises(TypeError, match="^out: dtype float64 is not supported"):
        hfa.flash_attn_accumulate(q, k, v, np.empty((1, 4, 2, 64), dtype=np.float64), lse)
    q16, k16, v16 = (x.astype(np.float16) for x in (q, k, v))
    with pytest.raises(hfa.HfaInvalidArgument, match="out: accumulate needs an f32 out"):
        hfa.flash_attn_accumulate(q16, k16, v16, np.empty((1, 4, 2, 64), dtype=np.float16), lse)
    out, lse_fwd = whole(q, k, v)
    dout = make(rng, out.shape)
    with pytest.raises(hfa.HfaInvalidArgument, match="softmax_d: expected shape"):
        hfa.flash_attn_backward(dout, q, k, v, out, lse_fwd,
                                softmax_d=np.zeros((1, 2, 5), dtype=np.float32))


def test_the_ctypes_options_have_the_fields_of_hfa_h():
    # In their order, wherever later rows (appended to the table) put them.
    fields = _lib.Options._fields_
    at = fields.index(("accumulate", _lib.ctypes.c_int32))
    assert fields[at + 1] == ("softmax_d", _lib.ctypes.POINTER(_lib.Tensor))
    defaults = _lib.make_options()
    assert defaults.accumulate == 0 and not defaults.softmax_d
    assert _lib.make_options(accumulate=True).accumulate == 1
