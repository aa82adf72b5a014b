"""Ring attention over variable-length sequences packed as (total_tokens, heads, headdim), as
FlashAttention's varlen functions take them and zhuzilin's ring_flash_attn_varlen_func /
zigzag_ring_flash_attn_varlen_func shard them: every sequence is split over the ranks on its
own, so every rank holds the same number of tokens of each sequence and one cu_seqlens (of the
local tokens: the global one divided by the world size) describes every rank's shard.

  "zigzag": sequence b (length L_b, divisible by 2P) is cut into 2P chunks; rank r holds
      chunks r and 2P-1-r of it, in that order. Its local length L_b / P is even.
  "contiguous": rank r holds chunk r of P of each sequence (L_b divisible by P).

The steps are the fixed-length ring's (ring.py), sequence by sequence, with no copy of the
inputs: a step that needs only part of each local sequence says so to the varlen call.
  - keys_first_half (zigzag, src < rank): every local query against the first half of each
    sequence's keys: seqused_k = the half lengths.
  - queries_second_half (zigzag, src > rank): the second half of each sequence's queries against
    all its keys. The query rows are re-cut into batch + 1 sequences: re-cut sequence b + 1
    starts at sequence b's second half and runs on over sequence b + 1's first half, which
    seqused_q leaves out; re-cut sequence 0 is sequence 0's first half, left out whole, with no
    keys. So cu_seqlens_q = [0, c_0 + h_0, c_1 + h_1, ..., total], cu_seqlens_k = [0, c_0, c_1,
    ..., total] and seqused_q = [0, h_0, h_1, ...], h_b being the half lengths and c_b the local
    offsets. The rows left out come back as out 0 / lse -inf, which the merge skips, and get
    dq 0.
"""

import torch

import hfa
from hfa import _args

from ._comm import communicator
from . import ring
from .ring import LAYOUTS, merge_attn_partial, step_softmax_d


class VarlenShard:
    """The varlen arguments of every kind of step, for one local cu_seqlens (on q's device):
    each a dict of flash_attn_varlen_func / flash_attn_backward keywords."""

    def __init__(self, cu_seqlens, max_seqlen):
        cu = cu_seqlens
        zero = cu[:1]
        half = (cu[1:] - cu[:-1]) // 2
        # The local lengths are at most max_seqlen, and so is every re-cut sequence of
        # queries_second_half (h_b + h_(b+1) <= the longer of the two).
        sizes = dict(max_seqlen_q=max_seqlen, max_seqlen_k=max_seqlen)
        self.whole = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, **sizes)
        self.keys_first_half = dict(self.whole, seqused_k=half)
        self.queries_second_half = dict(
            cu_seqlens_q=torch.cat([zero, cu[:-1] + half, cu[-1:]]),
            cu_seqlens_k=torch.cat([zero, cu]),
            seqused_q=torch.cat([zero, half]), **sizes)


def _varlen_step(src, rank, causal, layout, shard):
    """What rank `rank` computes against the K/V of rank `src`: (varlen keywords, causal), or
    None when no query of it sees any of those keys (ring._step_block, per sequence)."""
    if src == rank:
        return shard.whole, causal  # the diagonal block, local positions in order
    if not causal:
        return shard.whole, False
    if layout == "contiguous":
        return (shard.whole, False) if src < rank else None
    if src < rank:  # both local chunks come after src's first chunk and before its second
        return shard.keys_first_half, False
    return shard.queries_second_half, False  # only the local second chunk sees src's chunks


def _merge_rows(out, lse, out_part, lse_part):
    """merge_attn_partial for varlen rows: (total, heads, d) and (heads, total) seen as one
    sequence of a batch of one."""
    merge_attn_partial(out[None], lse[None], out_part[None], lse_part[None])


def ring_varlen_forward(comm, q, k, v, shard, softmax_scale, causal, layout, sm_margin=0):
    """One rank's forward: fp32 out (total, heads_q, headdim_v) and lse (heads_q, total) of its
    queries over every rank's keys of their sequences."""
    world, rank = comm.world, comm.rank
    out = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=torch.float32, device=q.device)
    for step in range(world):
        next_kv = comm.shift([k, v]) if step + 1 < world else None
        block = _varlen_step((rank - step) % world, rank, causal, layout, shard)
        if step == 0:  # see ring.first_step
            lse = ring.first_step(q, k, v, out, softmax_scale, block[1], sm_margin, **block[0])
        elif block is not None:
            varlen, block_causal = block
            if ring.ACCUMULATE_IN_KERNEL:  # see there
                hfa.flash_attn_accumulate(q, k, v, out, lse, softmax_scale=softmax_scale,
                                          causal=block_causal, sm_margin=sm_margin, **varlen)
            else:
                out_part, lse_part = hfa.flash_attn_varlen_func(
                    q, k, v, softmax_scale=softmax_scale, causal=block_causal,
                    return_attn_probs=True, sm_margin=sm_margin, **varlen)
                _merge_rows(out, lse, out_part, lse_part)
        if next_kv is not None:
            k, v = next_kv.wait()
    return out, lse


