"""hfa's torch ops over the C ABI through ctypes, for a libhfa without its C++ torch ops.

The fallback of python/hfa/_torch.py: where libhfa_torch (src/torch/ops.cpp) was not built (no
torch at build time), hfa::fwd and hfa::bwd are registered here with torch.library.custom_op,
with the same schemas and an autograd formula (register_autograd), at ~90 us of host time a call
instead of a few. The fake kernels live in _torch.py (one set for both). fwd_into (the native
op's out= form) is a plain function here, for what hfa::fwd cannot return: an f16 out of FP8
inputs.

This module deliberately has no `from __future__ import annotations`: custom_op infers the op
schema from the real annotation objects.
"""

import contextlib
from typing import Optional, Tuple

import torch

from . import _lib
from ._torch_shapes import dsinks_shape, lse_shape, out_dtype, out_shapes

Tensor = torch.Tensor

_DTYPES = {
    torch.float32: _lib.F32,
    torch.float16: _lib.F16,
    torch.bfloat16: _lib.BF16,
    torch.int32: _lib.I32,
}
# fp8 dtypes exist from torch 2.1; forward only (the library rejects them in the backward).
for _name, _code in (("float8_e4m3fn", _lib.E4M3), ("float8_e5m2", _lib.E5M2)):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _code


def _view(t: Tensor, name: str):
    """(tensor kept alive, hfa Tensor). A tensor whose last dim is not unit-stride is copied;
    other strides go to the library unchanged."""
    if isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        t = t.contiguous()
    return t, _view_as_is(t, name)


def _view_as_is(t: Tensor, name: str):
    """The hfa Tensor of t with all its strides (outputs, and descales, which may be
    broadcast views)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in _DTYPES:
        raise TypeError(f"{name}: dtype {t.dtype} is not supported")
    if t.device.type == "cuda":
        device, index = _lib.CUDA, t.device.index if t.device.index is not None else 0
    elif t.device.type == "cpu":
        device, index = _lib.CPU, 0
    else:
        raise ValueError(f"{name}: device {t.device} is not supported (cpu or cuda)")
    return _lib.make_tensor(t.data_ptr(), _DTYPES[t.dtype], t.shape, t.stride(), device, index)


@contextlib.contextmanager
def _on_device(t: Tensor):
    """Make t's GPU current for the call (the library launches on the current device)."""
    if t.device.type == "cuda":
        with torch.cuda.device(t.device):
            yield
    else:
        yield


class _Call:
    """Options for one library call plus everything they point at, kept alive together."""

    def __init__(self, ref: Tensor, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                 softmax_scale, causal, window_left, window_right, softcap, deterministic,
                 sinks=None, seqused_q=None, seqused_k=None, dsinks=None, q_descale=None,
                 k_descale=None, v_descale=None, descale_block_q=0, descale_block_kv=0,
                 sm_margin=0):
        if (cu_seqlens_q is None) != (cu_seqlens_k is None):
            raise ValueError("cu_seqlens_q, cu_seqlens_k: give both or neither")
        self.keep = []
        cu_q_t = cu_k_t = None
        if cu_seqlens_q is not None:
            cu_q, cu_q_t = _view(cu_seqlens_q, "cu_seqlens_q")
            cu_k, cu_k_t = _view(cu_seqlens_k, "cu_seqlens_k")
            self.keep += [cu_q, cu_k, cu_q_t, cu_k_t]
        vectors = {}
        for name, t in (("sinks", sinks), ("seqused_q", seqused_q), ("seqused_k", seqused_k),
                        ("dsinks", dsinks)):
            if t is not None:
                t, vectors[name] = _view(t, name)
                self.keep += [t, vectors[name]]
        for name, t in (("q_descale", q_descale), ("k_descale", k_descale),
                        ("v_descale", v_descale)):
            if t is not None:
                vectors[name] = _view_as_is(t, name)
                self.keep += [t, vectors[name]]
        stream = None
        if ref.device.type == "cuda":
            stream = torch.cuda.current_stream(ref.device).cuda_stream
        self.options = _lib.make_options(
            softmax_scale=softmax_scale, causal=causal, window_size=(window_left, window_right),
            softcap=softcap, deterministic=deterministic, cu_seqlens_q=cu_q_t,
            cu_seqlens_k=cu_k_t, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
            stream=stream, descale_block_q=descale_block_q, descale_block_kv=descale_block_kv,
            sm_margin=sm_margin, **vectors)
        self.device = ref.device

    def workspace(self, nbytes: int) -> None:
        if nbytes:
            ws = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            self.keep.append(ws)
            self.options.workspace = ws.data_ptr()
            self.options.workspace_bytes = nbytes


