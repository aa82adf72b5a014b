"""The numpy front end: forward and backward on host arrays through the CPU backend.

numpy has no bfloat16 and no fp8, so arrays are float32 or float16 (q, k, v of one dtype);
cu_seqlens are int32. Outputs are allocated here with numpy; the library allocates nothing.
"""

from __future__ import annotations

import numpy as np

from . import _args, _lib

# numpy's dtypes as hfa._args' element kinds: numpy has no bfloat16 and no fp8 (FP8 and FP4
# codes and their scales are uint8).
_KINDS = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.int32): "i32",
          np.dtype(np.uint8): "u8"}


def view(a, name: str, bytes_as=None, written=False):
    """(array kept alive, hfa Tensor) for a host array, labelled with its own dtype (uint8 as
    the byte format bytes_as; hfa._args.array_code). An array the call only reads is copied
    where the library cannot take it as it is (last dim not unit-stride, negative strides, e.g.
    from [::-1]); other strides are passed unchanged. One the call writes (written=True) is
    never copied: it must be writeable, and the library names a layout it cannot take."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name}: expected a numpy array, got {type(a).__name__}")
    code = _args.array_code(name, _KINDS.get(a.dtype), a.dtype, bytes_as)
    _args.check_array(name, a.ndim, a.flags.writeable, written)
    if a.flags.c_contiguous:  # the usual array: whole, non-negative steps, its packed strides
        return a, _lib.make_tensor(a.ctypes.data, code, a.shape, _packed_strides(a.shape))
    item = a.itemsize
    steps = [s for n, s in zip(a.shape, a.strides) if n > 1]  # what _strides keeps
    if written:
        if any(s % item for s in steps):
            raise ValueError(f"{name}: strides {a.strides} are not whole elements")
    elif ((a.ndim and a.shape[-1] > 1 and a.strides[-1] != item)
            or any(s % item or s < 0 for s in steps)):
        a = np.ascontiguousarray(a)
    return a, _lib.make_tensor(a.ctypes.data, code, a.shape, _strides(a))


def check_out(out) -> None:
    """A caller's out= that the result is copied into once the call has run (hfa._kvcache.into)
    is checked before it runs: a read-only one is rejected, naming it, before any work."""
    if out is not None:
        view(out, "out", written=True)


def _packed_strides(shape):
    """The element strides of a C-contiguous array of this shape (a dim of extent 0 counted as
    1, so that every stride is positive)."""
    packed, run = [], 1
    for n in reversed(shape):
        packed.append(run)
        run *= max(int(n), 1)
    packed.reverse()
    return packed


def _strides(a):
    """Element strides. A dim of extent 1, and every dim of an array with no elements, has no
    step to keep: numpy may report any stride there (negative, 0, not whole elements), so it
    gets the packed one."""
    packed = _packed_strides(a.shape)
    if a.size == 0:
        return packed
    return [p if n == 1 else s // a.itemsize for n, s, p in zip(a.shape, a.strides, packed)]


def _cu_view(cu, name):
    """cu_seqlens, whose values are read here (_max_len) before the library checks them."""
    a, t = view(cu, name)
    if a.dtype != np.int32:
        raise TypeError(f"{name}: expected an int32 array, got {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array (batch + 1), got shape {a.shape}")
    return a, t


def _max_len(cu, given):
    if given is not None:
        return given  # checked by hfa._args.integer
    # The library wants a positive bound even when every sequence is empty.
    return max(1, int(np.max(np.diff(cu)))) if cu.size > 1 else 1


def _out_shapes(q, v, varlen: bool):
    """Shapes of out and lse for q and v (FlashAttention's layouts)."""
    want = 3 if varlen else 4
    if q.ndim != want:
        layout = "(total_tokens, heads, headdim)" if varlen else "(batch, seqlen, heads, headdim)"
        raise ValueError(f"q: expected rank {want} {layout}, got shape {tuple(q.shape)}")
    if v.ndim < 1:
        raise ValueError(f"v: expected rank {want}, got shape {tuple(v.shape)}")
    out_shape = tuple(q.shape[:-1]) + (v.shape[-1],)
    if varlen:
        lse_shape = (q.shape[1], q.shape[0])  # (heads_q, total_q)
    else:
        lse_shape = (q.shape[0], q.shape[2], q.shape[1])  # (batch, heads_q, seqlen_q)
    return out_shape, lse_shape


def _vector_view(a, name, dtype):
    """(array kept alive, hfa Tensor) for a 1-D vector (sinks, seqused_*): sinks are converted
    to float32 (FA's learnable_sink is a float parameter of any precision); seqused must be
    int32 already, like cu_seqlens (the library names another dtype)."""
    if dtype == np.float32 and isinstance(a, np.ndarray) and a.dtype.kind == "f":
        a = a.astype(np.float32, copy=False)
    a, t = view(a, name)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {a.shape}")
    return a, t


def _options(softmax_scale, causal, window_size, softcap, deterministic, cu_q, cu_k,
             max_seqlen_q, max_seqlen_k, sinks=None, seqused_q=None, seqused_k=None,
             dsinks=None, sm_margin=0, accumulate=False, softmax_d=None, options=None):
    """Options plus the views it points at (keep both alive for the call). options: the rows
    given by their caller names ({field: value}, hfa._args.options), each array labelled with
    its own dtype for the library to check."""
    keep = []
    vectors = {}
    if options:
        for field, value in options.items():
            info = _lib.option_rows(_lib.Options)[field]
            if info.kind in _lib._POINTERS and value is not None:
                value, vectors[field] = view(value, info.caller.decode())
                keep += [value, vectors[field]]
            else:
                vectors[field] = value
    for name, a, dtype in (("sinks", sinks, np.float32), ("seqused_q", seqused_q, np.int32),
                           ("seqused_k", seqused_k, np.int32), ("dsinks", dsinks, np.float32)):
        if a is not None:
            label = "learnable_sink" if name == "sinks" else name
            a, vectors[name] = _vector_view(a, label, dtype)
            keep += [a, vectors[name]]
    cu_q_t = cu_k_t = None  # one without the other: the library names the missing one
    if cu_q is not None:
        cu_q, cu_q_t = _cu_view(cu_q, "cu_seqlens_q")
        max_seqlen_q = _max_len(cu_q, max_seqlen_q)
        keep += [cu_q, cu_q_t]
    if cu_k is not None:
        cu_k, cu_k_t = _cu_view(cu_k, "cu_seqlens_k")
        max_seqlen_k = _max_len(cu_k, max_seqlen_k)
        keep += [cu_k, cu_k_t]
    opts = _lib.make_options(softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                             softcap=softcap, deterministic=deterministic, cu_seqlens_q=cu_q_t,
                             cu_seqlens_k=cu_k_t, max_seqlen_q=max_seqlen_q or 0,
                             max_seqlen_k=max_seqlen_k or 0, sm_margin=sm_margin,
                             accumulate=accumulate, softmax_d=softmax_d, **vectors)
    return opts, keep


def workspace(nbytes: int):
    """(array, address) of nbytes of host memory: a prepared call's workspace (hfa._lib.run)."""
    scratch = np.empty(nbytes, dtype=np.uint8)
    return scratch, scratch.ctypes.data


def forward(q, k, v, *, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
            cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
            out=None, lse=None, learnable_sink=None, seqused_q=None, seqused_k=None,
            sm_margin=0, accumulate=False, options=None):
    """(out, lse) for host arrays. `out` / `lse` may be given (preallocated, any strides with
    a unit last one); out is of q's dtype or float32, lse float32 (batch, heads_q, seqlen_q), or
    (heads_q, total_q) for varlen. learnable_sink: one logit per query head (float32).
    seqused_q/k: int32 used lengths per sequence; the library leaves the rows beyond seqused_q
    untouched, so the out / lse allocated here hold 0 / -inf there (a preallocated out / lse
    keeps what it had). accumulate: merge into the given float32 out and lse (hfa.h)."""
    varlen = cu_seqlens_q is not None
    q, qt = view(q, "q")
    k, kt = view(k, "k")
    v, vt = view(v, "v")
    out_shape, lse_shape = _out_shapes(q, v, varlen)
    if out is None:
        out = np.zeros(out_shape, dtype=q.dtype) if seqused_q is not None else \
            np.empty(out_shape, dtype=q.dtype)
    if lse is None:
        lse = np.full(lse_shape, -np.inf, dtype=np.float32) if seqused_q is not None else \
            np.empty(lse_shape, dtype=np.float32)
    out, ot = view(out, "out", written=True)
    lse, lt = view(lse, "lse", written=True)
    opts, keep = _options(softmax_scale, causal, window_size, softcap, False, cu_seqlens_q,
                          cu_seqlens_k, max_seqlen_q, max_seqlen_k, learnable_sink, seqused_q,
                          seqused_k, sm_margin=sm_margin, accumulate=accumulate,
                          options=options)
    _lib.run(_lib.prepare_forward(qt, kt, vt, ot, lt, opts), workspace)
    del keep
    return out, lse


def backward(dout, q, k, v, out, lse, *, softmax_scale=None, causal=False, window_size=(-1, -1),
             softcap=0.0, deterministic=False, cu_seqlens_q=None, cu_seqlens_k=None,
             max_seqlen_q=None, max_seqlen_k=None, learnable_sink=None, seqused_q=None,
             seqused_k=None, sm_margin=0, softmax_d=None, options=None):
    """(dq, dk, dv) for host arrays, given the forward's out and lse. With GQA, dk and dv hold
    the sum over the query heads of each group. With learnable_sink: (dq, dk, dv, dsink),
    dsink float32 like the sinks. Gradient rows beyond seqused_q/k are 0. softmax_d: the given
    D = rowsum(dout * out), float32 laid out as lse (then out is not read)."""
    dout, dot = view(dout, "dout")
    q, qt = view(q, "q")
    k, kt = view(k, "k")
    v, vt = view(v, "v")
    out, ot = view(out, "out")
    lse, lt = view(lse, "lse")
    d_t = None
    if softmax_d is not None:
        softmax_d, d_t = view(softmax_d, "softmax_d")
    dq = np.empty(q.shape, dtype=q.dtype)
    dk = np.empty(k.shape, dtype=k.dtype)
    dv = np.empty(v.shape, dtype=v.dtype)
    _, dqt = view(dq, "dq", written=True)
    _, dkt = view(dk, "dk", written=True)
    _, dvt = view(dv, "dv", written=True)
    dsink = None
    if learnable_sink is not None:
        dsink = np.empty(np.shape(learnable_sink), dtype=np.float32)
    opts, keep = _options(softmax_scale, causal, window_size, softcap, deterministic,
                          cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, learnable_sink,
                          seqused_q, seqused_k, dsink, sm_margin, softmax_d=d_t,
                          options=options)
    _lib.run(_lib.prepare_backward(dot, qt, kt, vt, ot, lt, dqt, dkt, dvt, opts), workspace)
    del keep, softmax_d
    return (dq, dk, dv) if dsink is None else (dq, dk, dv, dsink)
