"""The FP8 forward through the torch front end: float8_e4m3fn q, k, v with FlashAttention-3's
descales and hfa's per-block ones, on the CPU and, with a GPU, on CUDA.

Each result is held to docs/design.md §6 against float64 attention (reference.py) of the values the
codes stand for (code · descale, in float32): max|ours − oracle| ≤ 2·max|peer − oracle| + floor.
The peer is float32 attention of the same values with out rounded to its dtype; on CUDA it also
feeds P·V with P in e4m3, as the FP8 kernels do (P·2^8 rounded, FlashAttention-3's max_offset).
The descales come in every form of hfa.h (per tensor, (batch, heads_kv), (batch, heads_q), per
block of rows), as plain, broadcast (expand: stride 0) and transposed views; with GQA, varlen,
causal, out= in bfloat16 and float16, torch.compile and the errors. Skips without torch.
"""

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", minversion="2.4",
    reason="torch is not installed: the torch front end (custom ops, autograd, torch.compile) "
           "is untested on this machine; the numpy tests still run")
if not hasattr(torch, "float8_e4m3fn"):
    pytest.skip("this torch has no float8_e4m3fn", allow_module_level=True)

import hfa  # noqa: E402
from torch_devices import DEVICES, cuda_only  # noqa: E402
from reference import attention, check_s6, lse_floor, round_to  # noqa: E402

E4M3 = torch.float8_e4m3fn
P_OFFSET = 2.0 ** 8  # FlashAttention-3's FP8 kernels scale P by 2^8 before rounding it


def round_e4m3(x):
    """x rounded to the nearest e4m3 value (ties to even), as float64; |x| <= 448 here."""
    x = np.asarray(x, dtype=np.float64)
    _, exponent = np.frexp(np.maximum(np.abs(x), 2.0 ** -6))  # |x| = m·2^e, m in [0.5, 1)
    step = np.ldexp(1.0, exponent - 4)  # 3 mantissa bits; subnormals share 2^-6's step
    return np.round(x / step) * step


def fp8_p(p):
    return round_e4m3(p * P_OFFSET) / P_OFFSET


def random_scales(rng, shape, device):
    """Descales 2^u, u uniform in [-3, 3]: each position its own value."""
    return torch.from_numpy(2.0 ** rng.uniform(-3, 3, shape)).float().to(device)


