"""Issue 31's cases on the numpy front end: an array labelled with another argument's dtype, a
read-only array written, a Python int wrapped to 32 bits. Each call is rejected with an error
naming the caller's argument, and every array the caller gave is byte-identical afterwards."""

import contextlib

import numpy as np
import pytest

import hfa

F32, F16 = np.float32, np.float16


@contextlib.contextmanager
def rejected(error, name, *arrays):
    """Expects `error` with a message that starts with `name:`, and the arrays unchanged."""
    before = [a.copy() for a in arrays]
    with pytest.raises(error, match=rf"^{name}: ") as caught:
        yield caught
    for a, b in zip(arrays, before):
        assert np.array_equal(a, b, equal_nan=True), f"{name}: an array changed on a rejection"


def kvcache_arrays(dtypes=None):
    """q, k_cache, v_cache, k_new, v_new of the issue's example (dtypes overrides by name)."""
    dtypes = {"q": F32, "k_cache": F32, "v_cache": F32, "k": F32, "v": F32, **(dtypes or {})}
    shapes = {"q": (2, 1, 4, 64), "k_cache": (2, 64, 2, 64), "v_cache": (2, 64, 2, 64),
              "k": (2, 1, 2, 64), "v": (2, 1, 2, 64)}
    return {name: np.full(shape, 0.5, dtypes[name]) for name, shape in shapes.items()}


SEQLENS = np.array([62, 62], np.int32)


# --- 1: every array is labelled with its own dtype -------------------------------------------

@pytest.mark.parametrize("name", ["v_cache", "k", "v"])
def test_kvcache_append_of_another_dtype(name):
    """A float16 v_cache beside a float32 k_cache wrote past the cache (free(): invalid next
    size); float16 new tokens beside float32 q were appended as garbage."""
    a = kvcache_arrays({name: F16})
    with rejected(ValueError, name, *a.values()):
        hfa.flash_attn_with_kvcache(a["q"], a["k_cache"], a["v_cache"], k=a["k"], v=a["v"],
                                    cache_seqlens=SEQLENS)


@pytest.mark.parametrize("which", ["rotary_cos", "rotary_sin"])
def test_kvcache_rotary_tables_of_another_dtype(which):
    a = kvcache_arrays()
    tables = {"rotary_cos": np.ones((64, 16), F32), "rotary_sin": np.zeros((64, 16), F32)}
    tables[which] = tables[which].astype(F16)
    # A float16 pair is consistent between the two tables; the first one named is rotary_cos.
    tables = {n: t.astype(F16) for n, t in tables.items()} if which == "rotary_cos" else tables
    with rejected(ValueError, which, *a.values(), *tables.values()):
        hfa.flash_attn_with_kvcache(a["q"], a["k_cache"], a["v_cache"], k=a["k"], v=a["v"],
                                    cache_seqlens=SEQLENS, causal=True, **tables)


def test_kvcache_scales_of_another_dtype():
    """A uint8 v_scale beside a float32 k_scale (an FP8 cache) was read as float32 scales."""
    q = np.zeros((2, 1, 4, 64), F32)
    codes = np.zeros((2, 64, 2, 64), np.uint8)
    k_scale = np.ones(2, F32)
    v_scale = np.ones(2, np.uint8)
    with rejected(TypeError, "v_scale", codes, k_scale, v_scale):
        hfa.flash_attn_with_kvcache(q, codes, codes.copy(), cache_seqlens=SEQLENS,
                                    k_scale=k_scale, v_scale=v_scale)


# --- 2: arrays the call writes must be writeable ---------------------------------------------

def read_only(a):
    a = a.copy()
    a.setflags(write=False)
    return a


def over_bytes(a):
    """A read-only array over an immutable bytes object (and the bytes, to check they stay)."""
    data = a.tobytes()
    return np.frombuffer(data, a.dtype).reshape(a.shape), data


def forward_case():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 8, 2, 64)).astype(F32)
    out, lse = hfa.flash_attn_func(q, q, q, return_attn_probs=True)
    return q, out, lse


@pytest.mark.parametrize("name", ["out", "lse"])
def test_accumulate_into_read_only(name):
    q, out, lse = forward_case()
    given = {"out": out, "lse": lse}
    given[name] = read_only(given[name])
    with rejected(ValueError, name, q, *given.values()):
        hfa.flash_attn_accumulate(q, q, q, given["out"], given["lse"])


def test_accumulate_into_bytes():
    q, out, lse = forward_case()
    view, data = over_bytes(out)
    with rejected(ValueError, "out", q, lse):
        hfa.flash_attn_accumulate(q, q, q, view, lse)
    assert data == out.tobytes()


def test_forward_into_read_only_out():
    q, out, _ = forward_case()
    with rejected(ValueError, "out", q):
        hfa.flash_attn_func(q, q, q, out=read_only(np.zeros_like(out)))


