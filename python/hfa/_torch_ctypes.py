"""hfa's torch ops over the C ABI through ctypes, for a libhfa without its C++ torch ops.

The fallback of python/hfa/_torch.py: where libhfa_torch (src/torch/ops.cpp) was not built (no
torch at build time), hfa::fwd and hfa::bwd are registered here with torch.library.custom_op,
with the same schemas and an autograd formula (register_autograd), at ~90 us of host time a call
instead of a few. The fake kernels live in _torch.py (one set for both). fwd_into (the native
op's out= form) is a plain function here, for what hfa::fwd cannot return: an f16 out of FP8
inputs.

This module deliberately has no `from __future__ import annotations`: custom_op infers the op
schema from the real annotation objects. python/tests/test_torch_schema.py checks those schemas
against the native ops' and their option arguments against the library's description.
"""

import types
from typing import List, Optional, Tuple

import torch

from ._block_mask import TENSORS as BLOCK_SPARSE_TENSORS
from ._torch_calls import backward_into, forward_into
from ._torch_shapes import dsinks_shape, is_varlen, lse_shape, out_dtype, out_shapes

Tensor = torch.Tensor


def _block_sparse(*tensors) -> dict:
    """The ops' block-sparse arguments, after `vectors` in their order (kv_num_blocks ...
    kv_mask_bits: hfa._block_mask.TENSORS), as {field: tensor} for the library's options (the
    block sizes, scalar rows, come in `scalars`)."""
    return dict(zip(BLOCK_SPARSE_TENSORS, tensors))


def spelled_schema(fn) -> str:
    """fn's schema as torch.library.infer_schema makes it, for a torch that cannot infer the type
    of `vectors`, Optional[List[Optional[Tensor]]] (2.11 refuses it; 2.15 takes it): inferred with
    `vectors` annotated Optional[Tensor], then spelled as the list it is."""
    stand_in = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                                  fn.__closure__)
    stand_in.__kwdefaults__ = fn.__kwdefaults__
    stand_in.__annotations__ = {**fn.__annotations__, "vectors": Optional[Tensor]}
    schema = torch.library.infer_schema(stand_in, mutates_args=())
    return schema.replace("Tensor? vectors=None", "Tensor?[]? vectors=None")


def _custom_op(name: str):
    """torch.library.custom_op(name, mutates_args=()), its schema inferred, or spelled out
    (spelled_schema) where this torch's inference refuses `vectors`."""
    def register(fn):
        try:
            return torch.library.custom_op(name, fn, mutates_args=())
        except ValueError:
            return torch.library.custom_op(name, fn, mutates_args=(), schema=spelled_schema(fn))
    return register


# --- hfa::fwd ----------------------------------------------------------------------------------

def _new_lse(q: Tensor, varlen: bool, rows_may_stay_unwritten: bool) -> Tensor:
    shape = lse_shape(q, varlen)
    if rows_may_stay_unwritten:  # rows beyond seqused_q read as an empty row's -inf
        return torch.full(shape, float("-inf"), dtype=torch.float32, device=q.device)
    return torch.empty(shape, dtype=torch.float32, device=q.device)


@_custom_op("hfa::fwd")
def fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor],
        cu_seqlens_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
        softmax_scale: Optional[float], causal: bool, window_left: int, window_right: int,
        softcap: float, deterministic: bool, sinks: Optional[Tensor] = None,
        seqused_q: Optional[Tensor] = None, seqused_k: Optional[Tensor] = None,
        q_descale: Optional[Tensor] = None, k_descale: Optional[Tensor] = None,
        v_descale: Optional[Tensor] = None, descale_block_q: int = 0,
        descale_block_kv: int = 0, sm_margin: int = 0,
        vectors: Optional[List[Optional[Tensor]]] = None,
        kv_num_blocks: Optional[Tensor] = None, kv_indices: Optional[Tensor] = None,
        full_kv_num_blocks: Optional[Tensor] = None, full_kv_indices: Optional[Tensor] = None,
        kv_mask_bits: Optional[Tensor] = None,
        scalars: Optional[List[float]] = None) -> Tuple[Tensor, Tensor]:
    """(out, lse). `deterministic` is unused here; it rides along for the backward (so does
    sm_margin, which both use). sinks: float32 (heads_q,); seqused_q/k: int32 (batch,). The
    library leaves the out and lse rows beyond seqused_q untouched, so with seqused_q they are
    allocated as 0 and -inf. The descales (float32) and block sizes are those of float8 e4m3
    inputs (hfa.h); out is then bfloat16. vectors: the VECTOR rows' tensors, in their order;
    then the block-sparse rows' tensors (hfa/options.def); scalars: (row, value) pairs setting
    scalar rows (src/torch/ops.cpp)."""
    varlen = is_varlen(cu_seqlens_q, cu_seqlens_k)
    out_shape, _ = out_shapes(q, v, varlen)
    partial = seqused_q is not None
    out = (torch.zeros if partial else torch.empty)(out_shape, dtype=out_dtype(q.dtype),
                                                    device=q.device)
    lse = _new_lse(q, varlen, partial)
    forward_into(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
             softmax_scale, causal, window_left, window_right, softcap, sinks, seqused_q,
             seqused_k, q_descale, k_descale, v_descale, descale_block_q, descale_block_kv,
             sm_margin, vectors=vectors,
             tensors=_block_sparse(kv_num_blocks, kv_indices, full_kv_num_blocks,
                                   full_kv_indices, kv_mask_bits), scalars=scalars)
    return out, lse


