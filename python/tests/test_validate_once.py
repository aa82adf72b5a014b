"""Every call validates once: a front end prepares it (hfa._lib.prepare_*: the arguments checked,
the workspace sized), allocates the workspace and runs it, where a workspace query and the call
made two validations. The library counts the problems it builds on the calling thread
(hfa_detail_validations, a test hook outside hfa.h; tests/api/test_prepared_call.cpp counts the
C ABI's). numpy here; where torch is installed, torch's ctypes calls (flash_attn_accumulate, the
backward with softmax_d) and, where they are loaded (HFA_TORCH_OPS), the C++ torch ops
(src/torch/ops.cpp), each op through the front end and the autograd function."""

import ctypes
import types

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


def test_mla_validates_once():
    rng = np.random.default_rng(6)
    q, cache = arrays(rng, (2, 2, 16, 576), (4, 64, 1, 576))
    table, seqlens = np.array([[2, 0], [1, 3]], np.int32), np.array([100, 7], np.int32)
    count, _ = validations_of(lambda: hfa.flash_mla_with_kvcache(
        q, cache, table, seqlens, 512, hfa.get_mla_metadata()[0], causal=True))
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


def torch_ops(native=False):
    """torch and hfa's torch front end, or a skip."""
    torch = pytest.importorskip("torch", minversion="2.4",
                                reason="torch is not installed: its ops are untested here")
    from hfa import _torch
    if native and not _torch.NATIVE:
        pytest.skip(f"the C++ torch ops are not loaded; these run through {_torch.OPS}")
    return torch


def native_inputs(torch):
    """The tensors of NATIVE_CALLS."""
    g = torch.Generator().manual_seed(6)
    x = types.SimpleNamespace()
    x.q, x.k, x.v, x.out = (torch.randn(2, 5, 4, 64, generator=g) for _ in range(4))
    x.qv, x.kv, x.vv = (torch.randn(9, 4, 64, generator=g) for _ in range(3))
    x.lse = torch.zeros(2, 4, 5)  # any values do for a backward's validation
    x.cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    x.sinks = torch.randn(4, generator=g)
    x.qd, x.outd, x.k_new, x.v_new = (torch.randn(2, 1, 4, 64, generator=g) for _ in range(4))
    x.k_cache, x.v_cache = (torch.randn(2, 16, 4, 64, generator=g) for _ in range(2))
    x.seqlens = torch.tensor([3, 9], dtype=torch.int32)
    return x


# Each C++ op, by a front-end call that runs it.
NATIVE_CALLS = {
    "hfa::attention": lambda x: hfa.flash_attn_func(x.q, x.k, x.v, causal=True),
    "hfa::fwd": lambda x: hfa.flash_attn_func(x.q, x.k, x.v, learnable_sink=x.sinks),
    "hfa::fwd_into": lambda x: hfa.flash_attn_func(x.q, x.k, x.v, out=x.out),
    "hfa::varlen_attention": lambda x: hfa.flash_attn_varlen_func(x.qv, x.kv, x.vv, x.cu, x.cu,
                                                                  5, 5),
    "hfa::bwd": lambda x: hfa.flash_attn_backward(x.out, x.q, x.k, x.v, x.out, x.lse),
    "hfa::kvcache_attention": lambda x: hfa.flash_attn_with_kvcache(
        x.qd, x.k_cache, x.v_cache, cache_seqlens=x.seqlens),
    "hfa::fwd_kvcache": lambda x: hfa.flash_attn_with_kvcache(
        x.qd, x.k_cache, x.v_cache, k=x.k_new, v=x.v_new, cache_seqlens=x.seqlens, causal=True),
    "hfa::fwd_kvcache_into": lambda x: hfa.flash_attn_with_kvcache(
        x.qd, x.k_cache, x.v_cache, cache_seqlens=x.seqlens, out=x.outd),
}


@pytest.mark.parametrize("op", NATIVE_CALLS)
def test_torch_native_ops_validate_once(op):
    """src/torch/ops.cpp prepares each call (hfa_prepare_*) and runs it: one validation an op
    call."""
    torch = torch_ops(native=True)
    x = native_inputs(torch)
    count, _ = validations_of(lambda: NATIVE_CALLS[op](x))
    assert count == 1


def test_torch_native_autograd_validates_once_each_way():
    """A training step through the C++ autograd function: one forward, one backward."""
    torch = torch_ops(native=True)
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 6, 2, 64, generator=g).requires_grad_() for _ in range(3))
    count, out = validations_of(lambda: hfa.flash_attn_func(q, k, v, causal=True))
    assert count == 1
    count, _ = validations_of(lambda: out.sum().backward())
    assert count == 1
    assert q.grad is not None and k.grad is not None and v.grad is not None


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "grad"])
@pytest.mark.parametrize("given", ["cu_seqlens_q", "cu_seqlens_k"])
def test_torch_lone_cu_seqlens_is_named_by_the_library(given, grad):
    """The varlen pairing is the library's to check on either torch path (native ops, ctypes):
    its message reaches the caller, whichever cu_seqlens is missing."""
    torch = torch_ops()
    g = torch.Generator().manual_seed(8)
    q = torch.randn(9, 4, 64, generator=g).requires_grad_(grad)
    k, v = (torch.randn(12, 2, 64, generator=g) for _ in range(2))
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    missing, = {"cu_seqlens_q", "cu_seqlens_k"} - {given}
    cu_q, cu_k = (cu, None) if given == "cu_seqlens_q" else (None, cu)
    with pytest.raises(ValueError, match=rf"^{missing}: is null but {given} is given \(varlen "
                                         r"needs both\)$"):
        hfa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 7)
