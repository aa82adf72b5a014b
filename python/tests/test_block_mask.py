"""block_mask= through the numpy front end (CPU forward and backward): torch's FlexAttention
BlockMask, its bits evaluated from its mask_mod once and cached on it, and a mapping of the rows'
arrays, against dense float64 attention and its gradients under the same mask_mod; rows that
see no key give O = 0 and LSE = -inf. Varlen takes the packed tokens' BlockMask, as
FlexAttention users build it for documents packed into one sequence. (Torch tensors:
test_torch_block_mask.py.)"""

import numpy as np
import pytest

import hfa

torch = pytest.importorskip("torch", reason="torch is not installed: BlockMask is torch's")
flex = pytest.importorskip("torch.nn.attention.flex_attention")


def dense(q, k, v, allowed):
    """out (b, s, h, d) and lse (b, h, s) in float64 with allowed (b, h, i, j) pairs."""
    qf, kf, vf = (np.asarray(x, np.float64) for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    kf, vf = np.repeat(kf, group, axis=2), np.repeat(vf, group, axis=2)
    s = np.einsum("bihd,bjhd->bhij", qf, kf) / np.sqrt(q.shape[-1])
    s = np.where(allowed, s, -np.inf)
    m = s.max(-1, keepdims=True)
    seen = np.isfinite(m)
    p = np.where(seen, np.exp(s - np.where(seen, m, 0)), 0)
    total = p.sum(-1, keepdims=True)
    out = np.einsum("bhij,bjhd->bihd", p / np.where(seen, total, 1), vf)
    lse = np.where(seen[..., 0], (m + np.log(np.where(seen, total, 1)))[..., 0], -np.inf)
    return out, lse


def dense_grads(q, k, v, dout, allowed):
    """(dq, dk, dv) of dense attention under allowed, in float64 (the softmax's Jacobian)."""
    qf, kf, vf, do = (np.asarray(x, np.float64) for x in (q, k, v, dout))
    group = q.shape[2] // k.shape[2]
    kf, vf = np.repeat(kf, group, axis=2), np.repeat(vf, group, axis=2)
    scale = 1 / np.sqrt(q.shape[-1])
    s = np.where(allowed, np.einsum("bihd,bjhd->bhij", qf, kf) * scale, -np.inf)
    m = s.max(-1, keepdims=True)
    seen = np.isfinite(m)
    p = np.where(seen, np.exp(s - np.where(seen, m, 0)), 0)
    p = p / np.where(seen, p.sum(-1, keepdims=True), 1)
    dv = np.einsum("bhij,bihd->bjhd", p, do)
    dp = np.einsum("bihd,bjhd->bhij", do, vf)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True)) * scale
    dq = np.einsum("bhij,bjhd->bihd", ds, kf)
    dk = np.einsum("bhij,bihd->bjhd", ds, qf)
    fold = lambda x: x.reshape(x.shape[0], x.shape[1], -1, group, x.shape[3]).sum(3)  # noqa: E731
    return dq, fold(dk), fold(dv)


def allowed_of(mask_mod, b, h, sq, sk):
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    return np.stack([np.stack([torch.as_tensor(mask_mod(torch.tensor(bb), torch.tensor(hh), i, j))
                               .expand(sq, sk).numpy() for hh in range(h)]) for bb in range(b)])


DOCS = torch.tensor([0] * 100 + [1] * 37 + [2] * 200 + [3] * 63)


def documents(b, h, q_idx, kv_idx):
    return DOCS[q_idx] == DOCS[kv_idx]


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < 150) | (kv_idx <= q_idx)


def sliding_global(b, h, q_idx, kv_idx):
    return ((q_idx - kv_idx).abs() <= 30 + 40 * h) | (kv_idx < 16) | (q_idx < 16)


def empty_rows(b, h, q_idx, kv_idx):
    # Query rows 130..259 see nothing; the others a causal band.
    return ((q_idx < 130) | (q_idx >= 260)) & (kv_idx <= q_idx) & (q_idx - kv_idx < 200)


CASES = [("documents", documents, 1, 2, 1, False), ("prefix_lm", prefix_lm, 2, 2, 2, False),
         ("sliding_global", sliding_global, 1, 4, 2, True),
         ("empty_rows", empty_rows, 1, 2, 1, False)]


@pytest.mark.parametrize("name,mask_mod,batch,heads_q,heads_kv,per_head", CASES,
                         ids=[c[0] for c in CASES])
def test_block_mask_matches_dense(name, mask_mod, batch, heads_q, heads_kv, per_head):
    sq = sk = 400
    rng = np.random.default_rng(5)
    q = rng.standard_normal((batch, sq, heads_q, 64), dtype=np.float32)
    k = rng.standard_normal((batch, sk, heads_kv, 64), dtype=np.float32)
    v = rng.standard_normal((batch, sk, heads_kv, 64), dtype=np.float32)
    calls = []

    def counted(b, h, q_idx, kv_idx):
        calls.append(1)
        return mask_mod(b, h, q_idx, kv_idx)

    block_mask = flex.create_block_mask(counted, None, heads_q if per_head else None, sq, sk,
                                        device="cpu")
    calls.clear()  # create_block_mask's own evaluations
    out, lse = hfa.flash_attn_func(q, k, v, block_mask=block_mask, return_attn_probs=True)
    evaluated = len(calls)
    assert evaluated > 0
    out2 = hfa.flash_attn_func(q, k, v, block_mask=block_mask)
    assert len(calls) == evaluated, "the bits were evaluated again: not cached on the BlockMask"
    np.testing.assert_array_equal(out, out2)

    want_out, want_lse = dense(q, k, v, allowed_of(mask_mod, batch, heads_q, sq, sk))
    np.testing.assert_allclose(out, want_out, atol=2e-5, rtol=0)
    np.testing.assert_allclose(lse, want_lse, atol=2e-5, rtol=0)
    if name == "empty_rows":
        assert np.all(lse[:, :, 130:260] == -np.inf)
        assert np.all(out[:, 130:260] == 0)

    dout = rng.standard_normal(out.shape, dtype=np.float32)
    grads = hfa.flash_attn_backward(dout, q, k, v, out, lse, block_mask=block_mask)
    assert len(calls) == evaluated, "the backward evaluated the mask_mod again"
    want_grads = dense_grads(q, k, v, dout, allowed_of(mask_mod, batch, heads_q, sq, sk))
    for got, want, label in zip(grads, want_grads, ("dq", "dk", "dv")):
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=0, err_msg=label)


