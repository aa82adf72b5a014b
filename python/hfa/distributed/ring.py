"""Ring attention, pass-KV: each rank keeps its queries while the K/V chunks travel the ring.

Forward: P steps; at step s rank r holds the K/V of rank (r - s) mod P, attends to them with
hfa's forward (out_s, lse_s) and merges that into fp32 (O, LSE). The next hop's K/V are sent
before the step's attention and waited for after it.
Backward: the K/V travel again, each with fp32 dK/dV accumulators that collect every rank's
contribution and arrive home after P hops; dQ stays local. Every step's backward uses the
final (out, lse), so each block's probabilities exp(S - LSE) are already the exact ones.

Layouts of the global sequence over P ranks (every rank holds the same number of tokens):
  "contiguous": rank r holds chunk r of P.
  "zigzag": the sequence is cut into 2P chunks; rank r holds chunks r and 2P-1-r (in that
      order). With a causal mask every rank then does the same work at every step.
"""

import functools

import torch

import hfa
from hfa import _args, _lib

from ._comm import communicator

LAYOUTS = ("zigzag", "contiguous")

# Off, as measured (bench_cp.py's ring_split, 2026-12-01-cp-2bf0b5e): when on, each forward step
# merges into the fp32 (O, LSE) in the kernel's epilogue (hfa.flash_attn_accumulate) instead of
# writing a partial that a merge pass reads again, and the backward's steps read one
# D = rowsum(dO∘O) (softmax_d) and slices of the LSE instead of each computing D and copying its
# rows. The same math, but 0.3-2.5 % slower on the H200 at 16k tokens a step, forward and
# forward + backward (not profiled: the epilogue's loads of the running O are the likely cost; a
# consumer waits for them, where the separate pass streams at 0.82x a copy).
# Tests and bench_cp.py set this to compare.
ACCUMULATE_IN_KERNEL = False


# --- the zigzag layout ------------------------------------------------------------------------

def _check_rank(rank, world):
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world: expected a positive int, got {world!r}")
    if not isinstance(rank, int) or not 0 <= rank < world:
        raise ValueError(f"rank: expected an int in [0, {world}), got {rank!r}")


def _zigzag_chunk(seqlen, world, name):
    if seqlen % (2 * world):
        raise ValueError(f"{name}: {seqlen} tokens do not split into 2 * world = {2 * world} "
                         f"equal chunks (the zigzag layout needs seqlen % (2 * world) == 0)")
    return seqlen // (2 * world)


def zigzag_shard(x, rank, world, dim=1):
    """Rank `rank`'s part of the global sequence x (sequence along `dim`): chunks rank and
    2*world-1-rank of 2*world, concatenated."""
    _check_rank(rank, world)
    chunk = _zigzag_chunk(x.shape[dim], world, "x")
    first = x.narrow(dim, rank * chunk, chunk)
    second = x.narrow(dim, (2 * world - 1 - rank) * chunk, chunk)
    return torch.cat([first, second], dim)


def zigzag_unshard(shards, dim=1):
    """The global sequence from every rank's zigzag shard, shards[r] being rank r's."""
    shards = list(shards)
    if not shards:
        raise ValueError("shards: expected one tensor per rank, got none")
    halves = []
    for r, shard in enumerate(shards):
        if shard.shape[dim] % 2:
            raise ValueError(f"shards[{r}]: {shard.shape[dim]} tokens along dim {dim}; a zigzag "
                             f"shard holds two equal chunks")
        halves.append(shard.chunk(2, dim))
    world = len(shards)
    ordered = [halves[r][0] for r in range(world)] + [halves[r][1] for r in reversed(range(world))]
    return torch.cat(ordered, dim)