def row_scales(descale, lens, heads, block):
    """(tokens, heads): the scale hfa.h gives each row of each head of sequences of lengths
    `lens` (fixed length: batch × [seqlen]), rows counted from each sequence's first."""
    tokens = sum(lens)
    if descale is None:
        return torch.ones(tokens, heads)
    d = descale.float().cpu()
    if d.dim() == 1:
        return d.expand(tokens, heads)
    rows = []
    for b, n in enumerate(lens):
        per_row = d[b].expand(n, -1) if d.dim() == 2 else d[b, torch.arange(n) // block]
        # A (…, heads_kv) descale of q serves each GQA group: query head h has scale h // group.
        rows.append(per_row.repeat_interleave(heads // d.shape[-1], dim=-1))
    return torch.cat(rows)


def quantized(rng, shape, descale, lens, block, device):
    """(e4m3 codes on `device`, the float32 values they stand for) of random normal values."""
    x = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
    flat = x.reshape(-1, shape[-2], shape[-1])
    scale = row_scales(descale, lens, shape[-2], block)[..., None]
    codes = (flat / scale).to(E4M3)
    return codes.reshape(shape).to(device), (codes.float() * scale).reshape(shape)


def descales(rng, form, batch, nblocks, heads_q, heads_kv, device):
    """(q_descale, k_descale, v_descale) in one of hfa.h's forms, made on `device` (so that
    broadcast and transposed views reach the library as views)."""
    def scales(*shape):
        return random_scales(rng, shape, device)

    if form == "none":
        return None, None, None
    if form == "per_tensor":
        return scales(1), scales(1), scales(1)
    if form == "fa3":  # (batch, heads_kv); k and v broadcast over the batch as vLLM passes them
        return (scales(batch, heads_kv), scales(1, heads_kv).expand(batch, heads_kv),
                scales(1, heads_kv).expand(batch, heads_kv))
    if form == "per_query_head":
        return scales(batch, heads_q), scales(batch, heads_kv), scales(batch, heads_kv)
    nq, nk = nblocks
    if form == "per_block":
        return scales(batch, nq, heads_q), scales(batch, nk, heads_kv), scales(batch, nk, heads_kv)
    assert form == "per_block_transposed"  # heads outermost in memory: last stride != 1; q's
    # heads are kv heads here, each serving its GQA group
    return tuple(scales(heads_kv, batch, n).permute(1, 2, 0) for n in (nq, nk, nk))


def fp8_score_allowance(q, k, softmax_scale=None):
    """What the FP8 tensor cores' Q·Kᵀ may add to an LSE error: they accumulate with about 13
    mantissa bits, truncated (measured on the H200: a score errs by up to ~2^-12 of Σ|q·k| ≤
    ‖q‖·‖k‖); the allowance is 2^-10·scale·max‖q‖·max‖k‖, as tests/sm90/test_forward_fp8.cpp's."""
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    norm = lambda x: float(np.sqrt((x * x).sum(axis=-1)).max(initial=0.0))  # noqa: E731
    return 2.0 ** -10 * scale * norm(q) * norm(k)


def check_against_float64(device, got_out, got_lse, values, out_dtype, **reference_args):
    """§6 for out and lse against float64 attention of the dequantized values."""
    q, k, v = (t.double().numpy() for t in values)
    oracle = attention(q, k, v, **reference_args)
    p_rounding = fp8_p if device == "cuda" else None
    peer = attention(q, k, v, compute=np.float32, p_rounding=p_rounding,
                     rounded_sums=p_rounding is not None, **reference_args)
    peer_out = round_to(peer["out"].astype(np.float32), str(out_dtype).split(".")[-1])
    out = got_out.float().cpu().numpy()
    assert not np.isnan(out).any(), "an out element was left unwritten (NaN)"
    check_s6("out", out, oracle["out"], peer_out)
    floor = lse_floor(oracle["lse"])
    if device == "cuda":
        floor += fp8_score_allowance(q, k, reference_args.get("softmax_scale"))
    check_s6("lse", got_lse.cpu().numpy(), oracle["lse"], peer["lse"], floor=floor)


FORMS = ["none", "per_tensor", "fa3", "per_query_head", "per_block", "per_block_transposed"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_against_float64(device, form, causal):
    rng = np.random.default_rng(FORMS.index(form) * 2 + causal)
    batch, sq, sk, hq, hkv, d = 2, 200, 300, 4, 2, 128
    block_q, block_kv = (48, 128) if form.startswith("per_block") else (0, 0)
    nblocks = (-(-sq // max(block_q, 1)), -(-sk // max(block_kv, 1)) + 1)  # one block to spare
    qd, kd, vd = descales(rng, form, batch, nblocks, hq, hkv, device)
    q, qv = quantized(rng, (batch, sq, hq, d), qd, [sq] * batch, block_q, device)
    k, kv = quantized(rng, (batch, sk, hkv, d), kd, [sk] * batch, block_kv, device)
    v, vv = quantized(rng, (batch, sk, hkv, d), vd, [sk] * batch, block_kv, device)
    out, lse = hfa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True,
                                   q_descale=qd, k_descale=kd, v_descale=vd,
                                   descale_block_q=block_q, descale_block_kv=block_kv)
    assert out.dtype == torch.bfloat16 and out.shape == (batch, sq, hq, d)
    check_against_float64(device, out, lse, (qv, kv, vv), torch.bfloat16, causal=causal)


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_blocks_count_from_each_sequence(device):
    rng = np.random.default_rng(20)
    lens_q, lens_k = [37, 0, 150, 9], [64, 10, 260, 1]
    hq, hkv, d, block_q, block_kv = 4, 1, 128, 32, 128
    batch = len(lens_q)
    nblocks = (-(-max(lens_q) // block_q), -(-max(lens_k) // block_kv))
    qd, kd, vd = descales(rng, "per_block", batch, nblocks, hq, hkv, device)
    q, qv = quantized(rng, (sum(lens_q), hq, d), qd, lens_q, block_q, device)
    k, kv = quantized(rng, (sum(lens_k), hkv, d), kd, lens_k, block_kv, device)
    v, vv = quantized(rng, (sum(lens_k), hkv, d), vd, lens_k, block_kv, device)
    cu = [torch.tensor(np.cumsum([0] + n), dtype=torch.int32, device=device)
          for n in (lens_q, lens_k)]
    used_k = torch.tensor([50, 10, 200, 1], dtype=torch.int32, device=device)
    out, lse = hfa.flash_attn_varlen_func(
        q, k, v, cu[0], cu[1], max(lens_q), max(lens_k), causal=True, seqused_k=used_k,
        return_attn_probs=True, q_descale=qd, k_descale=kd, v_descale=vd,
        descale_block_q=block_q, descale_block_kv=block_kv)
    check_against_float64(device, out, lse, (qv, kv, vv), torch.bfloat16, causal=True,
                          cu_seqlens_q=cu[0].cpu().numpy(), cu_seqlens_k=cu[1].cpu().numpy(),
                          seqused_k=used_k.cpu().numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_out_buffers_in_bf16_and_f16(device):
    """out= of either 16-bit type is written in place; bf16 gives the bytes of out=None, f16
    agrees with them to within its own rounding."""
    rng = np.random.default_rng(21)
    qd, kd, vd = descales(rng, "fa3", 2, None, 4, 2, device)
    q, _ = quantized(rng, (2, 70, 4, 128), qd, [70, 70], 0, device)
    k, _ = quantized(rng, (2, 90, 2, 128), kd, [90, 90], 0, device)
    v, _ = quantized(rng, (2, 90, 2, 128), vd, [90, 90], 0, device)
    scales = dict(q_descale=qd, k_descale=kd, v_descale=vd)
    want = hfa.flash_attn_func(q, k, v, causal=True, **scales)
    for dtype in (torch.bfloat16, torch.float16):
        buf = torch.full(want.shape, float("nan"), dtype=dtype, device=device)
        assert hfa.flash_attn_func(q, k, v, causal=True, out=buf, **scales) is buf
        if dtype == torch.bfloat16:
            assert torch.equal(buf, want)
        else:
            torch.testing.assert_close(buf.float(), want.float(), rtol=2 ** -7, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_backward_is_not_supported(device):
    """As FlashAttention-3: the forward runs, a backward through it raises."""
    x = torch.randn(1, 16, 2, 128, device=device, dtype=torch.bfloat16, requires_grad=True)
    q = x.to(E4M3)
    assert q.requires_grad
    out = hfa.flash_attn_func(q, q.detach(), q.detach())
    with pytest.raises(NotImplementedError, match="FP8 backward is not supported"):
        out.float().sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_errors_name_the_argument(device):
    q = torch.zeros(1, 8, 2, 128, device=device).to(E4M3)
    bf16 = torch.zeros(1, 8, 2, 128, device=device, dtype=torch.bfloat16)
    one = torch.ones(1, device=device)
    with pytest.raises(ValueError, match=r"^v: expected dtype e4m3 \(as q and k\), got bf16"):
        hfa.flash_attn_func(q, q, bf16)
    if hasattr(torch, "float8_e5m2"):
        e5m2 = q.float().to(torch.float8_e5m2)
        with pytest.raises(NotImplementedError, match=r"^q: e5m2 inputs are not supported"):
            hfa.flash_attn_func(e5m2, e5m2, e5m2)
    with pytest.raises(ValueError, match=r"^q_descale: is given, but the inputs are bf16"):
        hfa.flash_attn_func(bf16, bf16, bf16, q_descale=one)
    with pytest.raises(ValueError, match=r"^k_descale: expected dtype f32, got bf16"):
        hfa.flash_attn_func(q, q, q, k_descale=one.bfloat16())
    with pytest.raises(ValueError, match=r"^v_descale: expected shape \(1, 2\) \(batch, heads_kv"):
        hfa.flash_attn_func(q, q, q, v_descale=torch.ones(1, 3, device=device))
    with pytest.raises(ValueError, match=r"^descale_block_q: must be > 0 with a rank-3"):
        hfa.flash_attn_func(q, q, q, q_descale=torch.ones(1, 1, 2, device=device))
    with pytest.raises(ValueError, match=r"^out: expected dtype bf16 or f16"):
        hfa.flash_attn_func(q, q, q, out=torch.empty(1, 8, 2, 128, device=device).to(E4M3))
    with pytest.raises(ValueError, match=r"^q_descale: FP8 inputs are torch.float8_e4m3fn"):
        hfa.flash_attn_func(np.zeros((1, 8, 2, 64), np.float32), np.zeros((1, 8, 2, 64),
                            np.float32), np.zeros((1, 8, 2, 64), np.float32), q_descale=one)


@cuda_only
def test_cuda_key_blocks_are_whole_tiles():
    q = torch.zeros(1, 256, 2, 128, device="cuda").to(E4M3)
    blocks = torch.ones(1, 4, 2, device="cuda")
    with pytest.raises(NotImplementedError, match=r"^descale_block_kv: 64 is not a multiple of"):
        hfa.flash_attn_func(q, q, q, k_descale=blocks, descale_block_kv=64)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_and_torch_compile(device):
    """The op's fake kernel and autograd registration take the FP8 arguments
    (torch.library.opcheck; its schema test computes on the inputs, which float8 tensors do not
    support), and torch.compile(fullgraph=True) traces an FP8 call with descales, matching
    eager."""
    rng = np.random.default_rng(22)
    nblocks = (2, 1)
    qd, kd, vd = descales(rng, "per_block", 1, nblocks, 4, 2, device)
    q, _ = quantized(rng, (1, 64, 4, 128), qd, [64], 32, device)
    k, _ = quantized(rng, (1, 128, 2, 128), kd, [128], 128, device)
    v, _ = quantized(rng, (1, 128, 2, 128), vd, [128], 128, device)
    args = (q, k, v, None, None, 0, 0, None, True, -1, -1, 0.0, False, None, None, None,
            qd, kd, vd, 32, 128)
    torch.library.opcheck(torch.ops.hfa.fwd.default, args,
                          test_utils=("test_autograd_registration", "test_faketensor"))

    def f(q, k, v, qd, kd, vd):
        return hfa.flash_attn_func(q, k, v, causal=True, q_descale=qd, k_descale=kd,
                                   v_descale=vd, descale_block_q=32, descale_block_kv=128)

    torch._dynamo.reset()
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    assert torch.equal(compiled(q, k, v, qd, kd, vd), f(q, k, v, qd, kd, vd))
