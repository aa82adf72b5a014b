"""block_mask= (issue 35): torch's FlexAttention BlockMask, or a mapping of arrays, as the
options rows that carry block-sparse attention (kv_num_blocks ... sparse_block_kv, described in
include/hfa/options.def).

A BlockMask holds its lists but not the bits of its partial blocks: those come from evaluating
its mask_mod once over each listed partial block (as FlashInfer packs a custom mask), packed in
the library's layout and cached on the object as torch tensors on the mask's device, so that
later calls with the same mask pay nothing more (and a call under torch.compile after an eager
one traces no evaluation). numpy inputs get the cached rows as arrays (views of CPU tensors).

A packed batch of documents (varlen: cu_seqlens) takes the mask FlexAttention users write for
it: one BlockMask of batch 1 over the packed tokens, with the documents in its mask_mod.
"""

from collections.abc import Mapping

# The rows, in the order of hfa/options.def: the tensors, which the torch ops take as arguments
# of their names after `vectors` in this order, then the block sizes, scalar rows (the ops take
# them in `scalars`).
TENSORS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices", "kv_mask_bits")
ROWS = TENSORS + ("sparse_block_q", "sparse_block_kv")
_CACHE = "_hfa_block_sparse_rows"  # the attribute a BlockMask keeps its rows in


def rows(block_mask, as_numpy: bool = False) -> dict:
    """{row's caller name: value} for block_mask: a BlockMask (its rows computed once, then
    cached on it; as numpy arrays when as_numpy) or a mapping of some of ROWS (passed as given;
    the library checks them)."""
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
        if as_numpy:
            return {name: value if isinstance(value, int) else value.cpu().numpy()
                    for name, value in cached.items()}
        return dict(cached)
    raise TypeError("block_mask: expected torch's BlockMask or a mapping of arrays named "
                    f"{', '.join(ROWS)}; got {type(block_mask).__name__}")


def _flex_rows(block_mask) -> dict:
    """A BlockMask's lists as int32 tensors, and its partial blocks' bits from its mask_mod:
    pair (r, c) of the block in slot s of query block m is
    mask_mod(b, h, m·block_q + r, kv_indices[b, h, m, s]·block_kv + c), 0 outside its
    seq_lengths. All on the mask's device."""
    import torch

    block_q, block_kv = (int(x) for x in block_mask.BLOCK_SIZE)
    seqlen_q, seqlen_k = (int(x) for x in block_mask.seq_lengths)

    def int32(t):
        return None if t is None else t.to(torch.int32).contiguous()

    counts, indices = int32(block_mask.kv_num_blocks), int32(block_mask.kv_indices)
    device = indices.device
    batch, heads, q_blocks, slots = indices.shape
    words = -(-block_kv // 32)
    bits = torch.zeros((batch, heads, q_blocks, slots, block_q, words * 32), dtype=torch.bool,
                       device=device)
    rows_ = torch.arange(block_q, device=device)[:, None]
    cols = torch.arange(block_kv, device=device)[None, :]
    listed, slot_counts = indices.tolist(), counts.tolist()  # one read each, not one a block
    for b in range(batch):
        for h in range(heads):
            for m in range(q_blocks):
                for s in range(slot_counts[b][h][m]):
                    q_idx = m * block_q + rows_
                    kv_idx = listed[b][h][m][s] * block_kv + cols
                    inside = (q_idx < seqlen_q) & (kv_idx < seqlen_k)
                    # Indices past the lengths are clamped: a mask_mod may index a tensor of
                    # seqlen entries (document ids); those pairs are cleared just after.
                    seen = block_mask.mask_mod(torch.tensor(b, device=device),
                                               torch.tensor(h, device=device),
                                               q_idx.clamp(max=seqlen_q - 1),
                                               kv_idx.clamp(max=seqlen_k - 1))
                    seen = torch.as_tensor(seen, dtype=torch.bool, device=device)
                    bits[b, h, m, s, :, :block_kv] = seen.expand(block_q, block_kv) & inside
    result = {"kv_num_blocks": counts, "kv_indices": indices,
              "kv_mask_bits": _packed(bits).reshape(batch, heads, q_blocks,
                                                    slots * block_q * words),
              "sparse_block_q": block_q, "sparse_block_kv": block_kv}
    if block_mask.full_kv_num_blocks is not None:
        result["full_kv_num_blocks"] = int32(block_mask.full_kv_num_blocks)
        result["full_kv_indices"] = int32(block_mask.full_kv_indices)
    return result


def _packed(bits):
    """Boolean (..., W·32) as int32 (..., W) words in the library's little bit order: bit c of a
    row is bit c % 32 of word c / 32 (numpy's packbits(bitorder="little") viewed as int32)."""
    import torch

    groups = bits.unflatten(-1, (-1, 32))
    words = torch.zeros(groups.shape[:-1], dtype=torch.int64, device=bits.device)
    for bit in range(32):  # one bit plane at a time: no (..., W, 32) int64 temporary
        words |= groups[..., bit].to(torch.int64) << bit
    # Words of 2^31 and up are the int32 of the same bits, negative.
    return torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32).contiguous()
