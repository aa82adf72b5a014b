"""Decode over a KV cache split across the ranks of a group: each rank attends the same queries
over its own part of every sequence's cache with hfa.flash_attn_with_kvcache (its LSE too), the
ranks all-gather those partial results, and each merges them by their LSEs (the split-KV
combine of one GPU, across GPUs). Any split of the tokens works (contiguous ranges, tokens
interleaved over the ranks, ...): attention over disjoint sets of keys merges exactly, and a
rank that holds none of a sequence's tokens contributes LSE -inf, which the merge skips.

Traffic: every rank receives every other rank's partial output (q's dtype) and LSE (fp32), that
is (P - 1) · batch · seqlen_q · heads_q · (headdim · 2 + 4) bytes for bf16: small for decode.
"""

import torch

import hfa

from ._comm import communicator
from .ring import merge_attn_partials


def _as_batch_of_one(out, lse):
    """Varlen rows (total_q, heads, d) / (heads, total_q) as a batch of one sequence, the layout
    merge_attn_partials' torch fallback takes; fixed-length results as they are."""
    return (out[None], lse[None]) if out.dim() == 3 else (out, lse)


def merge_across_ranks(comm, out, lse):
    """fp32 (out, lse) of every rank's partial (out, lse) of the same queries, merged by LSE;
    the same on every rank."""
    outs, lses = comm.all_gather(out), comm.all_gather(lse)
    merged = torch.zeros(out.shape, dtype=torch.float32, device=out.device)
    merged_lse = torch.full(lse.shape, float("-inf"), dtype=torch.float32, device=lse.device)
    # The empty start has LSE -inf everywhere, so the merge reads nothing of it.
    views = [_as_batch_of_one(o, l) for o, l in zip(outs, lses)]
    target = _as_batch_of_one(merged, merged_lse)
    merge_attn_partials(*target, [o for o, _ in views], [l for _, l in views])
    return merged, merged_lse


def split_kvcache_attention(q, k_cache, v_cache, group=None, return_softmax_lse=False,
                            out=None, **kvcache_kwargs):
    """Attention of q over a KV cache whose tokens are split across the ranks of `group`.

    q: the same queries on every rank (flash_attn_with_kvcache's layouts, varlen included).
    k_cache / v_cache and kvcache_kwargs (cache_seqlens, page_table, quantized-cache scales,
    k / v to append, softmax_scale, num_splits, sm_margin, ...): this rank's part, passed to
    hfa.flash_attn_with_kvcache as they are; cache_seqlens counts this rank's tokens of each
    sequence (0 is fine). Options that depend on positions apply to the part: causal and windows
    are bottom-right aligned to the part's own keys, so give causal=True only on the rank that
    holds each sequence's newest tokens (a decode step with one query row needs none), and
    rotary positions are those of the part. group: a torch.distributed process group (None:
    the default one); every rank must call with the same q shape.
    Returns out (q's dtype; into `out` when given), or (out, lse) with return_softmax_lse (lse
    fp32, as flash_attn_with_kvcache's), the same on every rank."""
    comm = communicator(group)
    partial, partial_lse = hfa.flash_attn_with_kvcache(
        q, k_cache, v_cache, return_softmax_lse=True, **kvcache_kwargs)
    merged, lse = merge_across_ranks(comm, partial, partial_lse)
    if out is None:
        out = merged.to(q.dtype)
    else:
        out.copy_(merged)
    return (out, lse) if return_softmax_lse else out
