"""Every call validates once: a front end prepares it (hfa._lib.prepare_*: the arguments checked,
the workspace sized), allocates the workspace and runs it, where a workspace query and the call
made two validations. The library counts the problems it builds on the calling thread
(hfa_detail_validations, a test hook outside hfa.h; tests/api/test_prepared_call.cpp counts the
C ABI's). numpy here; torch's ctypes calls (flash_attn_accumulate, the backward with softmax_d)
where torch is installed."""

import ctypes

import numpy as np
import pytest

import hfa
from hfa import _lib


def validations_of(call):
    """The validations `call` makes on this thread, and its result."""
    count = _lib.library().hfa_detail_validations
    count.restype = ctypes.c_uint64
    before = count()
    result = call()
    return count() - before, result


def arrays(rng, *shapes):
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


def test_forward_and_backward_validate_once():
    q, k, v = arrays(np.random.default_rng(0), (2, 5, 4, 64), (2, 7, 2, 64), (2, 7, 2, 64))
    count, (out, lse) = validations_of(
        lambda: hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True))
    assert count == 1
    dout = np.ones_like(out)
    count, _ = validations_of(lambda: hfa.flash_attn_backward(dout, q, k, v, out, lse,
                                                              causal=True))
    assert count == 1


def test_varlen_forward_validates_once():
    q, k, v = arrays(np.random.default_rng(1), (9, 4, 64), (12, 2, 64), (12, 2, 64))
    cu_q, cu_k = np.array([0, 4, 9], np.int32), np.array([0, 5, 12], np.int32)
    count, _ = validations_of(lambda: hfa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 7))
    assert count == 1


def test_accumulate_validates_once():
    q, k, v = arrays(np.random.default_rng(2), (1, 3, 2, 64), (1, 8, 2, 64), (1, 8, 2, 64))
    out = np.zeros((1, 3, 2, 64), np.float32)
    lse = np.full((1, 2, 3), -np.inf, np.float32)
    count, _ = validations_of(lambda: hfa.flash_attn_accumulate(q, k, v, out, lse))
    assert count == 1


def test_kvcache_validates_once():
    rng = np.random.default_rng(3)
    q, k_cache, v_cache, k_new, v_new = arrays(rng, (2, 1, 4, 64), (2, 16, 2, 64), (2, 16, 2, 64),
                                               (2, 1, 2, 64), (2, 1, 2, 64))
    seqlens = np.array([3, 9], np.int32)
    count, _ = validations_of(lambda: hfa.flash_attn_with_kvcache(
        q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=seqlens, causal=True))
    assert count == 1


# The varlen pairing is checked once, in the library: its message reaches the caller.
def test_a_lone_cu_seqlens_is_named_by_the_library():
    q, k, v = arrays(np.random.default_rng(4), (9, 4, 64), (12, 2, 64), (12, 2, 64))
    cu = np.array([0, 4, 9], np.int32)
    with pytest.raises(hfa.HfaInvalidArgument,
                       match=r"^cu_seqlens_k: is null but cu_seqlens_q is given \(varlen needs "
                             r"both\)$"):
        hfa.flash_attn_varlen_func(q, k, v, cu, None, 5, 7)


def test_torch_ctypes_calls_validate_once():
    torch = pytest.importorskip("torch", minversion="2.4",
                                reason="torch is not installed: its ctypes calls are untested here")
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 6, 2, 64, generator=g) for _ in range(3))
    out = torch.zeros(1, 6, 2, 64)
    lse = torch.full((1, 2, 6), float("-inf"))
    count, _ = validations_of(lambda: hfa.flash_attn_accumulate(q, k, v, out, lse))
    assert count == 1
    d = (out * out).sum(-1).transpose(1, 2).contiguous()  # rowsum(dout * out), dout = out
    count, _ = validations_of(lambda: hfa.flash_attn_backward(out, q, k, v, out, lse,
                                                              softmax_d=d))
    assert count == 1
    cu = torch.tensor([0, 6], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^cu_seqlens_q: is null but cu_seqlens_k is given"):
        hfa.flash_attn_accumulate(q[0], k[0], v[0], out[0], lse[0], cu_seqlens_k=cu,
                                  max_seqlen_q=6, max_seqlen_k=6)