def fwd_into(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
             causal, window_left, window_right, softcap, sinks=None, seqused_q=None,
             seqused_k=None, q_descale=None, k_descale=None, v_descale=None, descale_block_q=0,
             descale_block_kv=0, sm_margin=0, vectors=None, kv_num_blocks=None, kv_indices=None,
             full_kv_num_blocks=None, full_kv_indices=None, kv_mask_bits=None, scalars=None, *,
             out):
    """lse, the forward written into a caller's out (eager only: not an op here, unlike the
    native hfa::fwd_into of the same arguments)."""
    lse = _new_lse(q, is_varlen(cu_seqlens_q, cu_seqlens_k), seqused_q is not None)
    forward_into(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
             softmax_scale, causal, window_left, window_right, softcap, sinks, seqused_q,
             seqused_k, q_descale, k_descale, v_descale, descale_block_q, descale_block_kv,
             sm_margin, vectors=vectors,
             tensors=_block_sparse(kv_num_blocks, kv_indices, full_kv_num_blocks,
                                   full_kv_indices, kv_mask_bits), scalars=scalars)
    return lse


# --- hfa::bwd ----------------------------------------------------------------------------------

@_custom_op("hfa::bwd")
def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
        cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_q: int,
        max_seqlen_k: int, softmax_scale: Optional[float], causal: bool, window_left: int,
        window_right: int, softcap: float, deterministic: bool, sinks: Optional[Tensor] = None,
        seqused_q: Optional[Tensor] = None, seqused_k: Optional[Tensor] = None,
        sm_margin: int = 0, vectors: Optional[List[Optional[Tensor]]] = None,
        kv_num_blocks: Optional[Tensor] = None, kv_indices: Optional[Tensor] = None,
        full_kv_num_blocks: Optional[Tensor] = None, full_kv_indices: Optional[Tensor] = None,
        kv_mask_bits: Optional[Tensor] = None, scalars: Optional[List[float]] = None
        ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, dsinks): the first three of their input's shape and dtype, contiguous;
    dsinks float32 (heads_q,) with sinks, else empty (0,). Gradient rows beyond seqused are 0."""
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    dsinks = torch.empty(dsinks_shape(sinks), dtype=torch.float32, device=q.device)
    backward_into(dout, q, k, v, out, lse, dq, dk, dv, dsinks, cu_seqlens_q, cu_seqlens_k,
                  max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right,
                  softcap, deterministic, sinks, seqused_q, seqused_k, sm_margin, vectors=vectors,
                  tensors=_block_sparse(kv_num_blocks, kv_indices, full_kv_num_blocks,
                                        full_kv_indices, kv_mask_bits), scalars=scalars)
    return dq, dk, dv, dsinks


# --- autograd ----------------------------------------------------------------------------------

_SCALARS = 23 + len(BLOCK_SPARSE_TENSORS)  # where hfa::fwd's `scalars` lies among its inputs


def _setup_context(ctx, inputs, output):
    (q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, wl, wr, softcap, deterministic) = inputs[:13]
    # sinks, seqused_q, seqused_k (and the descales) have defaults: a caller of the op may leave
    # them out. No descale is saved: FP8 inputs have no backward (hfa::bwd says so).
    sinks, seqused_q, seqused_k = (tuple(inputs[13:16]) + (None,) * 3)[:3]
    # sm_margin, after the five FP8 arguments, has a default too; the backward uses it as well.
    ctx.sm_margin = inputs[21] if len(inputs) > 21 else 0
    ctx.vectors = inputs[22] if len(inputs) > 22 else None  # no gradient: passed on as given
    # The block-sparse tensors after them, read by the backward as the forward's (no gradient),
    # and the scalars, which the backward reads too.
    ctx.block_sparse = _block_sparse(*inputs[23:_SCALARS])
    ctx.scalars = inputs[_SCALARS] if len(inputs) > _SCALARS else None
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
                                           sinks, seqused_q, seqused_k, ctx.sm_margin,
                                           ctx.vectors, **ctx.block_sparse,
                                           scalars=ctx.scalars)
    # One entry per input of hfa::fwd: q, k, v, ten options, then sinks, seqused_q, seqused_k,
    # the five FP8 arguments, sm_margin, the vectors, the block-sparse tensors and the scalars
    # (as many of those as the call passed). A list of tensors takes a list of gradients: one
    # None per vector.
    no_vectors = None if ctx.vectors is None else [None] * len(ctx.vectors)
    grads = (dq, dk, dv) + (None,) * 10 + (dsinks if sinks is not None else None,) + (None,) * 8
    grads += (no_vectors,) + (None,) * len(BLOCK_SPARSE_TENSORS) + (None,)
    # As many as the caller passed: torch 2.11 hands setup_context every input, defaults filled
    # in, but wants gradients only for those given (trailing defaults are dropped on the way
    # in); needs_input_grad has one entry per given input on every version.
    return grads[:len(ctx.needs_input_grad)]


fwd.register_autograd(_backward, setup_context=_setup_context)
