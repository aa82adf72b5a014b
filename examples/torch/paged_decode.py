#!/usr/bin/env python3
"""One decode step over a paged KV cache with hfa.flash_attn_with_kvcache (FlashAttention-3's
call): each sequence appends its new token's key and value to its pages, then attends over its
whole cache. Run for a bf16 cache and for an FP8 E4M3 cache with per-kv-head scales, each
checked against attention computed with plain torch on the pages read back. Exits 1 on a
mismatch.

Needs torch >= 2.4 and a Hopper GPU (the sm_90a kernels; --device cpu runs the CPU backend).
"""

import argparse
import sys

import torch

import hfa


def reference(q, k_cache, v_cache, k_scale, v_scale, page_table, lengths):
    """out (batch, 1, heads_q, headdim) by the definition, in float32, over the pages as stored."""
    k_all, v_all = k_cache.float(), v_cache.float()
    if k_scale is not None:  # value = e4m3 code · its kv head's scale
        k_all, v_all = k_all * k_scale[:, None], v_all * v_scale[:, None]
    page_size, group = k_cache.shape[1], q.shape[2] // k_cache.shape[2]
    outs = []
    for b, length in enumerate(lengths.tolist()):
        pages = page_table[b, : (length + page_size - 1) // page_size].long()
        k = k_all[pages].flatten(0, 1)[:length].repeat_interleave(group, dim=1)  # (keys, heads_q, d)
        v = v_all[pages].flatten(0, 1)[:length].repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,jhd->hj", q[b, 0].float(), k) / q.shape[-1] ** 0.5
        outs.append(torch.einsum("hj,jhd->hd", scores.softmax(-1), v))
    return torch.stack(outs)[:, None]


def decode_step(device, fp8):
    torch.manual_seed(0)
    batch, heads_q, heads_kv, headdim, page_size, num_pages = 4, 32, 8, 128, 64, 64
    lengths = torch.tensor([100, 1, 700, 333], dtype=torch.int32, device=device)  # before the step
    max_pages = 16
    # Each sequence owns max_pages pages, scattered over the pool.
    page_table = torch.randperm(num_pages, device=device)[: batch * max_pages]
    page_table = page_table.view(batch, max_pages).to(torch.int32)

    shape = (num_pages, page_size, heads_kv, headdim)
    k_cache = torch.randn(shape, device=device, dtype=torch.bfloat16)
    v_cache = torch.randn(shape, device=device, dtype=torch.bfloat16)
    k_scale = v_scale = None
    if fp8:
        k_scale = torch.full((heads_kv,), 0.02, device=device)  # the codes' range covers ±8.9
        v_scale = torch.full((heads_kv,), 0.02, device=device)
        k_cache = (k_cache.float() / k_scale[:, None]).to(torch.float8_e4m3fn)
        v_cache = (v_cache.float() / v_scale[:, None]).to(torch.float8_e4m3fn)

    q = torch.randn(batch, 1, heads_q, headdim, device=device, dtype=torch.bfloat16)
    k_new = torch.randn(batch, 1, heads_kv, headdim, device=device, dtype=torch.bfloat16)
    v_new = torch.randn(batch, 1, heads_kv, headdim, device=device, dtype=torch.bfloat16)
    out = hfa.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                      cache_seqlens=lengths, page_table=page_table, causal=True,
                                      k_scale=k_scale, v_scale=v_scale)
    lengths = lengths + 1  # the cache now holds the new token (hfa does not update cache_seqlens)
    want = reference(q, k_cache, v_cache, k_scale, v_scale, page_table, lengths)
    return (out.float() - want).abs().max().item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    worst = 0.0
    for fp8 in (False, True):
        error = decode_step(args.device, fp8)
        print(f"{'fp8 e4m3' if fp8 else 'bf16'} paged cache on {args.device}: "
              f"max abs error {error:.2e}")
        worst = max(worst, error)
    return 0 if worst < 2e-2 else 1  # bf16 output: ~4e-3 relative


if __name__ == "__main__":
    sys.exit(main())
