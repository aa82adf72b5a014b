"""hfa.merge_partials on torch tensors, CPU and CUDA: bfloat16 / float16 / float32 partials
against float64, bfloat16 out, in place, on the current stream, and the same bytes on both
devices' special rows; with ring attention's merge (hfa.distributed.merge_attn_partial), the
fused path against its torch fallback. Skips without torch, and the CUDA cases without a GPU.
The numpy side is test_merge_partials.py."""

import pytest

torch = pytest.importorskip(
    "torch", minversion="2.4",
    reason="torch is not installed: merge_partials on torch tensors is untested here")

import hfa  # noqa: E402
from hfa.distributed import ring  # noqa: E402
from torch_devices import DEVICES, cuda_only  # noqa: E402

INF = float("inf")


def partials(n, device, shape=(2, 33, 4, 64), dtypes=(torch.bfloat16, torch.float32,
                                                       torch.float16), seed=0):
    """n (out, lse (b, h, s)) pairs; a quarter of each partial's rows unseen (lse -inf, out
    NaN), row (0, 0, 0) unseen by all."""
    g = torch.Generator().manual_seed(seed)
    outs, lses = [], []
    for k in range(n):
        out = torch.randn(shape, generator=g)
        lse = torch.randn(shape[:-1], generator=g) * 3 + k  # (b, s, h)
        lse[torch.rand(shape[:-1], generator=g) < 0.25] = -INF
        lse[0, 0, 0] = -INF
        out[torch.isneginf(lse)] = float("nan")
        outs.append(out.to(device, dtypes[k % len(dtypes)]))
        lses.append(lse.transpose(1, 2).contiguous().to(device))
    return outs, lses


def reference(outs, lses):
    ls = torch.stack([l.double().cpu().transpose(1, 2) for l in lses])  # (n, b, s, h)
    lse = torch.logsumexp(ls, 0)
    finite = ~torch.isneginf(lse)
    w = torch.where(torch.isneginf(ls), 0.0, torch.exp(ls - torch.where(finite, lse, 0.0)))
    out = sum(w[k][..., None] * torch.nan_to_num(o.double().cpu()) for k, o in enumerate(outs))
    return out, lse.transpose(1, 2)


def check(out, lse, want_out, want_lse, tol):
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    err = (out.double().cpu() - want_out).abs().max().item()
    assert err <= tol * (1 + want_out.abs().max().item())
    assert torch.equal(torch.isneginf(lse.cpu()), torch.isneginf(want_lse))
    finite = ~torch.isneginf(want_lse)
    assert (lse.double().cpu()[finite] - want_lse[finite]).abs().max().item() < 1e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [1, 2, 4, 8, 16])
def test_merge_matches_float64(device, n):
    outs, lses = partials(n, device, seed=n)
    out, lse = hfa.merge_partials(outs, lses)
    assert out.dtype == torch.float32 and out.device == outs[0].device
    check(out, lse, *reference(outs, lses), tol=1e-5)
    assert (out[0, 0, 0] == 0).all() and lse[0, 0, 0] == -INF


@pytest.mark.parametrize("device", DEVICES)
def test_bfloat16_out_and_varlen(device):
    outs, lses = partials(3, device, seed=3)
    flat = [o.reshape(-1, 4, 64) for o in outs]  # (total, heads, d): varlen
    flat_lses = [l.transpose(0, 1).reshape(4, -1) for l in lses]  # (heads, total), a copy
    out = torch.empty(flat[0].shape, dtype=torch.bfloat16, device=device)
    got, lse = hfa.merge_partials(flat, flat_lses, out=out)
    assert got is out
    want_out, want_lse = reference(outs, lses)
    check(out.reshape(outs[0].shape), lse.reshape(4, 2, 33).transpose(0, 1), want_out,
          want_lse, tol=2 ** -8)


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_into_an_accumulator(device):
    outs, lses = partials(2, device, dtypes=(torch.float32, torch.bfloat16), seed=4)
    want = reference(outs, lses)
    acc, acc_lse = outs[0], lses[0]
    out, lse = hfa.merge_partials(outs, lses, out=acc, lse=acc_lse)
    assert out is acc and lse is acc_lse
    check(acc, acc_lse, *want, tol=1e-5)


@cuda_only
def test_gpu_equals_cpu_and_follows_the_current_stream():
    outs, lses = partials(5, "cpu", seed=5)
    cpu_out, cpu_lse = hfa.merge_partials(outs, lses)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        gpu_out, gpu_lse = hfa.merge_partials([o.cuda() for o in outs], [l.cuda() for l in lses])
    stream.synchronize()
    assert torch.allclose(gpu_out.cpu(), cpu_out, rtol=1e-5, atol=1e-6)
    assert torch.equal(torch.isneginf(gpu_lse.cpu()), torch.isneginf(cpu_lse))
    assert torch.allclose(gpu_lse.cpu(), cpu_lse, rtol=1e-6, atol=1e-6)


def test_errors_name_the_argument():
    outs, lses = partials(2, "cpu")
    with pytest.raises(ValueError, match=r"^outs\[1\]: expected shape"):
        hfa.merge_partials([outs[0], outs[1][:, 1:]], lses)
    with pytest.raises(TypeError, match=r"lses\[0\]"):
        hfa.merge_partials(outs, [lses[0].double(), lses[1]])
    with pytest.raises(TypeError, match=r"outs\[1\]"):
        hfa.merge_partials([outs[0], outs[1].double()], lses)
    with pytest.raises(ValueError, match=r"^out: the last dim must have unit stride"):
        hfa.merge_partials(outs, lses, out=torch.empty(2, 33, 4, 128)[..., ::2])


# --- ring attention's merge ------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_ring_merge_is_fused_and_agrees_with_the_torch_merge(device):
    outs, lses = partials(2, device, dtypes=(torch.float32, torch.bfloat16), seed=6)
    out_part, lse_part = outs[1], lses[1]
    out, lse = torch.zeros_like(outs[0]), torch.full_like(lses[0], -INF)
    fused_out, fused_lse = out.clone(), lse.clone()
    torch_out, torch_lse = out.clone(), lse.clone()
    assert ring._fused_merge_takes(fused_out, fused_lse, outs[0], lses[0])
    for part, part_lse in ((outs[0], lses[0]), (out_part, lse_part)):  # from the empty state
        ring.merge_attn_partial(fused_out, fused_lse, part, part_lse)
        ring.merge_attn_partial_torch(torch_out, torch_lse,
                                      torch.nan_to_num(part), part_lse)  # torch reads NaN
    assert torch.allclose(fused_out, torch_out, rtol=1e-5, atol=1e-6)
    assert torch.equal(torch.isneginf(fused_lse), torch.isneginf(torch_lse))
    assert torch.allclose(fused_lse, torch_lse, rtol=1e-6, atol=1e-6)


def test_ring_merge_falls_back_to_torch_for_what_the_library_does_not_take():
    outs, lses = partials(2, "cpu", dtypes=(torch.float64,), seed=7)
    out = torch.zeros_like(outs[0])
    lse = torch.full_like(lses[0], -INF, dtype=torch.float32)
    assert not ring._fused_merge_takes(out, lse, torch.nan_to_num(outs[1]), lses[1])
    ring.merge_attn_partial(out, lse, torch.nan_to_num(outs[1]), lses[1])  # float64: in torch
    want_out, _ = reference([torch.nan_to_num(outs[1])], [lses[1]])
    assert torch.allclose(out, want_out, atol=1e-6)
