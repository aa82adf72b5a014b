"""Ulysses (DeepSpeed) attention: an all-to-all trades the sequence split for a head split,
each rank runs one full-sequence attention on heads/P of the heads, and a second all-to-all
trades back. The backward does the same with dout and the gradients (an all-to-all's adjoint
is the inverse all-to-all)."""

import torch

import hfa
from hfa import _args

from ._comm import communicator
from .ring import check_ring_args, zigzag_shard, zigzag_unshard


def _join_sequence(pieces, layout):
    return torch.cat(pieces, 1) if layout == "contiguous" else zigzag_unshard(pieces, 1)


def _split_sequence(x, world, layout):
    if layout == "contiguous":
        return list(x.chunk(world, 1))
    return [zigzag_shard(x, r, world, 1) for r in range(world)]


def _to_head_split(comm, x, layout):
    """(batch, seqlen_local, heads, d) → (batch, seqlen, heads / P, d): this rank's heads of
    every rank's tokens, in global sequence order."""
    pieces = comm.all_to_all(list(x.chunk(comm.world, 2)))
    return _join_sequence(pieces, layout)


def _to_sequence_split(comm, x, layout):
    """The inverse of _to_head_split."""
    pieces = comm.all_to_all(_split_sequence(x, comm.world, layout))
    return torch.cat(pieces, 2)


def ulysses_forward(comm, q, k, v, softmax_scale, causal, layout, sm_margin=0):
    """One rank's forward: (out, saved) with saved what ulysses_backward needs."""
    qh, kh, vh = (_to_head_split(comm, t, layout) for t in (q, k, v))
    out_h, lse_h = hfa.flash_attn_func(qh, kh, vh, softmax_scale=softmax_scale, causal=causal,
                                       return_attn_probs=True, sm_margin=sm_margin)
    return _to_sequence_split(comm, out_h, layout), (qh, kh, vh, out_h, lse_h)


def ulysses_backward(comm, dout, saved, softmax_scale, causal, layout, sm_margin=0):
    qh, kh, vh, out_h, lse_h = saved
    dout_h = _to_head_split(comm, dout, layout)
    dq_h, dk_h, dv_h = hfa.flash_attn_backward(dout_h, qh, kh, vh, out_h, lse_h,
                                               softmax_scale=softmax_scale, causal=causal,
                                               sm_margin=sm_margin)
    return tuple(_to_sequence_split(comm, g, layout) for g in (dq_h, dk_h, dv_h))


def check_ulysses_args(q, k, v, world, layout):
    """The ring's checks (the same shards), and heads that split over the ranks."""
    check_ring_args(q, k, v, world, layout)
    if q.shape[2] % world:
        raise ValueError(f"q: heads_q = {q.shape[2]} is not divisible by the world size "
                         f"{world} (Ulysses splits the heads over the ranks; use ring attention)")
    if k.shape[2] % world:
        raise ValueError(f"k: heads_kv = {k.shape[2]} is not divisible by the world size "
                         f"{world} (Ulysses splits the heads over the ranks; use ring attention)")


class _UlyssesAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, comm, options):
        """options: (softmax_scale, causal, layout, sm_margin), ulysses_forward's."""
        out, saved = ulysses_forward(comm, q, k, v, *options)
        ctx.save_for_backward(*saved)
        ctx.comm, ctx.options = comm, options
        return out

    @staticmethod
    def backward(ctx, dout):
        with torch.no_grad():
            dq, dk, dv = ulysses_backward(ctx.comm, dout.contiguous(), ctx.saved_tensors,
                                          *ctx.options)
        return dq, dk, dv, None, None


def ulysses_flash_attn_func(q, k, v, group=None, causal=False, softmax_scale=None,
                            layout="zigzag", sm_margin=0):
    """Exact attention over a sequence sharded across the ranks of `group`, by a head
    all-to-all. Arguments and layouts as ring_flash_attn_func (the same shards work for both);
    heads_q and heads_kv must be divisible by the world size. sm_margin: as
    hfa.flash_attn_func's, for the one attention (which runs after the all-to-all, not beside
    it). Returns out (as q)."""
    comm = communicator(group)
    check_ulysses_args(q, k, v, comm.world, layout)
    options = (softmax_scale, bool(causal), layout, _args.sm_margin(sm_margin))
    return _UlyssesAttention.apply(q, k, v, comm, options)
