"""merge_partials over hfa_merge_partials (hfa.h), for numpy arrays and torch tensors (CPU and
CUDA; the front ends of hfa._quant): partial attention results of the same queries over disjoint
sets of keys (ring attention's steps, a KV cache split over devices) merged into one by their
LSEs, in one pass over memory.
"""

from __future__ import annotations

from . import _lib, _quant


def merge_partials(outs, lses, out=None, lse=None):
    """(out, lse): the partials (outs[i], lses[i]) merged, lse = log(sum(exp(lse_i))) and
    out = sum(exp(lse_i - lse) * out_i), in float32.

    outs: N <= 16 partial outputs (batch, seqlen_q, heads, hdim_v), or varlen (total_q, heads,
    hdim_v); torch float32, bfloat16 or float16 (CPU or CUDA), numpy float32 or float16, each
    its own dtype. lses: their float32 LSEs (batch, heads, seqlen_q), or (heads, total_q): what
    flash_attn_func(..., return_attn_probs=True) returns; any strides. A row a partial does not
    see (lse_i = -inf) is never read from its out_i (NaN there is harmless); a row no partial
    sees gets out 0 and lse -inf.
    out / lse: buffers to write into (out float32, bfloat16 or float16; lse float32), taken as
    they are, never copied; None: new float32 ones, out shaped like outs[0]. out may be
    outs[i] itself and lse lses[i] itself: an in-place merge, e.g. into a ring's running result;
    any other overlap of an output with an input is an error. Not differentiable. A CUDA call
    runs on the current stream of outs[0]'s device."""
    outs, lses = list(outs), list(lses)
    if not outs or not lses:
        raise ValueError(f"{'outs' if not outs else 'lses'}: expected at least one partial, "
                         "got none")
    fe = _quant._torch_side() if _quant._is_torch(outs[0]) else _quant._NumpySide()
    keep = []
    # The partials first: the outputs' defaults are shaped after them.
    out_views = [fe.view(t, f"outs[{i}]", keep) for i, t in enumerate(outs)]
    lse_views = [fe.view(t, f"lses[{i}]", keep) for i, t in enumerate(lses)]
    if out is None:
        out = fe.empty_values(tuple(outs[0].shape), None, outs[0])
    if lse is None:
        lse = fe.empty_values(_lse_shape(tuple(out.shape), tuple(lses[0].shape)), None, outs[0])
    _lib.merge_partials(out_views, lse_views, fe.view(out, "out", keep, written=True),
                        fe.view(lse, "lse", keep, written=True), fe.stream(outs[0]))
    return out, lse


def _lse_shape(out_shape, otherwise):
    """The LSE layout of out's rows, as the forward writes it: (batch, heads, seqlen_q), or
    (heads, total_q) for varlen; `otherwise` for an out of another rank (the library names it)."""
    if len(out_shape) == 4:
        return out_shape[0], out_shape[2], out_shape[1]
    return (out_shape[1], out_shape[0]) if len(out_shape) == 3 else otherwise
