"""Attention split over keys on torch tensors, CPU and CUDA: hfa.flash_attn_accumulate over the
parts of the keys against one call over all of them (bfloat16 / float16 inputs, float32 running
out, causal cuts that leave rows no key, zigzag half-rows as slices), on the current stream; and
flash_attn_backward's softmax_d over a NaN out against the computed D. Skips without torch, and
the CUDA cases without a GPU. The numpy side is test_partials.py, the library's semantics
tests/api/test_partials.cpp."""

import pytest

torch = pytest.importorskip(
    "torch", minversion="2.4",
    reason="torch is not installed: the split-over-keys calls on torch tensors are untested here")

import hfa  # noqa: E402
from torch_devices import DEVICES  # noqa: E402


def inputs(device, dtype, b=2, sq=150, sk=211, hq=8, hkv=2, d=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, sq, hq, d, generator=g).to(device, dtype)
    k = torch.randn(b, sk, hkv, d, generator=g).to(device, dtype)
    v = torch.randn(b, sk, hkv, d, generator=g).to(device, dtype)
    return q, k, v


def whole_in_f32(q, k, v, causal, sinks=None):
    """The one call's result before rounding: an f32 out (hfa.h allows it after 16-bit inputs)."""
    out = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=torch.float32, device=q.device)
    lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("-inf"), device=q.device)
    return hfa.flash_attn_accumulate(q, k, v, out, lse, causal=causal, learnable_sink=sinks)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cut", [0, 130, 211])
def test_two_parts_give_the_whole(device, dtype, causal, cut):
    q, k, v = inputs(device, dtype, seed=cut)
    sinks = torch.randn(q.shape[2], generator=torch.Generator().manual_seed(1)).to(device)
    want_out, want_lse = whole_in_f32(q, k, v, causal, sinks)
    sk = k.shape[1]
    out = torch.full(want_out.shape, float("nan"), device=device)  # lse -inf: never read
    lse = torch.full(want_lse.shape, float("-inf"), device=device)
    hfa.flash_attn_accumulate(q, k[:, :cut], v[:, :cut], out, lse, learnable_sink=sinks,
                              window_size=(-1, sk - cut) if causal else (-1, -1))
    hfa.flash_attn_accumulate(q, k[:, cut:], v[:, cut:], out, lse, causal=causal)
    # The GPU rounds P to the inputs' dtype before P·V in either form: the parts and the whole
    # differ by that rounding over different key blocks, not by the merge.
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    assert not torch.isnan(out).any()
    assert (out - want_out).abs().max().item() < tol
    assert (lse - want_lse).abs().max().item() < 1e-3


@pytest.mark.parametrize("device", DEVICES)
def test_half_rows_as_slices(device):
    """A zigzag ring's half-steps: the second half of the rows merges into slices of out, lse."""
    q, k, v = inputs(device, torch.bfloat16, seed=3)
    want_out, want_lse = whole_in_f32(q, k, v, False)
    out = torch.empty_like(want_out)
    lse = torch.full_like(want_lse, float("-inf"))
    hfa.flash_attn_accumulate(q, k[:, :100], v[:, :100], out, lse)
    for rows in (slice(0, 75), slice(75, None)):
        hfa.flash_attn_accumulate(q[:, rows], k[:, 100:], v[:, 100:], out[:, rows],
                                  lse[:, :, rows])
    assert (out - want_out).abs().max().item() < 2e-2
    assert (lse - want_lse).abs().max().item() < 1e-3


@pytest.mark.parametrize("device", DEVICES)
def test_accumulate_is_not_differentiable(device):
    q, k, v = inputs(device, torch.bfloat16, b=1, sq=8, sk=8, hq=2, hkv=2, d=64)
    q.requires_grad_()
    out = torch.empty(1, 8, 2, 64, device=device)
    lse = torch.full((1, 2, 8), float("-inf"), device=device)
    with pytest.raises(ValueError, match="not differentiable"):
        hfa.flash_attn_accumulate(q, k, v, out, lse)
    with torch.no_grad():
        hfa.flash_attn_accumulate(q, k, v, out, lse)
    assert not torch.isnan(out).any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_softmax_d_replaces_out(device, causal):
    q, k, v = inputs(device, torch.bfloat16, seed=5)
    out, lse = hfa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    dout = torch.randn_like(out)
    computed = hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=causal)
    d = (dout.float() * out.float()).sum(-1).transpose(1, 2).contiguous()  # (b, h, s) as lse
    given = hfa.flash_attn_backward(dout, q, k, v, torch.full_like(out, float("nan")), lse,
                                    causal=causal, softmax_d=d)
    for a, b in zip(computed, given):
        assert not torch.isnan(b).any()
        bound = 2e-2 * (1 + a.float().abs().max().item())
        assert (a.float() - b.float()).abs().max().item() <= bound
