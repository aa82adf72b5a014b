"""PyTorch SDPA runs hfa: `F.scaled_dot_product_attention`'s flash backend on CUDA becomes hfa.

    import hfa.integrations.torch
    hfa.integrations.torch.activate()      # or: register(), then
    # torch.nn.attention.activate_flash_attention_impl("HFA")

This is the hook FlashAttention-3 and -4 use (torch.nn.attention.register_flash_attention_impl,
PyTorch >= 2.11): while active, the CUDA kernels of SDPA's flash ops (aten's
_scaled_dot_product_flash_attention, _flash_attention_forward and their backwards) are hfa's,
so a model written for SDPA runs hfa's forward and backward without a change. SDPA still picks
the backend: a call that its flash backend does not take (an explicit attn_mask, say) runs
SDPA's other backends as before. Nothing activates on import (the registry's rule: several
providers may coexist); `deactivate()` gives SDPA its own flash kernels back.

SDPA's is_causal is top-left aligned where FlashAttention's is bottom-right; SDPA only sends
square causal problems to its flash backend, where the two agree, and a non-square one here
raises rather than answers differently. Dropout raises NotImplementedError (hfa has none).
"""

import torch

from .. import _torch

NAME = "HFA"

_fwd, _fwd_into, _bwd = _torch._fwd, getattr(_torch, "_fwd_into", None), _torch._bwd


def register():
    """Make "HFA" known to torch.nn.attention.activate_flash_attention_impl."""
    attention = getattr(torch.nn, "attention", None)
    if attention is None or not hasattr(attention, "register_flash_attention_impl"):
        raise NotImplementedError(f"hfa.integrations.torch: torch {torch.__version__} has no "
                                  f"torch.nn.attention.register_flash_attention_impl (2.11+)")
    attention.register_flash_attention_impl(NAME, register_fn=_override_kernels)


def activate():
    """register(), then route SDPA's flash backend to hfa."""
    register()
    torch.nn.attention.activate_flash_attention_impl(NAME)


def deactivate():
    """SDPA's own flash kernels again."""
    if torch.nn.attention.current_flash_attention_impl() == NAME:
        torch.nn.attention.restore_flash_attention_impl()


class _Handle:
    """What the registry keeps while hfa is active; remove() drops the overrides."""

    def __init__(self, library):
        self.library = library

    def remove(self):
        self.library._destroy()
        self.library = None


def _override_kernels():
    lib = torch.library.Library("aten", "IMPL", "CUDA")  # noqa: TOR901 (the registry's way)
    lib.impl("_scaled_dot_product_flash_attention", _sdpa_forward, "CUDA")
    lib.impl("_scaled_dot_product_flash_attention_backward", _sdpa_backward, "CUDA")
    lib.impl("_flash_attention_forward", _flash_forward, "CUDA")
    lib.impl("_flash_attention_backward", _flash_backward, "CUDA")
    return _Handle(lib)


def _check(dropout_p, causal, seqlen_q, seqlen_k, return_debug_mask=False):
    if dropout_p:
        raise NotImplementedError("hfa (SDPA's flash backend): dropout_p must be 0; hfa has no "
                                  "dropout (use torch.nn.attention.sdpa_kernel to pick another "
                                  "backend for training with dropout)")
    if return_debug_mask:
        raise NotImplementedError("hfa (SDPA's flash backend): return_debug_mask is not "
                                  "supported")
    if causal and seqlen_q != seqlen_k:
        raise NotImplementedError("hfa (SDPA's flash backend): is_causal with seqlen_q != "
                                  "seqlen_k is top-left aligned in SDPA, bottom-right in hfa")


def _empty_rng_outputs(q):
    # SDPA's flash schema returns the dropout RNG state and a debug mask; without dropout they
    # are placeholders, as FlashAttention-3's registration returns them.
    return (torch.zeros((2,), dtype=torch.uint64, device=q.device),
            torch.zeros((), dtype=torch.uint64, device=q.device),
            torch.empty((0,), dtype=q.dtype, device=q.device))


def _bshd(*tensors):
    return tuple(t.transpose(1, 2) for t in tensors)


def _sdpa_forward(query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False,
                  *, scale=None):
    """(batch, heads, seqlen, headdim) in, the same layout out (query's strides)."""
    _check(dropout_p, is_causal, query.shape[2], key.shape[2], return_debug_mask)
    q, k, v = _bshd(query, key, value)
    # query's memory layout for the output, as SDPA's own kernel gives it.
    out = (torch.empty_like(query) if value.shape[-1] == query.shape[-1]
           else query.new_empty(query.shape[:-1] + (value.shape[-1],)))
    with torch.no_grad():
        _, lse = _torch._forward(q, k, v, out.transpose(1, 2), None, None, 0, 0, scale,
                                 bool(is_causal), -1, -1, 0.0, False, None, None, None)
    rng_state, unused, debug_mask = _empty_rng_outputs(query)
    return (out, lse, None, None, query.shape[2], key.shape[2], rng_state, unused, debug_mask)


def _sdpa_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q,
                   max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale=None):
    _check(dropout_p, is_causal, query.shape[2], key.shape[2])
    dout, q, k, v, o = _bshd(grad_out, query, key, value, out)
    dq, dk, dv, _ = _bwd(dout, q, k, v, o, logsumexp, None, None, 0, 0, scale, bool(is_causal),
                         -1, -1, 0.0, torch.are_deterministic_algorithms_enabled(), None, None,
                         None)
    return _bshd(dq, dk, dv)


def _window(left, right):
    return (-1 if left is None else int(left)), (-1 if right is None else int(right))


def _flash_forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                   return_debug_mask, *, scale=None, window_size_left=None,
                   window_size_right=None, seqused_k=None, alibi_slopes=None):
    """FlashAttention's own layout: (batch, seqlen, heads, headdim), or varlen (total, heads,
    headdim) with cum_seq_q / cum_seq_k."""
    if alibi_slopes is not None:
        raise NotImplementedError("hfa (SDPA's flash backend): alibi_slopes is not supported")
    varlen = cum_seq_q is not None
    _check(dropout_p, is_causal and not varlen, query.shape[1], key.shape[1], return_debug_mask)
    wl, wr = _window(window_size_left, window_size_right)
    with torch.no_grad():
        out, lse = _fwd(query, key, value, cum_seq_q, cum_seq_k, int(max_q) if varlen else 0,
                        int(max_k) if varlen else 0, scale, bool(is_causal), wl, wr, 0.0, False,
                        None, None, seqused_k)
    rng_state, unused, debug_mask = _empty_rng_outputs(query)
    return out, lse, rng_state, unused, debug_mask


def _flash_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q,
                    max_k, dropout_p, is_causal, rng_state, unused, *, scale=None,
                    window_size_left=None, window_size_right=None):
    varlen = cum_seq_q is not None and cum_seq_q.numel() > 0
    _check(dropout_p, is_causal and not varlen, query.shape[1], key.shape[1])
    wl, wr = _window(window_size_left, window_size_right)
    cu_q, cu_k = (cum_seq_q, cum_seq_k) if varlen else (None, None)
    dq, dk, dv, _ = _bwd(grad_out, query, key, value, out, logsumexp, cu_q, cu_k,
                         int(max_q) if varlen else 0, int(max_k) if varlen else 0, scale,
                         bool(is_causal), wl, wr, 0.0,
                         torch.are_deterministic_algorithms_enabled(), None, None, None)
    return dq, dk, dv