# --- hfa::fwd ----------------------------------------------------------------------------------

def _new_lse(q: Tensor, varlen: bool, rows_may_stay_unwritten: bool) -> Tensor:
    shape = lse_shape(q, varlen)
    if rows_may_stay_unwritten:  # rows beyond seqused_q read as an empty row's -inf
        return torch.full(shape, float("-inf"), dtype=torch.float32, device=q.device)
    return torch.empty(shape, dtype=torch.float32, device=q.device)


def _forward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
             softmax_scale, causal, window_left, window_right, softcap, sinks, seqused_q,
             seqused_k, q_descale, k_descale, v_descale, descale_block_q,
             descale_block_kv, sm_margin) -> None:
    """The library's forward into out and lse, taken as they are."""
    q, qt = _view(q, "q")
    k, kt = _view(k, "k")
    v, vt = _view(v, "v")
    ot, lt = _view_as_is(out, "out"), _view_as_is(lse, "lse")
    call = _Call(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                 causal, window_left, window_right, softcap, False, sinks, seqused_q, seqused_k,
                 None, q_descale, k_descale, v_descale, descale_block_q, descale_block_kv,
                 sm_margin)
    with _on_device(q):
        call.workspace(_lib.forward_workspace_size(qt, kt, vt, call.options))
        _lib.forward(qt, kt, vt, ot, lt, call.options)


@torch.library.custom_op("hfa::fwd", mutates_args=())
def fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor],
        cu_seqlens_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
        softmax_scale: Optional[float], causal: bool, window_left: int, window_right: int,
        softcap: float, deterministic: bool, sinks: Optional[Tensor] = None,
        seqused_q: Optional[Tensor] = None, seqused_k: Optional[Tensor] = None,
        q_descale: Optional[Tensor] = None, k_descale: Optional[Tensor] = None,
        v_descale: Optional[Tensor] = None, descale_block_q: int = 0,
        descale_block_kv: int = 0, sm_margin: int = 0) -> Tuple[Tensor, Tensor]:
    """(out, lse). `deterministic` is unused here; it rides along for the backward (so does
    sm_margin, which both use). sinks: float32 (heads_q,); seqused_q/k: int32 (batch,). The
    library leaves the out and lse rows beyond seqused_q untouched, so with seqused_q they are
    allocated as 0 and -inf. The descales (float32) and block sizes are those of float8 e4m3
    inputs (hfa.h); out is then bfloat16."""
    varlen = cu_seqlens_q is not None
    out_shape, _ = out_shapes(q, v, varlen)
    partial = seqused_q is not None
    out = (torch.zeros if partial else torch.empty)(out_shape, dtype=out_dtype(q.dtype),
                                                    device=q.device)
    lse = _new_lse(q, varlen, partial)
    _forward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
             softmax_scale, causal, window_left, window_right, softcap, sinks, seqused_q,
             seqused_k, q_descale, k_descale, v_descale, descale_block_q, descale_block_kv,
             sm_margin)
    return out, lse


