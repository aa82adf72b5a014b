"""block_mask= with torch tensors (CPU): the rows travel through the torch ops (hfa::fwd,
hfa::bwd) as their block-sparse arguments, autograd and torch.compile(fullgraph=True) included,
and give the bits the numpy front end gives (the same library call); varlen with the packed
tokens' BlockMask; rejections by the argument's name."""

import numpy as np
import pytest

import hfa

torch = pytest.importorskip("torch", minversion="2.4",
                            reason="torch is not installed: the torch ops are untested here")
flex = pytest.importorskip("torch.nn.attention.flex_attention")

from test_block_mask import packed_documents, sliding_global  # noqa: E402


def normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def leaves(*arrays):
    return [torch.tensor(a, requires_grad=True) for a in arrays]


def test_forward_and_autograd_match_numpy():
    """The torch call's out, lse and autograd gradients are the numpy call's bits, with a
    BlockMask per head (GQA) and with its rows as a mapping of tensors; flash_attn_backward on
    torch tensors too."""
    rng = np.random.default_rng(21)
    q, dout = normal(rng, 2, 300, 4, 64), normal(rng, 2, 300, 4, 64)
    k, v = normal(rng, 2, 300, 2, 64), normal(rng, 2, 300, 2, 64)
    block_mask = flex.create_block_mask(sliding_global, None, 4, 300, 300, device="cpu")
    out, lse = hfa.flash_attn_func(q, k, v, causal=True, block_mask=block_mask,
                                   return_attn_probs=True)
    grads = hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=True, block_mask=block_mask)

    from hfa import _block_mask
    for mask in (block_mask, _block_mask.rows(block_mask)):
        tq, tk, tv = leaves(q, k, v)
        t_out, t_lse = hfa.flash_attn_func(tq, tk, tv, causal=True, block_mask=mask,
                                           return_attn_probs=True)
        t_out.backward(torch.from_numpy(dout))
        np.testing.assert_array_equal(t_out.detach().numpy(), out)
        np.testing.assert_array_equal(t_lse.numpy(), lse)
        for t, grad in zip((tq, tk, tv), grads):
            np.testing.assert_array_equal(t.grad.numpy(), grad)

    direct = hfa.flash_attn_backward(*(torch.from_numpy(a) for a in (dout, q, k, v, out, lse)),
                                     causal=True, block_mask=block_mask)
    for got, grad in zip(direct, grads):
        np.testing.assert_array_equal(got.numpy(), grad)


def test_varlen_documents_with_autograd():
    """flash_attn_varlen_func on torch tensors with the packed tokens' BlockMask: the numpy
    call's bits, forward and gradients."""
    lengths = [70, 130, 0, 56]
    same_document, cu = packed_documents(lengths)
    total = int(cu[-1])
    rng = np.random.default_rng(22)
    q, k, v, dout = (normal(rng, total, 2, 64) for _ in range(4))
    block_mask = flex.create_block_mask(same_document, None, None, total, total, device="cpu")
    args = (cu, cu, max(lengths), max(lengths))
    out, lse = hfa.flash_attn_varlen_func(q, k, v, *args, block_mask=block_mask,
                                          return_attn_probs=True)
    grads = hfa.flash_attn_backward(dout, q, k, v, out, lse, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                    max_seqlen_q=max(lengths), max_seqlen_k=max(lengths),
                                    block_mask=block_mask)
    tq, tk, tv = leaves(q, k, v)
    tcu = torch.from_numpy(cu)
    t_out = hfa.flash_attn_varlen_func(tq, tk, tv, tcu, tcu, *args[2:], block_mask=block_mask)
    t_out.backward(torch.from_numpy(dout))
    np.testing.assert_array_equal(t_out.detach().numpy(), out)
    for t, grad in zip((tq, tk, tv), grads):
        np.testing.assert_array_equal(t.grad.numpy(), grad)


def test_torch_compile_fullgraph():
    """torch.compile(fullgraph=True) traces a call with a BlockMask whose rows an eager call
    cached, and one with a mapping of the rows' tensors: no graph break, the eager bits forward
    and backward (aot_eager: the fake kernels and the autograd formula through AOTAutograd)."""
    rng = np.random.default_rng(23)
    q, k, v = (normal(rng, 1, 200, 2, 64) for _ in range(3))
    dout = torch.from_numpy(normal(rng, 1, 200, 2, 64))
    block_mask = flex.create_block_mask(sliding_global, None, 2, 200, 200, device="cpu")
    from hfa import _block_mask
    rows = _block_mask.rows(block_mask)  # the cache an eager call fills

    def f(q, k, v, mask):
        return hfa.flash_attn_func(q, k, v, causal=True, block_mask=mask)

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    for mask in (block_mask, rows):
        results = []
        for fn in (f, compiled):
            tq, tk, tv = leaves(q, k, v)
            out = fn(tq, tk, tv, mask)
            out.backward(dout)
            results.append([out.detach()] + [t.grad for t in (tq, tk, tv)])
        for name, a, b in zip(("out", "dq", "dk", "dv"), *results):
            assert torch.equal(a, b), f"{name}: compiled != eager"


def test_rejections_name_the_argument():
    rng = np.random.default_rng(24)
    q, k, v = (torch.from_numpy(normal(rng, 1, 300, 2, 64)) for _ in range(3))
    block_mask = flex.create_block_mask(sliding_global, None, 2, 300, 300, device="cpu")
    from hfa import _block_mask
    rows = _block_mask.rows(block_mask)
    with pytest.raises(TypeError, match="kv_indices: expected a torch.Tensor, got ndarray"):
        hfa.flash_attn_func(q, k, v, block_mask=dict(rows, kv_indices=rows["kv_indices"].numpy()))
    bad = dict(rows, kv_indices=rows["kv_indices"].clone())
    bad["kv_indices"][0, 0, 0, 0] = 3  # 300 keys are 3 blocks
    out = torch.full_like(q, float("nan"))
    with torch.no_grad(), pytest.raises(ValueError, match="kv_indices: element"):
        hfa.flash_attn_func(q, k, v, block_mask=bad, out=out)
    assert out.isnan().all(), "a rejected call wrote out"
    with pytest.raises(ValueError, match="kv_num_blocks: .*i32, got f32"):
        hfa.flash_attn_func(q, k, v, block_mask=dict(rows, kv_num_blocks=rows["kv_num_blocks"]
                                                     .float()))
    with pytest.raises(TypeError, match="kv_indices: given twice"):
        hfa.flash_attn_func(q, k, v, block_mask=block_mask, kv_indices=rows["kv_indices"])
