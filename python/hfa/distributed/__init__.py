"""Context parallelism: exact attention over a sequence sharded across the ranks of a
torch.distributed process group (NCCL), forward and backward (torch autograd).

    import torch.distributed as dist
    from hfa.distributed import ring_flash_attn_func, zigzag_shard, zigzag_positions

    rank, world = dist.get_rank(), dist.get_world_size()
    q, k, v = (zigzag_shard(t, rank, world) for t in (q_full, k_full, v_full))  # (b, S/P, h, d)
    positions = zigzag_positions(S, rank, world, device=q.device)   # RoPE ids of those tokens
    out = ring_flash_attn_func(q, k, v, causal=True)                # this rank's (b, S/P, h, d)

ring_flash_attn_func: ring attention, pass-KV. K/V hop around the ring (P - 1 hops, each sent
    while the previous block computes); the partial results merge in fp32 by their LSE; in the
    backward the fp32 dK/dV travel with the K/V and dQ stays local. Any head counts (GQA/MQA
    K/V travel with their own heads); the tests check that the error does not grow with the
    world size.
ring_flash_attn_varlen_func: the same over packed variable-length sequences (FlashAttention's
    varlen layout, zhuzilin's zigzag_ring_flash_attn_varlen_func): every sequence sharded over
    the ranks on its own, one local cu_seqlens (the global one divided by the world size) for
    every rank; shard with zigzag_shard_varlen, positions from zigzag_positions_varlen.
ulysses_flash_attn_func: all-to-all over heads, one full-sequence attention per rank on
    heads/P heads, all-to-all back. Needs heads_q and heads_kv divisible by the world size;
    less traffic than the ring when the heads allow it on one node.
split_kvcache_attention: decode over a KV cache split across the ranks: each rank runs
    hfa.flash_attn_with_kvcache over its part of every sequence, the partial results are
    all-gathered and merged by their LSEs (exact, for any split of the tokens).
sm_margin (every function above): the SMs each attention leaves free for NCCL's kernels (the
    transfer a ring step overlaps), FlashAttention-3's name.
Both take the same shards: layout="zigzag" (the default; rank r holds chunks r and 2P-1-r of
2P, which balances causal work) or "contiguous" (rank r holds chunk r of P). Every rank calls
with the same shapes and options and backpropagates through the output (they are
collectives). Positions: in the zigzag layout a rank's tokens are NOT consecutive; take RoPE
position ids from zigzag_positions, and gather results with zigzag_unshard.
merge_attn_partial / merge_attn_partials: the fp32 LSE merge of one / several partial
    attentions into a running (out, lse) (rows masked on every side stay 0 / -inf), for
    combining partial results elsewhere: one hfa.merge_partials call where libhfa takes the
    tensors, torch operations otherwise.
hfa.distributed.emulated: the same algorithms with P ranks in one process (threads), for tests
    without NCCL.

Not yet: window_size, softcap and sinks; the C ABI hooks that would save the other merge passes
(an fp32 partial-output forward, a backward taking a precomputed D). The backward's grid is not
persistent, so sm_margin is checked there but limits nothing yet (hfa.h).

Importing hfa.distributed needs no torch; the first use of a name below imports it.
"""

import importlib

_EXPORTS = {
    "ring_flash_attn_func": "ring",
    "zigzag_shard": "ring",
    "zigzag_unshard": "ring",
    "zigzag_positions": "ring",
    "merge_attn_partial": "ring",
    "merge_attn_partials": "ring",
    "ring_flash_attn_varlen_func": "ring_varlen",
    "zigzag_shard_varlen": "ring_varlen",
    "zigzag_unshard_varlen": "ring_varlen",
    "zigzag_positions_varlen": "ring_varlen",
    "ulysses_flash_attn_func": "ulysses",
    "split_kvcache_attention": "kvcache",
}

__all__ = list(_EXPORTS) + ["emulated"]


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    if name == "emulated":
        return importlib.import_module(".emulated", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
