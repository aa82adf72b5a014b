"""hfa as a Hugging Face transformers attention: `attn_implementation="hfa"`.

    import hfa.integrations.transformers
    hfa.integrations.transformers.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="hfa")
    # or model.set_attn_implementation("hfa") on a loaded model

register() adds "hfa" to AttentionInterface and, with it, transformers' own flash_attention_mask
to AttentionMaskInterface: without a mask function transformers drops the padding mask
silently. The attention takes what the models pass: (batch, heads, seqlen, headdim) query, key
and value, read as (batch, seqlen, heads, headdim) views (no copy; GQA without repeating K/V),
and returns (batch, seqlen, heads, headdim). Padding masks are unpadded to a varlen call (left
or right padding, and generation with a cache: one query per sequence), packed sequences
(batch 1, position_ids restarting) become varlen too, and sliding windows, softcap and sinks
(`s_aux`, gpt-oss) map to hfa's options. Training goes through hfa's backward.
"""

import torch
from torch.utils.weak import WeakIdKeyDictionary

import hfa

NAME = "hfa"


def register(name: str = NAME):
    """Register hfa's attention and transformers' flash mask function under `name`."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import flash_attention_mask
    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, flash_attention_mask)


def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
              sliding_window=None, softcap=None, is_causal=None, s_aux=None, **kwargs):
    """transformers' attention-function contract: returns (output, None); no weights."""
    if dropout and module.training:
        raise NotImplementedError("hfa: attention dropout is not supported (set the config's "
                                  "attention_dropout to 0)")
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # views as (b, s, h, d)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    options = dict(
        softmax_scale=scaling, causal=bool(causal),
        window_size=(sliding_window - 1, sliding_window - 1) if sliding_window else (-1, -1),
        softcap=float(softcap or 0.0), learnable_sink=s_aux)
    batch, seqlen_q = q.shape[0], q.shape[1]

    if attention_mask is not None:
        if attention_mask.dim() != 2:
            raise ValueError(f"attention_mask: expected transformers' 2-D flash mask (batch, "
                             f"kv_len), got shape {tuple(attention_mask.shape)}; register() "
                             f"installs the matching mask function")
        return _padded(q, k, v, attention_mask, options), None
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None and batch == 1 and seqlen_q > 1:
        cu = _packed_offsets(kwargs.get("position_ids"))
    if cu is not None:
        cu_k = kwargs.get("cu_seq_lens_k", cu)
        max_q = _int(kwargs.get("max_length_q", kwargs.get("max_seqlen_q")), cu)
        max_k = _int(kwargs.get("max_length_k", kwargs.get("max_seqlen_k")), cu_k)
        out = hfa.flash_attn_varlen_func(q.reshape(-1, *q.shape[2:]), k.reshape(-1, *k.shape[2:]),
                                         v.reshape(-1, *v.shape[2:]), cu, cu_k, max_q, max_k,
                                         **options)
        return out.view(batch, seqlen_q, *out.shape[1:]), None
    return hfa.flash_attn_func(q, k, v, **options), None


def _int(n, cu):
    """max_seqlen as a Python int: given, or read from the offsets (a host read)."""
    if n is None:
        n = (cu[1:] - cu[:-1]).max()
    return int(n)


def _padded(q, k, v, mask, options):
    """Attention over the valid tokens of a padded batch: unpad to varlen, then pad back."""
    batch, seqlen_q = q.shape[0], q.shape[1]
    mask = mask.bool()
    if k.shape[1] > mask.shape[1]:  # a static cache longer than the mask: only its first part
        k, v = k[:, :mask.shape[1]], v[:, :mask.shape[1]]
    lens_k = mask.sum(-1, dtype=torch.int32)
    keys = mask.flatten().nonzero().flatten()
    cu_k = torch.nn.functional.pad(lens_k.cumsum(0, dtype=torch.int32), (1, 0))
    max_k = int(lens_k.max())  # a host read, as transformers' own flash path makes
    if seqlen_q == mask.shape[1]:
        rows, cu_q, max_q = keys, cu_k, max_k
    elif seqlen_q == 1:  # generation with a cache: one query per sequence
        rows = torch.arange(batch, device=q.device)
        cu_q = torch.arange(batch + 1, dtype=torch.int32, device=q.device)
        max_q = 1
    else:  # a chunk of queries over a longer cache: the last seqlen_q positions (left padding)
        mask_q = mask[:, -seqlen_q:]
        lens_q = mask_q.sum(-1, dtype=torch.int32)
        rows = mask_q.flatten().nonzero().flatten()
        cu_q = torch.nn.functional.pad(lens_q.cumsum(0, dtype=torch.int32), (1, 0))
        max_q = int(lens_q.max())
    flat = lambda t: t.reshape(-1, *t.shape[2:])  # noqa: E731
    out = hfa.flash_attn_varlen_func(flat(q).index_select(0, rows), flat(k).index_select(0, keys),
                                     flat(v).index_select(0, keys), cu_q, cu_k, max_q, max_k,
                                     **options)
    padded = out.new_zeros((batch * seqlen_q,) + tuple(out.shape[1:]))
    padded = padded.index_copy(0, rows, out)
    return padded.view(batch, seqlen_q, *out.shape[1:])


# position_ids tensor -> (its version, the packed offsets or None). Every layer of a forward gets
# the same position_ids: the host read that tells whether they restart happens once, not per layer.
_packing = WeakIdKeyDictionary()


def _packed_offsets(position_ids):
    """cu_seqlens of packed sequences (batch 1, positions that restart), else None."""
    if position_ids is None or position_ids.dim() != 2 or position_ids.shape[0] != 1:
        return None
    known = _packing.get(position_ids)
    if known is not None and known[0] == position_ids._version:
        return known[1]
    flat = position_ids.reshape(-1)
    starts = (flat == flat.min()).nonzero().flatten()
    cu = None
    if starts.numel() > 1:  # one host read (nonzero)
        total = torch.tensor([flat.numel()], dtype=torch.int32, device=flat.device)
        cu = torch.cat((starts.to(torch.int32), total))
    _packing[position_ids] = (position_ids._version, cu)
    return cu