@pytest.mark.parametrize("name", ["k_cache", "v_cache"])
def test_kvcache_append_into_read_only_cache(name):
    a = kvcache_arrays()
    a[name] = read_only(a[name])
    with rejected(ValueError, name, *a.values()):
        hfa.flash_attn_with_kvcache(a["q"], a["k_cache"], a["v_cache"], k=a["k"], v=a["v"],
                                    cache_seqlens=SEQLENS)


def test_kvcache_append_into_bytes():
    a = kvcache_arrays()
    a["k_cache"], data = over_bytes(a["k_cache"])
    with rejected(ValueError, "k_cache", *a.values()):
        hfa.flash_attn_with_kvcache(a["q"], a["k_cache"], a["v_cache"], k=a["k"], v=a["v"],
                                    cache_seqlens=SEQLENS)
    assert data == np.full((2, 64, 2, 64), 0.5, F32).tobytes()


def test_kvcache_read_only_cache_without_append_is_fine():
    """The cache is only read when nothing is appended: a read-only one is accepted."""
    a = kvcache_arrays()
    out = hfa.flash_attn_with_kvcache(a["q"], read_only(a["k_cache"]), read_only(a["v_cache"]),
                                      cache_seqlens=SEQLENS)
    assert np.allclose(out, 0.5)


@pytest.mark.parametrize("name", ["out", "lse"])
def test_merge_partials_into_read_only(name):
    _, out, lse = forward_case()
    given = {"out": np.zeros(out.shape, F32), "lse": np.zeros(lse.shape, F32)}
    given[name] = read_only(given[name])
    with rejected(ValueError, name, out, lse, *given.values()):
        hfa.merge_partials([out, out], [lse, lse], **given)


def test_merge_partials_into_bytes():
    _, out, lse = forward_case()
    view, data = over_bytes(np.zeros(out.shape, F32))
    with rejected(ValueError, "out", out, lse):
        hfa.merge_partials([out], [lse], out=view)
    assert data == bytes(len(data))


# --- 3: integers out of the C ABI's range are errors, not wrapped ----------------------------

HUGE = [2 ** 32 + 3, 2 ** 40, -2 ** 40, np.int64(2 ** 40)]


@pytest.mark.parametrize("left, right", [(2 ** 32 + 3, 0), (2 ** 40, -1), (0, 2 ** 31),
                                         (np.int64(2 ** 33), 0), (-2 ** 32 + 5, 0)])
def test_window_size_out_of_range(left, right):
    q, _, _ = forward_case()
    with rejected(ValueError, "window_size", q):
        hfa.flash_attn_func(q, q, q, window_size=(left, right))


@pytest.mark.parametrize("value", HUGE)
def test_kvcache_integers_out_of_range(value):
    a = kvcache_arrays()
    for name in ("cache_seqlens", "num_splits", "split_size"):
        kw = {"cache_seqlens": SEQLENS, name: value}
        with rejected(ValueError, name, *a.values()):
            hfa.flash_attn_with_kvcache(a["q"], a["k_cache"], a["v_cache"], **kw)


# Wrapped to 32 bits, each is 8: the right bound, so a wrapped value would be taken silently.
@pytest.mark.parametrize("value", [2 ** 32 + 8, -2 ** 32 + 8, 2 ** 40 + 8, np.int64(2 ** 33 + 8)])
def test_max_seqlen_out_of_range(value):
    q, out, lse = forward_case()
    flat, cu = q.reshape(8, 2, 64), np.array([0, 8], np.int32)
    flat_out, flat_lse = out.reshape(8, 2, 64), np.ascontiguousarray(lse[0])
    for name in ("max_seqlen_q", "max_seqlen_k"):
        lengths = {"max_seqlen_q": 8, "max_seqlen_k": 8, name: value}
        with rejected(ValueError, name, flat, cu):
            hfa.flash_attn_varlen_func(flat, flat, flat, cu, cu, **lengths)
        with rejected(ValueError, name, flat, cu, flat_out, flat_lse):
            hfa.flash_attn_backward(flat_out, flat, flat, flat, flat_out, flat_lse,
                                    cu_seqlens_q=cu, cu_seqlens_k=cu, **lengths)
        with rejected(ValueError, name, flat, cu, flat_out, flat_lse):
            hfa.flash_attn_accumulate(flat, flat, flat, flat_out, flat_lse, cu_seqlens_q=cu,
                                      cu_seqlens_k=cu, **lengths)


def test_integers_of_the_wrong_type():
    a = kvcache_arrays()
    for name, value in (("num_splits", 1.5), ("split_size", "64"), ("cache_seqlens", True)):
        kw = {"cache_seqlens": SEQLENS, name: value}
        with rejected(TypeError, name, *a.values()):
            hfa.flash_attn_with_kvcache(a["q"], a["k_cache"], a["v_cache"], **kw)