def test_mapping_of_rows_and_rejections():
    sq = sk = 300
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((1, sq, 2, 64), dtype=np.float32) for _ in range(3))
    block_mask = flex.create_block_mask(prefix_lm, None, None, sq, sk, device="cpu")
    from hfa import _block_mask
    rows = _block_mask.rows(block_mask, as_numpy=True)
    assert getattr(block_mask, "_hfa_block_sparse_rows") is not None
    out = hfa.flash_attn_func(q, k, v, block_mask=dict(rows))
    want, _ = dense(q, k, v, allowed_of(prefix_lm, 1, 2, sq, sk))
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=0)
    # None is no mask, as for every other optional argument.
    want_full, _ = dense(q, k, v, np.ones((1, 2, sq, sk), bool))
    np.testing.assert_allclose(hfa.flash_attn_func(q, k, v, block_mask=None), want_full,
                               atol=2e-5, rtol=0)

    with pytest.raises(TypeError, match="block_mask: 'kv_bits'"):
        hfa.flash_attn_func(q, k, v, block_mask={"kv_bits": rows["kv_mask_bits"]})
    with pytest.raises(TypeError, match="kv_indices: given twice"):
        hfa.flash_attn_func(q, k, v, block_mask=block_mask, kv_indices=rows["kv_indices"])
    bad = dict(rows)
    bad["kv_indices"] = rows["kv_indices"].copy()
    bad["kv_indices"][0, 0, 0, 0] = 7  # 300 keys are 3 blocks
    out_buffer = np.full_like(q, np.nan)
    with pytest.raises(ValueError, match="kv_indices"):
        hfa.flash_attn_func(q, k, v, block_mask=bad, out=out_buffer)
    assert np.isnan(out_buffer).all(), "a rejected call wrote out"


def packed_documents(lengths):
    """A document mask_mod over the packed tokens of documents of these lengths (FlexAttention's
    way of writing a varlen batch), its cu_seqlens (int32) and the dense pairs it allows."""
    ids = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))

    def same_document(b, h, q_idx, kv_idx):
        return ids[q_idx] == ids[kv_idx]

    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return same_document, cu


def test_varlen_takes_the_packed_tokens_block_mask():
    """A BlockMask of batch 1 over the packed tokens (documents in its mask_mod, causal in the
    call) gives each document's attention, forward and backward, as dense float64 per document;
    a mask of one batch entry per sequence is refused by name."""
    lengths = [100, 0, 37, 200, 63]
    same_document, cu = packed_documents(lengths)
    total = int(cu[-1])
    rng = np.random.default_rng(7)
    q, dout = (rng.standard_normal((total, 4, 64), dtype=np.float32) for _ in range(2))
    k, v = (rng.standard_normal((total, 2, 64), dtype=np.float32) for _ in range(2))
    block_mask = flex.create_block_mask(same_document, None, None, total, total, device="cpu")
    lengths_args = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max(lengths),
                        max_seqlen_k=max(lengths))
    out, lse = hfa.flash_attn_varlen_func(q, k, v, *lengths_args.values(), causal=True,
                                          block_mask=block_mask, return_attn_probs=True)
    grads = hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=True, block_mask=block_mask,
                                    **lengths_args)
    for b in range(len(lengths)):
        rows = slice(cu[b], cu[b + 1])
        if cu[b] == cu[b + 1]:
            continue
        n = cu[b + 1] - cu[b]
        causal = np.tril(np.ones((n, n), bool))[None, None]
        one = lambda x: x[None, rows]  # noqa: E731  (a batch of the one document)
        want_out, want_lse = dense(one(q), one(k), one(v), causal)
        np.testing.assert_allclose(out[rows], want_out[0], atol=2e-5, rtol=0)
        np.testing.assert_allclose(lse[:, rows], want_lse[0], atol=2e-5, rtol=0)
        want = dense_grads(one(q), one(k), one(v), one(dout), causal)
        for got, w, label in zip(grads, want, ("dq", "dk", "dv")):
            np.testing.assert_allclose(got[rows], w[0], atol=1e-4, rtol=0, err_msg=label)

    per_sequence = flex.create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx <= q_idx, 4, None,
                                          max(lengths), max(lengths), device="cpu")
    with pytest.raises(ValueError, match="kv_num_blocks: dim 0 must be 1 with cu_seqlens"):
        hfa.flash_attn_varlen_func(q, k, v, *lengths_args.values(), block_mask=per_sequence)