def fwd_into(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
             causal, window_left, window_right, softcap, sinks=None, seqused_q=None,
             seqused_k=None, q_descale=None, k_descale=None, v_descale=None, descale_block_q=0,
             descale_block_kv=0, sm_margin=0, *, out):
    """lse, the forward written into a caller's out (eager only: not an op here, unlike the
    native hfa::fwd_into of the same arguments)."""
    lse = _new_lse(q, cu_seqlens_q is not None, seqused_q is not None)
    _forward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
             softmax_scale, causal, window_left, window_right, softcap, sinks, seqused_q,
             seqused_k, q_descale, k_descale, v_descale, descale_block_q, descale_block_kv,
             sm_margin)
    return lse


# --- hfa::bwd ----------------------------------------------------------------------------------

@torch.library.custom_op("hfa::bwd", mutates_args=())
def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
        cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_q: int,
        max_seqlen_k: int, softmax_scale: Optional[float], causal: bool, window_left: int,
        window_right: int, softcap: float, deterministic: bool, sinks: Optional[Tensor] = None,
        seqused_q: Optional[Tensor] = None, seqused_k: Optional[Tensor] = None,
        sm_margin: int = 0) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, dsinks): the first three of their input's shape and dtype, contiguous;
    dsinks float32 (heads_q,) with sinks, else empty (0,). Gradient rows beyond seqused are 0."""
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    dsinks = torch.empty(dsinks_shape(sinks), dtype=torch.float32, device=q.device)
    dout, dot = _view(dout, "dout")
    q, qt = _view(q, "q")
    k, kt = _view(k, "k")
    v, vt = _view(v, "v")
    out, ot = _view(out, "out")
    lse, lt = _view(lse, "lse")
    _, dqt = _view(dq, "dq")
    _, dkt = _view(dk, "dk")
    _, dvt = _view(dv, "dv")
    call = _Call(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                 causal, window_left, window_right, softcap, deterministic, sinks, seqused_q,
                 seqused_k, dsinks if sinks is not None else None, sm_margin=sm_margin)
    with _on_device(q):
        call.workspace(_lib.backward_workspace_size(qt, kt, vt, call.options))
        _lib.backward(dot, qt, kt, vt, ot, lt, dqt, dkt, dvt, call.options)
    return dq, dk, dv, dsinks


# --- autograd ----------------------------------------------------------------------------------

def _setup_context(ctx, inputs, output):
    (q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, wl, wr, softcap, deterministic) = inputs[:13]
    # sinks, seqused_q, seqused_k (and the descales) have defaults: a caller of the op may leave
    # them out. No descale is saved: FP8 inputs have no backward (hfa::bwd says so).
    sinks, seqused_q, seqused_k = (tuple(inputs[13:16]) + (None,) * 3)[:3]
    # sm_margin, after the five FP8 arguments, has a default too; the backward uses it as well.
    ctx.sm_margin = inputs[21] if len(inputs) > 21 else 0
    ctx.num_inputs = len(inputs)
    out, lse = output
    # No gradient flows through the LSE (the C ABI has no dLSE input yet, and FlashAttention-3
    # drops it silently). Marking it says so: lse.requires_grad is False.
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, sinks, seqused_q, seqused_k)
    ctx.params = (max_q, max_k, scale, causal, wl, wr, softcap, deterministic)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, cu_q, cu_k, sinks, seqused_q, seqused_k = ctx.saved_tensors
    if grad_out is None:  # only lse was used downstream: the gradient through out is zero
        grad_out = torch.zeros_like(out)
    # grad_lse is None or zeros: lse is marked non-differentiable in _setup_context.
    dq, dk, dv, dsinks = torch.ops.hfa.bwd(grad_out, q, k, v, out, lse, cu_q, cu_k, *ctx.params,
                                           sinks, seqused_q, seqused_k, ctx.sm_margin)
    # One entry per input of hfa::fwd: q, k, v, ten options, then sinks, seqused_q, seqused_k,
    # the five FP8 arguments and sm_margin (as many of those as the call passed).
    grads = (dq, dk, dv) + (None,) * 10 + (dsinks if sinks is not None else None,) + (None,) * 8
    return grads[:ctx.num_inputs]


fwd.register_autograd(_backward, setup_context=_setup_context)
