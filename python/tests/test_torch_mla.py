"""hfa.flash_mla_with_kvcache on torch CPU tensors as a serving engine calls FlashMLA: bf16 q
and cache, FlashMLA's FP8 cache written by FlashMLA's quantizer rule (here, in torch: a power-of-
two scale per 128 latent values, codes by torch's float8_e4m3fn cast), sparse indices; against
the float64 attention of test_mla.py over the values the cache holds. On a GPU dense MLA runs on
the sm90 MLA decode kernels, on a bf16 cache and on FP8 records (against float64 too), and the
forms without a GPU kernel (FP8 records with fp16 q, sparse indices) are refused
(NotImplementedError naming the argument)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hfa  # noqa: E402
from test_mla import D, DV, PAGE, dense_reference, expect_close, sparse_reference  # noqa: E402


def flashmla_quantize(x):
    """(..., 576) float values -> (..., 656) float8_e4m3fn records, FlashMLA's reference rule:
    scale = 2^ceil(log2(max(amax / 448, 1e-4))) per 128 latent values, codes x / scale cast
    to e4m3, the 64 rotary values kept as bf16."""
    lead = x.shape[:-1]
    records = torch.empty(lead + (656,), dtype=torch.uint8)
    latent = x[..., :512].float().reshape(lead + (4, 128))
    scale = (latent.abs().amax(-1) / 448.0).clamp_min(1e-4).log2().ceil().exp2()
    codes = (latent / scale[..., None]).to(torch.float8_e4m3fn).view(torch.uint8)
    records[..., :512] = codes.reshape(lead + (512,))
    records[..., 512:528] = scale.contiguous().view(torch.uint8).reshape(lead + (16,))
    records[..., 528:] = x[..., 512:].to(torch.bfloat16).contiguous().view(torch.uint8)
    return records.view(torch.float8_e4m3fn)


def dequantize(records):
    r = records.view(torch.uint8)
    lead = r.shape[:-1]
    codes = r[..., :512].contiguous().view(torch.float8_e4m3fn).double().reshape(lead + (4, 128))
    scale = r[..., 512:528].contiguous().view(torch.float32).double()
    rope = r[..., 528:].contiguous().view(torch.bfloat16).double()
    return torch.cat([(codes * scale[..., None]).reshape(lead + (512,)), rope], -1)


def paged(lengths, generator, fp8):
    """cache, its values (pages, 64, 576) float64, block_table, cache_seqlens: pages shuffled,
    every unused slot NaN."""
    used = [(n + PAGE - 1) // PAGE for n in lengths]
    pages = sum(used) + 2
    order = torch.randperm(pages, generator=generator).int()
    table = torch.full((len(lengths), max(max(used), 1)), -1, dtype=torch.int32)
    start = 0
    for b, n in enumerate(used):
        table[b, :n] = order[start:start + n]
        start += n
    x = torch.randn(pages, PAGE, 1, D, generator=generator) * torch.randn(
        pages, PAGE, 1, 1, generator=generator).exp()
    valid = torch.zeros(pages, PAGE, dtype=torch.bool)
    for b, n in enumerate(lengths):
        for j in range(n):
            valid[table[b, j // PAGE], j % PAGE] = True
    if fp8:
        cache = flashmla_quantize(x)
        values = dequantize(cache)[:, :, 0]
        cache.view(torch.uint8)[~valid] = 0xFF  # NaN codes, scales and rotary values
    else:
        cache = x.to(torch.bfloat16)
        values = cache[:, :, 0].double()
        cache[~valid] = float("nan")
    return cache, values.numpy(), table, torch.tensor(lengths, dtype=torch.int32)


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("heads,s_q", [(16, 1), (64, 2), (128, 4)])
def test_dense_matches_float64(fp8, heads, s_q):
    g = torch.Generator().manual_seed(heads * 10 + s_q)
    cache, values, table, seqlens = paged([0, 1, 100, 257], g, fp8)
    q = torch.randn(4, s_q, heads, D, generator=g).to(torch.bfloat16)
    meta, splits = hfa.get_mla_metadata(seqlens, s_q * heads, 1, is_fp8_kvcache=fp8)
    out, lse = hfa.flash_mla_with_kvcache(q, cache, table, seqlens, DV, meta, splits,
                                          softmax_scale=0.05, causal=True, is_fp8_kvcache=fp8)
    assert out.dtype == torch.bfloat16 and out.shape == (4, s_q, heads, DV)
    assert lse.dtype == torch.float32 and lse.shape == (4, heads, s_q)
    want_out, want_lse = dense_reference(q.double().numpy(), values, table.numpy(),
                                         seqlens.numpy(), True, 0.05)
    expect_close(out.float().numpy(), lse.numpy(), want_out, want_lse, 1e-2)


def test_fp8_cache_close_to_bf16_cache():
    """The FP8 cache's error against the values it quantizes: what FP8 costs, bounded (E4M3's
    relative step is 1/16; averaged over keys the output's relative error is far smaller)."""
    g = torch.Generator().manual_seed(3)
    cache = torch.randn(6, PAGE, 1, D, generator=g).to(torch.bfloat16)
    table = torch.tensor([[4, 1, 0], [5, 2, 3]], dtype=torch.int32)
    seqlens = torch.tensor([150, 192], dtype=torch.int32)
    q = torch.randn(2, 1, 16, D, generator=g).to(torch.bfloat16)
    exact, _ = hfa.flash_mla_with_kvcache(q, cache, table, seqlens, DV, None)
    approx, _ = hfa.flash_mla_with_kvcache(q, flashmla_quantize(cache.float()), table, seqlens,
                                           DV, None, is_fp8_kvcache=True)
    error = (approx.float() - exact.float()).norm() / exact.float().norm()
    assert 0 < error < 0.05