def zigzag_positions(seqlen, rank, world, device=None):
    """Global positions (int64, for RoPE position ids) of the tokens rank `rank` holds in the
    zigzag layout of a sequence of `seqlen` tokens: not arange(seqlen // world) + offset, but
    two runs, [rank*c, (rank+1)*c) and [(2*world-1-rank)*c, (2*world-rank)*c), with
    c = seqlen / (2*world)."""
    _check_rank(rank, world)
    chunk = _zigzag_chunk(seqlen, world, "seqlen")
    first = torch.arange(rank * chunk, (rank + 1) * chunk, device=device)
    second_start = (2 * world - 1 - rank) * chunk
    second = torch.arange(second_start, second_start + chunk, device=device)
    return torch.cat([first, second])


# --- the merge --------------------------------------------------------------------------------

def merge_attn_partial(out, lse, out_part, lse_part):
    """Merges the attention of the same queries over more keys into (out, lse), in place.

    out: fp32 (batch, seqlen, heads, headdim); lse: fp32 (batch, heads, seqlen), natural log;
    out_part/lse_part: the same of the other keys (out_part of any float dtype). Both may be
    views. A row whose keys are all masked on both sides (lse = lse_part = -inf) keeps out = 0
    and lse = -inf. One hfa.merge_partials call (the fused merge: each input read once) where
    libhfa takes the tensors as they are (on the CPU or a GPU it can use, out_part float32,
    bfloat16 or float16, unit last strides); merge_attn_partial_torch otherwise."""
    if _fused_merge_takes(out, lse, out_part, lse_part):
        hfa.merge_partials([out, out_part], [lse, lse_part], out=out, lse=lse)
    else:
        merge_attn_partial_torch(out, lse, out_part, lse_part)


def merge_attn_partials(out, lse, outs, lses):
    """merge_attn_partial of several partials into (out, lse), in place: one hfa.merge_partials
    call for up to HFA_MAX_MERGE_PARTIALS - 1 of them at a time (out itself is one), each input
    read once, where libhfa takes them all; torch operations otherwise."""
    parts = list(zip(outs, lses))
    per_call = _lib.MAX_MERGE_PARTIALS - 1
    for start in range(0, len(parts), per_call):
        chunk = parts[start:start + per_call]
        if all(_fused_merge_takes(out, lse, o, l) for o, l in chunk):
            hfa.merge_partials([out] + [o for o, _ in chunk], [lse] + [l for _, l in chunk],
                               out=out, lse=lse)
        else:
            for o, l in chunk:
                merge_attn_partial_torch(out, lse, o, l)


def merge_attn_partial_torch(out, lse, out_part, lse_part):
    """merge_attn_partial in torch operations (any dtypes and devices torch has)."""
    lse_new = torch.logaddexp(lse, lse_part)
    # For a row masked on both sides lse_new = -inf and exp(lse - lse_new) would be NaN;
    # measuring from 0 instead gives both weights exp(-inf) = 0, so out stays 0.
    reference = torch.where(torch.isneginf(lse_new), torch.zeros_like(lse_new), lse_new)
    weight = torch.exp(lse - reference).transpose(1, 2).unsqueeze(-1)
    weight_part = torch.exp(lse_part - reference).transpose(1, 2).unsqueeze(-1)
    out.mul_(weight).add_(out_part.float() * weight_part)
    lse.copy_(lse_new)


_FUSED_PART_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _fused_merge_takes(out, lse, out_part, lse_part):
    """Whether hfa.merge_partials takes these tensors as they are."""
    if (out.dtype, lse.dtype, lse_part.dtype) != (torch.float32,) * 3:
        return False
    if out_part.dtype not in _FUSED_PART_DTYPES:
        return False
    if any(t.device != out.device for t in (lse, out_part, lse_part)):
        return False
    if any(t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1 for t in (out, out_part)):
        return False
    return out.device.type == "cpu" or (out.device.type == "cuda" and _library_sees_cuda())


@functools.cache
def _library_sees_cuda():
    return hfa.cuda_device_count() > 0


# --- one rank's steps -------------------------------------------------------------------------

_ALL = slice(None)