def ring_varlen_backward(comm, dout, q, k, v, out, lse, shard, softmax_scale, causal, layout,
                         sm_margin=0):
    """One rank's backward: (dq, dk, dv) in the inputs' dtypes. out is the final output in q's
    dtype, lse the final fp32 LSE (heads_q, total), contiguous; the dK/dV accumulators travel
    with the K/V as in ring.ring_backward."""
    world, rank = comm.world, comm.rank
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    given_d = {"softmax_d": step_softmax_d(dout, out)} if ring.ACCUMULATE_IN_KERNEL else {}
    incoming_dkv = None
    for step in range(world):
        next_kv = comm.shift([k, v]) if step + 1 < world else None
        block = _varlen_step((rank - step) % world, rank, causal, layout, shard)
        grads = None
        if block is not None:
            varlen, block_causal = block
            grads = hfa.flash_attn_backward(dout, q, k, v, out, lse, softmax_scale=softmax_scale,
                                            causal=block_causal, sm_margin=sm_margin, **varlen,
                                            **given_d)
        if incoming_dkv is None:  # step 0: the accumulators of this rank's own K/V start here
            dk_acc = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
            dv_acc = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
        else:
            dk_acc, dv_acc = incoming_dkv.wait()
        if grads is not None:  # rows a step left out have zero gradients: add them all
            dq_part, dk_part, dv_part = grads
            dq += dq_part
            dk_acc += dk_part
            dv_acc += dv_part
        incoming_dkv = comm.shift([dk_acc, dv_acc])
        if next_kv is not None:
            k, v = next_kv.wait()
    dk, dv = incoming_dkv.wait()
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


# --- the checks --------------------------------------------------------------------------------

def local_lengths(cu_seqlens):
    """The local sequence lengths, read on the host (a device-to-host copy for a GPU tensor)."""
    if isinstance(cu_seqlens, torch.Tensor):
        values = cu_seqlens.tolist()
    else:
        values = [int(c) for c in cu_seqlens]
    return [b - a for a, b in zip(values, values[1:])]


