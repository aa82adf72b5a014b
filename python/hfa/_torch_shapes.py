"""The shapes and dtypes of what hfa's torch ops return: one rule for the fake kernels
(python/hfa/_torch.py), the ctypes ops (_torch_ctypes.py) and, in C++, src/torch/ops.cpp."""

import torch

# fp8 inputs (forward only) give bf16 outputs (docs/design.md §3); the dtypes exist from torch 2.1.
FP8_DTYPES = {getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)}


def out_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.bfloat16 if dtype in FP8_DTYPES else dtype


def is_varlen(cu_seqlens_q, cu_seqlens_k) -> bool:
    """Whether q, k, v and out are (total_tokens, heads, headdim): either cu_seqlens given (the
    library names the other when it is missing)."""
    return cu_seqlens_q is not None or cu_seqlens_k is not None


def out_shapes(q: torch.Tensor, v: torch.Tensor, varlen: bool):
    """(out shape, lse shape) of a forward; q and v of the rank the layout wants."""
    want = 3 if varlen else 4
    if q.dim() != want:
        layout = "(total_tokens, heads, headdim)" if varlen else "(batch, seqlen, heads, headdim)"
        raise ValueError(f"q: expected rank {want} {layout}, got shape {tuple(q.shape)}")
    if v.dim() != want:
        raise ValueError(f"v: expected rank {want}, got shape {tuple(v.shape)}")
    out_shape = tuple(q.shape[:-1]) + (v.shape[-1],)
    return out_shape, lse_shape(q, varlen)


def lse_shape(q: torch.Tensor, varlen: bool):
    return (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])


def dsinks_shape(sinks):
    # An op cannot return None: without sinks, dsinks is an empty tensor.
    return tuple(sinks.shape) if sinks is not None else (0,)
