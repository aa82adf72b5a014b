"""block_mask= (issue 35): torch's FlexAttention BlockMask, or a mapping of arrays, as the
options rows that carry block-sparse attention (kv_num_blocks ... sparse_block_kv, described in
include/hfa/options.def).

A BlockMask holds its lists but not the bits of its partial blocks: those come from evaluating
its mask_mod once over each listed partial block (as FlashInfer packs a custom mask), packed in
the library's layout and cached on the object, so that later calls with the same mask pay
nothing more.
"""

from collections.abc import Mapping

import numpy as np

LISTS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices")
ROWS = LISTS + ("kv_mask_bits", "sparse_block_q", "sparse_block_kv")
_CACHE = "_hfa_block_sparse_rows"  # the attribute a BlockMask keeps its rows in


def rows(block_mask) -> dict:
    """{row's caller name: value} for block_mask: a BlockMask (its rows computed once, then
    cached on it) or a mapping of some of ROWS (passed as given; the library checks them)."""
    if isinstance(block_mask, Mapping):
        for name in block_mask:
            if name not in ROWS:
                raise TypeError(f"block_mask: {name!r} is not one of {', '.join(ROWS)}")
        return {name: value for name, value in block_mask.items() if value is not None}
    if all(hasattr(block_mask, a) for a in ("kv_num_blocks", "kv_indices", "mask_mod",
                                            "BLOCK_SIZE", "seq_lengths")):
        cached = getattr(block_mask, _CACHE, None)
        if cached is None:
            cached = _flex_rows(block_mask)
            setattr(block_mask, _CACHE, cached)
        return dict(cached)
    raise TypeError("block_mask: expected torch's BlockMask or a mapping of arrays named "
                    f"{', '.join(ROWS)}; got {type(block_mask).__name__}")


def _as_numpy(t):
    return None if t is None else np.ascontiguousarray(t.detach().cpu().numpy(), np.int32)


def _flex_rows(block_mask) -> dict:
    """A BlockMask's lists as int32 numpy arrays, and its partial blocks' bits from its
    mask_mod: pair (r, c) of the block in slot s of query block m is
    mask_mod(b, h, m·block_q + r, kv_indices[b, h, m, s]·block_kv + c), 0 outside its
    seq_lengths."""
    import torch

    block_q, block_kv = (int(x) for x in block_mask.BLOCK_SIZE)
    seqlen_q, seqlen_k = (int(x) for x in block_mask.seq_lengths)
    counts, indices = _as_numpy(block_mask.kv_num_blocks), _as_numpy(block_mask.kv_indices)
    batch, heads, q_blocks, slots = indices.shape
    words = -(-block_kv // 32)
    dense = np.zeros((batch, heads, q_blocks, slots, block_q, words * 32), np.bool_)
    rows_, cols = torch.arange(block_q)[:, None], torch.arange(block_kv)[None, :]
    for b in range(batch):
        for h in range(heads):
            for m in range(q_blocks):
                for s in range(int(counts[b, h, m])):
                    q_idx = m * block_q + rows_
                    kv_idx = int(indices[b, h, m, s]) * block_kv + cols
                    inside = (q_idx < seqlen_q) & (kv_idx < seqlen_k)
                    # Indices past the lengths are clamped: a mask_mod may index a tensor of
                    # seqlen entries (document ids); those pairs are cleared just after.
                    seen = block_mask.mask_mod(torch.tensor(b), torch.tensor(h),
                                               q_idx.clamp(max=seqlen_q - 1),
                                               kv_idx.clamp(max=seqlen_k - 1))
                    seen = torch.as_tensor(seen, dtype=torch.bool).expand(block_q, block_kv)
                    dense[b, h, m, s, :, :block_kv] = (seen & inside).numpy()
    # Little bit order, whole int32 words per row: bit c of a row is bit c % 32 of word c / 32.
    packed = np.packbits(dense, axis=-1, bitorder="little").view("<i4")
    result = {"kv_num_blocks": counts, "kv_indices": indices,
              "kv_mask_bits": np.ascontiguousarray(
                  packed.reshape(batch, heads, q_blocks, slots * block_q * words).astype(np.int32)),
              "sparse_block_q": block_q, "sparse_block_kv": block_kv}
    if block_mask.full_kv_num_blocks is not None:
        result["full_kv_num_blocks"] = _as_numpy(block_mask.full_kv_num_blocks)
        result["full_kv_indices"] = _as_numpy(block_mask.full_kv_indices)
    return result