def check_varlen_args(q, k, v, cu_seqlens, max_seqlen, world, layout):
    """The checks every rank can make alone; cu_seqlens is read on the host (each local length
    must split into the layout's chunks, and a wrong one would give wrong results silently)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(LAYOUTS)}, got {layout!r}")
    if world < 1:
        raise ValueError(f"group: expected a world size >= 1, got {world}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise ValueError(f"{name}: expected (total_tokens, heads, headdim), got shape "
                             f"{tuple(t.shape)}")
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:
        raise ValueError(f"k, v: expected the same local tokens as q ({q.shape[0]}), got "
                         f"{k.shape[0]} and {v.shape[0]} (ring attention is self-attention "
                         f"over one cu_seqlens)")
    if isinstance(cu_seqlens, torch.Tensor) and cu_seqlens.dtype != torch.int32:
        raise TypeError(f"cu_seqlens: expected int32, got {cu_seqlens.dtype}")
    lengths = local_lengths(cu_seqlens)
    if not lengths or any(n < 0 for n in lengths) or sum(lengths) != q.shape[0]:
        raise ValueError(f"cu_seqlens: expected offsets of the local sequences, from 0 to q's "
                         f"{q.shape[0]} tokens, never decreasing; got lengths {lengths}")
    if max(lengths) > max_seqlen:
        raise ValueError(f"max_seqlen: {max_seqlen} is less than the longest local sequence "
                         f"({max(lengths)})")
    odd = [b for b, n in enumerate(lengths) if n % 2]
    if layout == "zigzag" and odd:
        raise ValueError(f"cu_seqlens: local sequence {odd[0]} has {lengths[odd[0]]} tokens; a "
                         f"zigzag shard of a sequence holds two equal chunks (each sequence's "
                         f"global length must be divisible by 2 * world = {2 * world})")


def on_device(cu_seqlens, device):
    """cu_seqlens (an int32 tensor anywhere, or a list) as an int32 tensor on `device`."""
    if isinstance(cu_seqlens, torch.Tensor):
        return cu_seqlens.to(device)
    return torch.tensor(list(cu_seqlens), dtype=torch.int32, device=device)


# --- the entry point ---------------------------------------------------------------------------

class _RingVarlenAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, comm, shard, options):
        """options: (softmax_scale, causal, layout, sm_margin)."""
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out, lse = ring_varlen_forward(comm, q, k, v, shard, *options)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.comm, ctx.shard, ctx.options = comm, shard, options
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        with torch.no_grad():
            dq, dk, dv = ring_varlen_backward(ctx.comm, dout.contiguous(), q, k, v, out, lse,
                                              ctx.shard, *ctx.options)
        return dq, dk, dv, None, None, None


def ring_flash_attn_varlen_func(q, k, v, cu_seqlens, max_seqlen, group=None, causal=False,
                                softmax_scale=None, layout="zigzag", return_attn_probs=False,
                                sm_margin=0):
    """Exact attention over variable-length sequences, each sharded across the ranks of
    `group` (zhuzilin's zigzag_ring_flash_attn_varlen_func, or ring_flash_attn_varlen_func with
    layout="contiguous").

    q (total_local, heads_q, headdim), k/v (total_local, heads_kv, headdim): this rank's tokens
    of every sequence, sequence after sequence (shard with zigzag_shard_varlen; RoPE positions
    from zigzag_positions_varlen). cu_seqlens: int32 (batch + 1) offsets of the LOCAL sequences,
    the same on every rank: the global cu_seqlens divided by the world size (each global length
    divisible by 2 * world in the zigzag layout, by world in the contiguous one); read on the
    host once per call to check that, a copy and a sync for a GPU tensor (a CPU tensor or a list
    costs none). max_seqlen: the longest local sequence. causal: within each sequence. GQA/MQA,
    group, sm_margin and return_attn_probs as ring_flash_attn_func's; the LSE is (heads_q,
    total_local). Every rank must call with the same shapes and options, and backpropagate
    through the output."""
    comm = communicator(group)
    check_varlen_args(q, k, v, cu_seqlens, max_seqlen, comm.world, layout)
    shard = VarlenShard(on_device(cu_seqlens, q.device), int(max_seqlen))
    options = (softmax_scale, bool(causal), layout, _args.sm_margin(sm_margin))
    out, lse = _RingVarlenAttention.apply(q, k, v, comm, shard, options)
    return (out, lse) if return_attn_probs else out


# --- the zigzag layout of packed sequences -----------------------------------------------------

def _global_lengths(cu_seqlens, world):
    lengths = local_lengths(cu_seqlens)
    for b, n in enumerate(lengths):
        if n % (2 * world):
            raise ValueError(f"cu_seqlens: sequence {b} has {n} tokens, which do not split into "
                             f"2 * world = {2 * world} equal chunks")
    return lengths


def zigzag_shard_varlen(x, cu_seqlens, rank, world, dim=0):
    """Rank `rank`'s part of packed sequences x (tokens along `dim`, delimited by the GLOBAL
    cu_seqlens): chunks rank and 2*world-1-rank of 2*world of each sequence, sequence after
    sequence. Its local cu_seqlens is cu_seqlens // world."""
    if not 0 <= rank < world:
        raise ValueError(f"rank: expected an int in [0, {world}), got {rank!r}")
    pieces, start = [], 0
    for n in _global_lengths(cu_seqlens, world):
        chunk = n // (2 * world)
        pieces.append(x.narrow(dim, start + rank * chunk, chunk))
        pieces.append(x.narrow(dim, start + (2 * world - 1 - rank) * chunk, chunk))
        start += n
    return torch.cat(pieces, dim)


def zigzag_unshard_varlen(shards, cu_seqlens, dim=0):
    """The packed sequences from every rank's zigzag_shard_varlen, shards[r] being rank r's."""
    shards = list(shards)
    world = len(shards)
    if not world:
        raise ValueError("shards: expected one tensor per rank, got none")
    pieces, start = [], 0  # start: the sequence's first row in every shard
    for n in _global_lengths(cu_seqlens, world):
        chunk = n // (2 * world)
        pieces += [shard.narrow(dim, start, chunk) for shard in shards]
        pieces += [shard.narrow(dim, start + chunk, chunk) for shard in reversed(shards)]
        start += 2 * chunk
    return torch.cat(pieces, dim)


def zigzag_positions_varlen(cu_seqlens, rank, world, device=None):
    """Positions (int64, for RoPE position ids) of the tokens rank `rank` holds of each packed
    sequence, counted from each sequence's start (the global cu_seqlens): sequence after
    sequence, the two runs of ring.zigzag_positions."""
    if not 0 <= rank < world:
        raise ValueError(f"rank: expected an int in [0, {world}), got {rank!r}")
    runs = []
    for n in _global_lengths(cu_seqlens, world):
        chunk = n // (2 * world)
        for first in (rank * chunk, (2 * world - 1 - rank) * chunk):
            runs.append(torch.arange(first, first + chunk, device=device))
    return torch.cat(runs) if runs else torch.zeros(0, dtype=torch.int64, device=device)