@pytest.mark.parametrize("fp8", [False, True])
def test_sparse_matches_float64(fp8):
    g = torch.Generator().manual_seed(17)
    cache, values, table, seqlens = paged([500, 0, 64], g, fp8)
    b, s_q, heads, topk = 3, 2, 128, 64
    q = torch.randn(b, s_q, heads, D, generator=g).to(torch.bfloat16)
    indices = torch.full((b, s_q, topk), -1, dtype=torch.int32)
    for bi in range(b):
        n = int(seqlens[bi])
        for i in range(s_q):
            if n:
                picked = torch.randint(0, n, (topk - 5,), generator=g)
                indices[bi, i, :topk - 5] = table[bi, picked // PAGE] * PAGE + picked % PAGE
            indices[bi, i] = indices[bi, i, torch.randperm(topk, generator=g)]
    out, lse = hfa.flash_mla_with_kvcache(q, cache, None, None, DV, hfa.get_mla_metadata()[0],
                                          indices=indices, is_fp8_kvcache=fp8)
    want_out, want_lse = sparse_reference(q.double().numpy(), values, indices.numpy(),
                                          D ** -0.5)
    expect_close(out.float().numpy(), lse.numpy(), want_out, want_lse, 1e-2)


def column_magnitudes(q, values, table, seqlens, causal, scale):
    """Σ p·|v| / Σ p of each output column (b, s_q, h, 512), the attention's own weights p."""
    b, s_q, h, _ = q.shape
    magnitude = np.zeros((b, s_q, h, DV))
    for bi in range(b):
        n = int(seqlens[bi])
        keys = np.array([values[table[bi, j // PAGE], j % PAGE] for j in range(n)]).reshape(n, D)
        for i in range(s_q):
            seen = max(min(n, n - s_q + i + 1) if causal else n, 0)
            if seen == 0:
                continue
            scores = q[bi, i] @ keys[:seen].T * scale
            p = np.exp(scores - scores.max(-1, keepdims=True))
            magnitude[bi, i] = p @ np.abs(keys[:seen, :DV]) / p.sum(-1, keepdims=True)
    return magnitude


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_gpu_dense_matches_float64_and_refuses_the_rest_by_name():
    g = torch.Generator().manual_seed(1)
    bf16_paged = paged([70, 0, 200], g, False)
    q = torch.randn(3, 2, 16, D, generator=g).to(torch.bfloat16)
    fp8_paged = paged([70, 0, 200], g, True)
    # The bf16 cache, and FlashMLA's FP8 records, whose values the GPU widens to bf16 exactly
    # (e4m3 times a power-of-two scale): both against float64 over the values the cache holds.
    for fp8, (cache, values, table, seqlens) in ((False, bf16_paged), (True, fp8_paged)):
        _, want_lse = hfa.flash_mla_with_kvcache(q, cache, table, seqlens, DV, None, causal=True,
                                                 is_fp8_kvcache=fp8)
        out, lse = hfa.flash_mla_with_kvcache(q.cuda(), cache.cuda(), table.cuda(),
                                              seqlens.cuda(), DV, None, causal=True,
                                              is_fp8_kvcache=fp8)
        torch.testing.assert_close(lse.cpu(), want_lse, atol=1e-4, rtol=1e-4)
        # Within FlashMLA's bf16 bound taken of each column's magnitude Σ p·|v| / Σ p: the GPU
        # rounds P to bf16 before P·V (the CPU does not), which moves a column by up to 2^-8 of
        # it, far more than of |out| where the cache's large values cancel.
        exact_out, _ = dense_reference(q.double().numpy(), values, table.numpy(), seqlens.numpy(),
                                       True, D ** -0.5)
        magnitude = column_magnitudes(q.double().numpy(), values, table.numpy(), seqlens.numpy(),
                                      True, D ** -0.5)
        error = np.abs(out.cpu().double().numpy() - exact_out)
        assert (error <= 8e-4 + 2.01 / 128 * magnitude).all(), (fp8, error.max())
    fp8_cache, _, fp8_table, fp8_seqlens = fp8_paged
    with pytest.raises(NotImplementedError, match="^q: dtype f16 with FlashMLA's FP8"):
        hfa.flash_mla_with_kvcache(q.half().cuda(), fp8_cache.cuda(), fp8_table.cuda(),
                                   fp8_seqlens.cuda(), DV, None, is_fp8_kvcache=True)
    indices = torch.zeros(1, 1, 64, dtype=torch.int32, device="cuda")
    with pytest.raises(NotImplementedError, match="^indices: sparse"):
        hfa.flash_mla_with_kvcache(q[:1, :1].cuda(), bf16_paged[0].cuda(), None, None, DV, None,
                                   indices=indices)


def mla_step(q, cache, table, seqlens, meta, layers):
    """`layers` calls through one holder (a decoding step's layers, each its own q)."""
    return [hfa.flash_mla_with_kvcache(q[n], cache, table, seqlens, DV, meta, causal=True)
            for n in range(layers)]


def expect_equal_calls(got, want):
    for (out, lse), (want_out, want_lse) in zip(got, want):
        assert torch.equal(out, want_out) and torch.equal(lse, want_lse)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_gpu_holder_keeps_the_schedule_of_its_lengths():
    """One holder over a step's layers: its first call makes the schedule in the holder's
    workspace, the others read it, with results bit for bit those of calls that each make their
    own (sequences cut across parts: 128 heads, 2 tokens); lengths written in place (a new torch
    version) and a new cache_seqlens tensor are scheduled again, and so are the calls inside a CUDA
    graph's capture, whose replays schedule the lengths each finds."""
    g = torch.Generator().manual_seed(23)
    # Pages for these lengths; the calls attend to at most as many (a stale schedule shows where
    # a sequence grows: its last tiles would be nobody's).
    cache, _, table, _ = paged([300, 0, 1000, 2100, 65, 4000], g, False)
    cache, table = cache.cuda(), table.cuda()
    seqlens = torch.tensor([200, 0, 600, 2100, 65, 2500], dtype=torch.int32, device="cuda")
    q = torch.randn(3, 6, 2, 128, D, generator=g).to(torch.bfloat16).cuda()
    meta = hfa.get_mla_metadata()[0]
    step = mla_step(q, cache, table, seqlens, meta, 3)
    workspace = meta.workspace
    assert workspace is not None and workspace.device == q.device
    expect_equal_calls(step, mla_step(q, cache, table, seqlens, None, 3))
    expect_equal_calls(mla_step(q, cache, table, seqlens, meta, 3), step)
    assert meta.workspace is workspace  # read, not made again
    seqlens[2] = 1000  # in place: scheduled again
    expect_equal_calls(mla_step(q, cache, table, seqlens, meta, 2),
                       mla_step(q, cache, table, seqlens, None, 2))
    longer = seqlens.clone()
    longer[0] = 300
    expect_equal_calls(mla_step(q, cache, table, longer, meta, 2),
                       mla_step(q, cache, table, longer, None, 2))

    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        mla_step(q, cache, table, seqlens, meta, 2)  # warm-up off the capture
        with torch.cuda.graph(graph, stream=stream):
            captured = mla_step(q, cache, table, seqlens, meta, 2)
    torch.cuda.current_stream().wait_stream(stream)
    for lengths in ([100, 0, 500, 2100, 1, 1000], [300, 0, 1000, 64, 65, 4000]):
        seqlens.copy_(torch.tensor(lengths, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        expect_equal_calls(captured, mla_step(q, cache, table, seqlens, None, 2))
    expect_equal_calls(mla_step(q, cache, table, seqlens, meta, 2),
                       mla_step(q, cache, table, seqlens, None, 2))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_quantize_is_flashmla_quantizer(dtype):
    """hfa.quantize_kv(x, "fp8_mla") writes the bytes of FlashMLA's reference quantizer (written
    in torch above), and the cache it writes decodes as that one does."""
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(5, PAGE, 1, D, generator=g) *
         torch.randn(5, PAGE, 1, 1, generator=g).exp()).to(dtype)
    codes, scale = hfa.quantize_kv(x, "fp8_mla")
    assert scale is None and codes.dtype == torch.uint8 and codes.shape == (5, PAGE, 1, 656)
    assert torch.equal(codes, flashmla_quantize(x).view(torch.uint8))
    back = hfa.dequantize_kv(codes, None, "fp8_mla")
    assert torch.equal(back.double(), dequantize(codes))


def test_compiles_without_graph_break():
    """torch.compile(fullgraph=True) of FlashMLA's calls (dense causal bf16; sparse FP8 with
    topk_length and attn_sink): no graph break (the library call is the custom op
    hfa::mla_decode), the same bytes as eager; the op passes torch.library.opcheck."""
    g = torch.Generator().manual_seed(23)
    cache, _, table, seqlens = paged([70, 3], g, False)
    q = torch.randn(2, 2, 16, D, generator=g).to(torch.bfloat16)

    def dense(q, cache, table, seqlens):
        return hfa.flash_mla_with_kvcache(q, cache, table, seqlens, DV, None, causal=True)

    records, _, records_table, _ = paged([300, 0], g, True)
    picked = torch.randint(0, 300, (2, 2, 64), generator=g)  # sequence 0's tokens, some -1
    indices = (records_table[0, picked // PAGE] * PAGE + picked % PAGE).int()
    indices[torch.rand(2, 2, 64, generator=g) < 0.2] = -1
    topk_length = torch.tensor([40, 64], dtype=torch.int32)
    sink = torch.randn(64, generator=g)
    q64 = torch.randn(2, 2, 64, D, generator=g).to(torch.bfloat16)

    def sparse(q, records, indices, topk_length, sink):
        return hfa.flash_mla_with_kvcache(q, records, None, None, DV, None, indices=indices,
                                          is_fp8_kvcache=True, topk_length=topk_length,
                                          attn_sink=sink)

    torch._dynamo.reset()
    for f, args in ((dense, (q, cache, table, seqlens)),
                    (sparse, (q64, records, indices, topk_length, sink))):
        out, lse = f(*args)
        compiled_out, compiled_lse = torch.compile(f, fullgraph=True)(*args)
        assert not out.isnan().any()
        assert torch.equal(lse, compiled_lse)
        if f is dense:
            assert torch.equal(out, compiled_out)
        else:  # the sink's factor, computed by the compiled graph's own kernels: one rounding
            torch.testing.assert_close(compiled_out, out, atol=0, rtol=2 ** -8)
    for float_out in (False, True):
        torch.library.opcheck(torch.ops.hfa.mla_decode.default,
                              (q, cache, table, seqlens, None, DV, D ** -0.5, True, False,
                               float_out))


def test_attn_sink_rounds_once():
    """With attn_sink the library's float32 result is scaled, then rounded to bf16 once: every
    element within half a bf16 step (plus float32's own error) of the float64 result; FlashMLA's
    lse (without the sink) unchanged."""
    g = torch.Generator().manual_seed(29)
    cache, values, table, seqlens = paged([200, 90], g, False)
    b, s_q, heads, topk = 2, 2, 64, 128
    q = torch.randn(b, s_q, heads, D, generator=g).to(torch.bfloat16)
    picked = torch.randint(0, 90, (b, s_q, topk), generator=g)
    indices = (table[torch.arange(b)[:, None, None], picked // PAGE] * PAGE + picked % PAGE).int()
    sink = torch.randn(heads, generator=g) + 3  # comparable to the rows' lse: factors far from 1
    out, lse = hfa.flash_mla_with_kvcache(q, cache, None, None, DV, None, indices=indices,
                                          attn_sink=sink)
    want_out, want_lse = sparse_reference(q.double().numpy(), values, indices.numpy(), D ** -0.5)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=1e-5, atol=1e-5)
    factor = 1 / (1 + np.exp(sink.double().numpy()[None, :, None] - want_lse))
    want = want_out * factor.transpose(0, 2, 1)[..., None]
    # bf16 keeps 8 significant bits: half a step in want's binade, plus float32's error (about
    # 2e-6 of the largest value). The sink's factor applied to a bf16 out (a second rounding)
    # breaks this bound on about one element in ten here.
    float32_error = 4e-6 * np.abs(want).max()
    half_step = np.exp2(np.floor(np.log2(np.abs(want) + 1e-300)) - 8) * (1 + 1e-3)
    assert (np.abs(out.double().numpy() - want) <= half_step + float32_error).all()


@pytest.mark.parametrize("fp8", [False, True])
def test_native_op_takes_indices(fp8):
    """hfa::fwd_kvcache (the C++ op, where it is built) carries indices, no cache_seqlens and an
    FP8 MLA cache as uint8 records: the same result as flash_mla_with_kvcache's."""
    from hfa import _lib, _torch
    if not _torch.NATIVE:
        pytest.skip("the native torch ops (libhfa_torch) are not built here")
    g = torch.Generator().manual_seed(23)
    cache, _, table, seqlens = paged([300, 70], g, fp8)
    b, s_q, heads, topk = 2, 2, 16, 32
    q = torch.randn(b, s_q, heads, D, generator=g).to(torch.bfloat16)
    indices = torch.full((b, s_q, topk), -1, dtype=torch.int32)
    for bi in range(b):
        picked = torch.randint(0, int(seqlens[bi]), (topk - 3,), generator=g)
        indices[bi, :, :topk - 3] = table[bi, picked // PAGE] * PAGE + picked % PAGE
    want_out, want_lse = hfa.flash_mla_with_kvcache(q, cache, None, None, DV,
                                                    hfa.get_mla_metadata()[0], indices=indices,
                                                    is_fp8_kvcache=fp8)
    k_cache = cache.view(torch.uint8) if fp8 else cache
    code = _lib.FP8_MLA if fp8 else _lib.BF16
    out, lse = torch.ops.hfa.fwd_kvcache(
        q, k_cache, k_cache[..., :DV], code, _lib.F32, None, None, None, None, None, None, None,
        None, None, None, False, None, 0, None, None, False, -1, -1, 0.0, 0, 0, indices=indices)
    assert torch.equal(out, want_out)
    assert torch.equal(lse, want_lse)
