"""hfa.quantize_fp8 / hfa.hadamard_signs on torch tensors: the descale shapes of each
granularity, the round trip within half an e4m3 step of the scale, the rotation keeping q·kᵀ,
the CPU and a GPU writing the same bytes, and the errors. Skips without torch, and the CUDA
cases without a GPU."""

import math

import pytest

torch = pytest.importorskip(
    "torch", minversion="2.4",
    reason="torch is not installed: quantize_fp8 (torch only) is untested on this machine")

import hfa  # noqa: E402
from torch_devices import DEVICES, cuda_only  # noqa: E402

GRANULARITIES = ["tensor", "head", "block"]
E4M3_MAX = 448.0


def as_bytes(t):
    return t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()


def inputs(shape, seed, dtype=torch.float32, outliers=True):
    """N(0, 1) with 0.1 % outliers of σ 10 (FlashAttention-3's accuracy setup)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    if outliers:
        mask = torch.rand(shape, generator=g) < 1e-3
        x = torch.where(mask, 10 * torch.randn(shape, generator=g), x)
    return x.to(dtype)


def dequantize(codes, scales, granularity, block, cu_seqlens=None):
    """code · scale as float32, scales broadcast over their groups (the forward's reading)."""
    values = codes.float()
    if granularity == "tensor":
        return values * scales[0]
    if cu_seqlens is None:
        batch, seqlen = codes.shape[:2]
        if granularity == "head":
            return values * scales[:, None, :, None]
        rows = torch.arange(seqlen, device=codes.device) // block
        return values * scales[:, rows, :][..., None]
    out = torch.empty_like(values)
    cu = cu_seqlens.tolist()
    for b in range(len(cu) - 1):
        part = values[cu[b]:cu[b + 1]]
        if granularity == "head":
            out[cu[b]:cu[b + 1]] = part * scales[b][None, :, None]
        else:
            rows = torch.arange(part.shape[0], device=codes.device) // block
            out[cu[b]:cu[b + 1]] = part * scales[b, rows][..., None]
    return out


def rotate(x, signs):
    """H_d · diag(signs) · x / sqrt(d) over the last dim, in float64 (Sylvester H_d)."""
    d = x.shape[-1]
    idx = torch.arange(d)
    parity = torch.zeros(d, d, dtype=torch.int64)
    for bit in range(int(math.log2(d))):
        parity += ((idx[:, None] >> bit) & 1) * ((idx[None, :] >> bit) & 1)
    h = (1 - 2 * (parity % 2)).double()
    return (x.double().cpu() * signs.double().cpu()) @ h.T / math.sqrt(d)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("hadamard", [False, True])
def test_round_trip_within_half_a_step(device, granularity, hadamard):
    x = inputs((2, 300, 4, 128), seed=1).to(device)
    codes, scales = hfa.quantize_fp8(x, granularity, block=128, hadamard=hadamard, seed=5)
    assert codes.dtype == torch.float8_e4m3fn and codes.shape == x.shape
    assert scales.dtype == torch.float32 and scales.device == x.device
    assert tuple(scales.shape) == {"tensor": (1,), "head": (2, 4), "block": (2, 3, 4)}[granularity]
    y = rotate(x, hfa.hadamard_signs(128, 5)).float().to(device) if hadamard else x
    back = dequantize(codes, scales, granularity, 128)
    # e4m3 keeps 3 mantissa bits: half a step is 1/16 of the value (relative), and values far
    # below the group's max may round to zero (at most half the smallest subnormal step).
    smallest = scales.max() * 2.0 ** -9
    assert torch.all((back - y).abs() <= y.abs() / 16 * 1.001 + smallest)


@pytest.mark.parametrize("device", DEVICES)
def test_rotation_keeps_q_k_products(device):
    q = inputs((1, 64, 2, 128), seed=2).to(device)
    k = inputs((1, 64, 2, 128), seed=3).to(device)
    signs = hfa.hadamard_signs(128, seed=11, device=device)
    qr, kr = rotate(q, signs), rotate(k, signs)
    exact = torch.einsum("bshd,bthd->bhst", q.double().cpu(), k.double().cpu())
    kept = torch.einsum("bshd,bthd->bhst", qr, kr)
    assert torch.allclose(kept, exact, atol=1e-9, rtol=0)
    # The library's own rotation, read back through per-head scales: its fp32 rotation within
    # e4m3's half step of the float64 one.
    codes, scales = hfa.quantize_fp8(q, "head", signs=signs)
    back = dequantize(codes, scales, "head", 0).double().cpu()
    assert torch.all((back - qr).abs() <= qr.abs() / 16 * 1.001 + scales.max().item() * 2 ** -9)


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_blocks_restart_at_each_sequence(device):
    cu = torch.tensor([0, 200, 200, 257], dtype=torch.int32, device=device)
    x = torch.ones((257, 2, 64), device=device)
    x[199, 1, 5] = 448.0 * 4  # the last row of sequence 0's second block, head 1
    codes, scales = hfa.quantize_fp8(x, "block", block=128, cu_seqlens=cu)
    assert tuple(scales.shape) == (3, 2, 2)
    expect = torch.full((3, 2, 2), 1.0 / 448)
    expect[0, 1, 1] = 4.0
    expect[1] = 1.0       # an empty sequence: scale 1
    expect[2, 1] = 1.0    # sequence 2 has 57 rows: no second block
    assert torch.equal(scales.cpu(), expect)
    back = dequantize(codes, scales, "block", 128, cu).cpu()
    assert torch.allclose(back[:, 0], x.cpu()[:, 0], rtol=1e-6, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_zero_group_scale_is_one(device):
    x = torch.zeros((1, 8, 2, 64), device=device)
    x[0, :, 1] = -3.0
    codes, scales = hfa.quantize_fp8(x, "head")
    assert torch.equal(scales.cpu(), torch.tensor([[1.0, 3.0 / 448]]))
    assert torch.equal(codes.float().cpu()[0, :, 0], torch.zeros(8, 64))


# (granularity, block): the block size only matters for per-block scaling, where 128 takes one
# pass and 1000 rows are blocks beyond a CTA.
SCALINGS = [(g, 128) for g in GRANULARITIES] + [("block", 1000)]


@cuda_only
@pytest.mark.parametrize("granularity,block", SCALINGS)
@pytest.mark.parametrize("hadamard", [False, True])
@pytest.mark.parametrize("hdim", [64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cuda_matches_cpu(granularity, block, hadamard, hdim, dtype):
    x = inputs((3, 1100, 2, hdim), seed=hdim, dtype=dtype)
    x[0, 0, 0, 0] = float("inf")  # its group's scale is NaN, its codes NaN
    cpu = hfa.quantize_fp8(x, granularity, block=block, hadamard=hadamard, seed=1)
    gpu = hfa.quantize_fp8(x.cuda(), granularity, block=block, hadamard=hadamard, seed=1)
    torch.cuda.synchronize()
    assert gpu[0].is_cuda and as_bytes(gpu[0]) == as_bytes(cpu[0])
    assert as_bytes(gpu[1]) == as_bytes(cpu[1])


@cuda_only
def test_cuda_varlen_and_strided_match_cpu():
    cu = torch.tensor([0, 700, 700, 829, 834], dtype=torch.int32)
    x = inputs((834, 3, 160), seed=4, dtype=torch.bfloat16)[..., :128]  # strided rows
    for granularity in GRANULARITIES:
        cpu = hfa.quantize_fp8(x, granularity, block=100, hadamard=True, cu_seqlens=cu)
        gpu = hfa.quantize_fp8(x.cuda(), granularity, block=100, hadamard=True,
                               cu_seqlens=cu.cuda())
        assert as_bytes(gpu[0]) == as_bytes(cpu[0]) and as_bytes(gpu[1]) == as_bytes(cpu[1])


@pytest.mark.parametrize("device", DEVICES)
def test_signs_are_the_same_everywhere(device):
    s = hfa.hadamard_signs(256, seed=42, device=device)
    assert s.dtype == torch.float32 and s.shape == (256,)
    assert set(s.cpu().tolist()) == {1.0, -1.0}
    assert torch.equal(s.cpu(), hfa.hadamard_signs(256, seed=42))
    assert not torch.equal(s.cpu(), hfa.hadamard_signs(256, seed=43))


def test_errors_name_the_argument():
    x = torch.zeros((1, 4, 2, 64))
    with pytest.raises(ValueError, match=r"^granularity: expected one of tensor, head, block"):
        hfa.quantize_fp8(x, "row")
    with pytest.raises(ValueError, match=r"^x: expected rank 4"):
        hfa.quantize_fp8(x[0])
    with pytest.raises(ValueError, match=r"^block: 0 is out of range \[1, "):
        hfa.quantize_fp8(x, "block", block=0)
    with pytest.raises(TypeError, match=r"^x: expected float32, float16 or bfloat16"):
        hfa.quantize_fp8(x.to(torch.int32))
    with pytest.raises(hfa.HfaNotSupported, match=r"^signs: the Hadamard rotation takes headdim"):
        hfa.quantize_fp8(torch.zeros((1, 4, 2, 96)), hadamard=True)
    with pytest.raises(hfa.HfaInvalidArgument, match=r"^signs: element 0 is 0.5"):
        hfa.quantize_fp8(x, signs=torch.full((64,), 0.5))
    with pytest.raises(hfa.HfaInvalidArgument, match=r"^cu_seqlens: last element 3 must equal"):
        hfa.quantize_fp8(x[0], cu_seqlens=torch.tensor([0, 3], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"^seed: -1 is out of range \[0, 18446744073709551615\]"):
        hfa.hadamard_signs(64, seed=-1)
