"""sm_margin (FlashAttention-3's: SMs the GPU call leaves free for NCCL's kernels) through the
numpy front end: the CPU accepts it and computes the same bytes; a negative value is the
library's error naming it (which also shows the ctypes structs carry the field at the offset
hfa.h gives it); a non-integer or one beyond int32 is rejected before the call."""

import numpy as np
import pytest

import hfa
from hfa import _lib


def _inputs(seed=0, batch=2, seqlen=24, heads=(4, 2), headdim=64):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, seqlen, heads[0], headdim)).astype(np.float32)
    k, v = (rng.standard_normal((batch, seqlen, heads[1], headdim)).astype(np.float32)
            for _ in range(2))
    return q, k, v


def _assert_same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_the_cpu_ignores_it():
    q, k, v = _inputs()
    plain = hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    margin = hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True, sm_margin=16)
    _assert_same(plain, margin)
    dout = np.ones_like(plain[0])
    grads = [hfa.flash_attn_backward(dout, q, k, v, *plain, causal=True, sm_margin=m)
             for m in (0, 16)]
    _assert_same(*grads)


def test_the_cpu_ignores_it_varlen_and_kvcache():
    q, k, v = _inputs()
    cu = np.array([0, 10, 48], np.int32)
    flat = [t.reshape(-1, *t.shape[2:]) for t in (q, k, v)]
    plain, margin = (hfa.flash_attn_varlen_func(*flat, cu, cu, None, None, sm_margin=m)
                     for m in (0, 8))
    np.testing.assert_array_equal(plain, margin)
    lengths = np.array([24, 7], np.int32)
    plain, margin = (hfa.flash_attn_with_kvcache(q[:, :1], k, v, cache_seqlens=lengths,
                                                 return_softmax_lse=True, sm_margin=m)
                     for m in (0, 8))
    _assert_same(plain, margin)


def test_negative_is_the_library_error():
    q, k, v = _inputs()
    message = "^sm_margin: must be >= 0 \\(SMs left free; 0 = use every SM\\), got -1"
    with pytest.raises(hfa.HfaInvalidArgument, match=message):
        hfa.flash_attn_func(q, k, v, sm_margin=-1)
    out, lse = hfa.flash_attn_func(q, k, v, return_attn_probs=True)
    with pytest.raises(hfa.HfaInvalidArgument, match=message):
        hfa.flash_attn_backward(out, q, k, v, out, lse, sm_margin=-1)
    with pytest.raises(hfa.HfaInvalidArgument, match=message):
        hfa.flash_attn_with_kvcache(q[:, :1], k, v, sm_margin=-1)
    cu = np.array([0, 48], np.int32)
    flat = [t.reshape(-1, *t.shape[2:]) for t in (q, k, v)]
    with pytest.raises(hfa.HfaInvalidArgument, match=message):
        hfa.flash_attn_varlen_func(*flat, cu, cu, 48, 48, sm_margin=-1)


@pytest.mark.parametrize("bad,error", [(True, TypeError), (1.5, TypeError), ("2", TypeError),
                                       (None, TypeError), (2 ** 31, ValueError)])
def test_not_an_int32_is_rejected_first(bad, error):
    q, k, v = _inputs()
    with pytest.raises(error, match="^sm_margin: "):
        hfa.flash_attn_func(q, k, v, sm_margin=bad)
    with pytest.raises(error, match="^sm_margin: "):
        hfa.flash_attn_with_kvcache(q[:, :1], k, v, sm_margin=bad)


def test_numpy_integers_are_taken():
    q, k, v = _inputs()
    out = hfa.flash_attn_func(q, k, v, sm_margin=np.int64(3))
    np.testing.assert_array_equal(out, hfa.flash_attn_func(q, k, v))


def test_the_ctypes_structs_place_it_as_hfa_h():
    # Appended in hfa.h after the fields that keep their offsets: the same in the mirror (both
    # structs have gained rows after it since).
    names = [name for name, _ in _lib.Options._fields_]
    assert names[names.index("descale_block_kv") + 1] == "sm_margin"
    assert dict(_lib.Options._fields_)["sm_margin"] == _lib.ctypes.c_int32
    kv_names = [name for name, _ in _lib.KVCacheOptions._fields_]
    assert kv_names[kv_names.index("cu_seqlens_k_new") + 1] == "sm_margin"
    assert dict(_lib.KVCacheOptions._fields_)["sm_margin"] == _lib.ctypes.c_int32
    assert _lib.make_options().sm_margin == 0
    assert _lib.make_kvcache_options().sm_margin == 0
    assert _lib.make_options(sm_margin=5).sm_margin == 5