def _step_block(src, rank, seqlen, causal, layout):
    """What rank `rank` computes against the K/V of rank `src`: (query rows, key rows, causal)
    as slices of its local chunk, or None when no query of it sees any of those keys."""
    if src == rank:
        return _ALL, _ALL, causal  # the diagonal block, local positions in order
    if not causal:
        return _ALL, _ALL, False
    if layout == "contiguous":
        return (_ALL, _ALL, False) if src < rank else None  # earlier tokens: all seen
    half = seqlen // 2
    if src < rank:
        # Both local chunks come after src's first chunk and before its second.
        return _ALL, slice(0, half), False
    # src > rank: only the local second chunk (near the end) sees src's chunks, both of them.
    return slice(half, None), _ALL, False


def ring_forward(comm, q, k, v, softmax_scale, causal, layout, sm_margin=0):
    """One rank's forward: fp32 (out, lse) of its queries over the whole sequence. sm_margin:
    the SMs every step's attention leaves free (for the transfer running beside it)."""
    world, rank, seqlen = comm.world, comm.rank, q.shape[1]
    out = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=torch.float32, device=q.device)
    for step in range(world):
        next_kv = comm.shift([k, v]) if step + 1 < world else None
        block = _step_block((rank - step) % world, rank, seqlen, causal, layout)
        if step == 0:  # the diagonal block, whole: its f32 result starts (O, LSE), unmerged
            lse = first_step(q, k, v, out, softmax_scale, causal, sm_margin)
        elif block is not None:
            rows, keys, block_causal = block
            if ACCUMULATE_IN_KERNEL:
                hfa.flash_attn_accumulate(q[:, rows], k[:, keys], v[:, keys], out[:, rows],
                                          lse[:, :, rows], softmax_scale=softmax_scale,
                                          causal=block_causal, sm_margin=sm_margin)
            else:
                out_part, lse_part = hfa.flash_attn_func(
                    q[:, rows], k[:, keys], v[:, keys], softmax_scale=softmax_scale,
                    causal=block_causal, return_attn_probs=True, sm_margin=sm_margin)
                merge_attn_partial(out[:, rows], lse[:, :, rows], out_part, lse_part)
        if next_kv is not None:
            k, v = next_kv.wait()
    return out, lse


def first_step(q, k, v, out, softmax_scale, causal, sm_margin, **varlen):
    """A rank's first step (its own K/V, every query and key) written straight into the fp32
    out: no zeroed accumulator, no merge pass. Returns its LSE."""
    attention = hfa.flash_attn_varlen_func if varlen else hfa.flash_attn_func
    with torch.no_grad():  # out= is not differentiable (the ring's autograd is its own)
        return attention(q, k, v, softmax_scale=softmax_scale, causal=causal,
                         return_attn_probs=True, sm_margin=sm_margin, out=out, **varlen)[1]


