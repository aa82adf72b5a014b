"""The scalar arguments every entry point shares (hfa._args): window_size and the switches
raise errors naming the argument instead of unpacking errors or truthiness."""

import numpy as np
import pytest

import hfa
from hfa import _args


def entry_points():
    """(name, call(**kw)) for each Python entry point, on small numpy inputs."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4, 2, 64)).astype(np.float32)
    flat = q.reshape(4, 2, 64)
    cu = np.array([0, 4], np.int32)
    out, lse = hfa.flash_attn_func(q, q, q, return_attn_probs=True)
    return [
        ("flash_attn_func", lambda **kw: hfa.flash_attn_func(q, q, q, **kw)),
        ("flash_attn_varlen_func",
         lambda **kw: hfa.flash_attn_varlen_func(flat, flat, flat, cu, cu, 4, 4, **kw)),
        ("flash_attn_backward", lambda **kw: hfa.flash_attn_backward(out, q, q, q, out, lse, **kw)),
        ("flash_attn_with_kvcache",
         lambda **kw: hfa.flash_attn_with_kvcache(q[:, :1], q, q, cache_seqlens=4, **kw)),
    ]


ENTRY_POINTS = entry_points()
IDS = [name for name, _ in ENTRY_POINTS]


@pytest.mark.parametrize("call", [c for _, c in ENTRY_POINTS], ids=IDS)
def test_window_size_of_the_wrong_length(call):
    for bad in [(1, 2, 3), (5,), ()]:
        with pytest.raises(ValueError, match=r"^window_size: expected a \(left, right\) pair"):
            call(window_size=bad)


@pytest.mark.parametrize("call", [c for _, c in ENTRY_POINTS], ids=IDS)
def test_window_size_of_the_wrong_type(call):
    for bad in [3, "1,2", (1.5, 0), ("a", 0), (True, 0)]:
        with pytest.raises(TypeError, match=r"^window_size: "):
            call(window_size=bad)


@pytest.mark.parametrize("call", [c for _, c in ENTRY_POINTS], ids=IDS)
def test_causal_must_be_a_bool(call):
    for bad in ["no", "False", None, 2, 1.0]:
        with pytest.raises(TypeError, match=r"^causal: expected a bool"):
            call(causal=bad)


@pytest.mark.parametrize("call", [c for _, c in ENTRY_POINTS], ids=IDS)
def test_accepted_spellings_agree(call):
    """bool, numpy bool and 0/1 give the same result; None and numpy ints in the window too."""
    base = call(causal=True, window_size=(2, 0))
    base = base[0] if isinstance(base, tuple) else base
    for causal, window in [(np.bool_(True), (np.int64(2), 0)), (1, [2, 0])]:
        got = call(causal=causal, window_size=window)
        got = got[0] if isinstance(got, tuple) else got
        assert np.array_equal(got, base)
    unbounded = call(window_size=(None, None))
    unbounded = unbounded[0] if isinstance(unbounded, tuple) else unbounded
    plain = call()
    plain = plain[0] if isinstance(plain, tuple) else plain
    assert np.array_equal(unbounded, plain)


def test_other_switches_are_checked():
    name, call = ENTRY_POINTS[0]
    with pytest.raises(TypeError, match=r"^return_attn_probs: expected a bool"):
        call(return_attn_probs="yes")
    with pytest.raises(TypeError, match=r"^deterministic: expected a bool"):
        call(deterministic="yes")
    _, kvcache = ENTRY_POINTS[3]
    with pytest.raises(TypeError, match=r"^rotary_interleaved: expected a bool"):
        kvcache(rotary_interleaved="no")
    with pytest.raises(TypeError, match=r"^return_softmax_lse: expected a bool"):
        kvcache(return_softmax_lse="no")


def test_helpers():
    assert _args.window((None, 3)) == (-1, 3)
    assert _args.flag(np.bool_(False), "causal") is False
    assert _args.flag(0, "causal") is False