def ring_backward(comm, dout, q, k, v, out, lse, softmax_scale, causal, layout, sm_margin=0):
    """One rank's backward: (dq, dk, dv) of its chunk in the inputs' dtypes. out is the final
    output in q's dtype, lse the final fp32 LSE (batch, heads, seqlen), contiguous."""
    world, rank, seqlen = comm.world, comm.rank, q.shape[1]
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    softmax_d = step_softmax_d(dout, out) if ACCUMULATE_IN_KERNEL else None
    incoming_dkv = None  # the accumulators of the K/V now held, from the previous rank
    for step in range(world):
        next_kv = comm.shift([k, v]) if step + 1 < world else None
        block = _step_block((rank - step) % world, rank, seqlen, causal, layout)
        grads = None
        if block is not None:
            rows, keys, block_causal = block
            if softmax_d is not None:
                grads = hfa.flash_attn_backward(
                    dout[:, rows], q[:, rows], k[:, keys], v[:, keys], out[:, rows],
                    lse[:, :, rows], softmax_scale=softmax_scale, causal=block_causal,
                    sm_margin=sm_margin, softmax_d=softmax_d[:, :, rows])
            else:
                grads = hfa.flash_attn_backward(
                    dout[:, rows], q[:, rows], k[:, keys], v[:, keys], out[:, rows],
                    lse[:, :, rows].contiguous(), softmax_scale=softmax_scale,
                    causal=block_causal, sm_margin=sm_margin)
        if incoming_dkv is None:  # step 0: the accumulators of this rank's own K/V start here
            dk_acc = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
            dv_acc = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
        else:
            dk_acc, dv_acc = incoming_dkv.wait()
        if grads is not None:
            dq_part, dk_part, dv_part = grads
            dq[:, rows] += dq_part
            dk_acc[:, keys] += dk_part
            dv_acc[:, keys] += dv_part
        # Onward with the K/V they belong to; the last hop brings each rank its own.
        incoming_dkv = comm.shift([dk_acc, dv_acc])
        if next_kv is not None:
            k, v = next_kv.wait()
    dk, dv = incoming_dkv.wait()
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def step_softmax_d(dout, out):
    """D = rowsum(dout ∘ out) in fp32, laid out as lse ((batch, heads, seqlen), or (heads,
    total) for varlen's (total, heads, d)): what every backward step of the ring would compute
    from the same final out."""
    d = (dout.float() * out.float()).sum(-1)  # (batch, seqlen, heads) or (total, heads)
    return d.transpose(-1, -2).contiguous()


# --- the entry point --------------------------------------------------------------------------

def check_ring_args(q, k, v, world, layout):
    """The checks every rank can make alone (the ranks' shapes must also agree)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(LAYOUTS)}, got {layout!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name}: expected (batch, seqlen, heads, headdim), got shape "
                             f"{tuple(t.shape)}")
    if k.shape[1] != q.shape[1] or v.shape[1] != q.shape[1]:
        raise ValueError(f"k, v: expected the same local seqlen as q ({q.shape[1]}), got "
                         f"{k.shape[1]} and {v.shape[1]} (ring attention is self-attention "
                         f"over one sharded sequence)")
    if layout == "zigzag" and q.shape[1] % 2:
        raise ValueError(f"q: a zigzag shard holds two equal chunks, got an odd local seqlen "
                         f"{q.shape[1]} (see zigzag_shard)")
    if world < 1:
        raise ValueError(f"group: expected a world size >= 1, got {world}")


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, comm, options):
        """options: (softmax_scale, causal, layout, sm_margin), ring_forward's."""
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out, lse = ring_forward(comm, q, k, v, *options)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.comm, ctx.options = comm, options
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        with torch.no_grad():
            dq, dk, dv = ring_backward(ctx.comm, dout.contiguous(), q, k, v, out, lse,
                                       *ctx.options)
        return dq, dk, dv, None, None


def ring_flash_attn_func(q, k, v, group=None, causal=False, softmax_scale=None,
                         layout="zigzag", return_attn_probs=False, sm_margin=0):
    """Exact attention over a sequence sharded across the ranks of `group`.

    q (batch, seqlen_local, heads_q, headdim), k/v (batch, seqlen_local, heads_kv, headdim):
    this rank's tokens in `layout` ("zigzag", the default: shard with zigzag_shard and take
    RoPE positions from zigzag_positions; or "contiguous"). GQA/MQA K/V travel with their own
    heads. group: a torch.distributed process group (None: the default one). Every rank must
    call with the same shapes and options, and backpropagate through the output.
    sm_margin: SMs every step's attention leaves free for NCCL's kernels, whose transfer of the
    next K/V runs beside it (FlashAttention-3's sm_margin; see hfa.flash_attn_func).
    Returns out (as q), or (out, lse) with return_attn_probs (lse fp32 (batch, heads_q,
    seqlen_local), no gradient)."""
    comm = communicator(group)
    check_ring_args(q, k, v, comm.world, layout)
    options = (softmax_scale, bool(causal), layout, _args.sm_margin(sm_margin))
    out, lse = _RingAttention.apply(q, k, v, comm, options)
    return (out, lse) if return_attn_probs else out
