"""hfa.flash_mla_with_kvcache and hfa.get_mla_metadata (FlashMLA's API) through the numpy front
end, against a float64 attention written here: dense (paged, pages shuffled, unused slots NaN,
ragged lengths with empty sequences, causal speculative rows), FlashMLA's FP8 records decoded
here from their bytes, sparse indices with -1 padding, topk_length and attn_sink; the schedule
holder's contract, and errors naming the argument."""

import numpy as np
import pytest

import hfa

D, DV, PAGE, RECORD = 576, 512, 64, 656


def e4m3_values(codes):
    """float64 values of E4M3 codes (bit layout s.eeee.mmm, bias 7; 0x7f / 0xff NaN)."""
    codes = codes.astype(np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    e = (codes >> 3) & 0xF
    m = codes & 0x7
    normal = (1 + m / 8.0) * np.exp2(e - 7.0)
    subnormal = m / 8.0 * 2.0 ** -6
    v = sign * np.where(e == 0, subnormal, normal)
    return np.where((codes & 0x7F) == 0x7F, np.nan, v)


def decode_records(records):
    """(..., 656) uint8 records -> (..., 576) float64: latent codes times their tile's scale,
    then the bf16 rotary values."""
    lead = records.shape[:-1]
    latent = e4m3_values(records[..., :512])
    scales = np.ascontiguousarray(records[..., 512:528]).view("<f4").astype(np.float64)
    latent = latent * np.repeat(scales, 128, axis=-1)
    rope_bits = np.ascontiguousarray(records[..., 528:]).view("<u2").astype(np.uint32) << 16
    rope = rope_bits.view(np.float32).astype(np.float64)
    return np.concatenate([latent, rope], axis=-1).reshape(*lead, D)


def random_records(rng, shape):
    """FP8 records of random codes (no NaN), power-of-two scales and rotary values."""
    records = np.zeros(shape + (RECORD,), dtype=np.uint8)
    codes = rng.integers(0, 256, size=shape + (512,), dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x3F
    records[..., :512] = codes
    scales = np.exp2(rng.integers(-12, -4, size=shape + (4,))).astype("<f4")
    records[..., 512:528] = scales.view(np.uint8).reshape(shape + (16,))
    rope = (rng.standard_normal(shape + (64,)).astype(np.float32).view(np.uint32) >> 16)
    records[..., 528:] = rope.astype("<u2").view(np.uint8).reshape(shape + (128,))
    return records


def make_case(rng, lengths, fp8=False, dtype=np.float32):
    """(cache, cache values float64 (pages, 64, 576), block_table, seqlens): pages shuffled,
    every slot no sequence uses NaN."""
    batch = len(lengths)
    used = [(n + PAGE - 1) // PAGE for n in lengths]
    pages = sum(used) + 2
    order = rng.permutation(pages).astype(np.int32)
    table = np.full((batch, max(max(used), 1)), -1, dtype=np.int32)
    start = 0
    for b, n in enumerate(used):
        table[b, :n] = order[start:start + n]
        start += n
    if fp8:
        cache = random_records(rng, (pages, PAGE, 1))
        values = decode_records(cache[:, :, 0])
    else:
        cache = rng.standard_normal((pages, PAGE, 1, D)).astype(dtype)
        values = cache[:, :, 0].astype(np.float64)
    valid = np.zeros((pages, PAGE), dtype=bool)
    for b, n in enumerate(lengths):
        for j in range(n):
            valid[table[b, j // PAGE], j % PAGE] = True
    if fp8:
        cache[~valid] = 0xFF  # NaN codes, scales and rotary values
    else:
        cache[~valid] = np.nan
    return cache, values, table, np.array(lengths, dtype=np.int32)


def attend(q, keys, scale):
    """float64 out (heads, 512) and lse (heads,) of one query row (heads, 576) over keys."""
    if len(keys) == 0:
        return np.zeros((q.shape[0], DV)), np.full(q.shape[0], -np.inf)
    s = q.astype(np.float64) @ keys.T * scale
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    return p @ keys[:, :DV] / p.sum(-1, keepdims=True), (m[:, 0] + np.log(p.sum(-1)))


def dense_reference(q, values, table, seqlens, causal, scale):
    b, s_q, h, _ = q.shape
    out, lse = np.zeros((b, s_q, h, DV)), np.zeros((b, h, s_q))
    for bi in range(b):
        n = int(seqlens[bi])
        keys = np.array([values[table[bi, j // PAGE], j % PAGE] for j in range(n)]).reshape(n, D)
        for i in range(s_q):
            seen = min(n, n - s_q + i + 1) if causal else n
            out[bi, i], lse[bi, :, i] = attend(q[bi, i], keys[:max(seen, 0)], scale)
    return out, lse


def sparse_reference(q, values, indices, scale):
    b, s_q, h, _ = q.shape
    flat = values.reshape(-1, D)
    out, lse = np.zeros((b, s_q, h, DV)), np.zeros((b, h, s_q))
    for bi in range(b):
        for i in range(s_q):
            listed = [int(t) for t in indices[bi, i] if t != -1]
            out[bi, i], lse[bi, :, i] = attend(q[bi, i], flat[listed].reshape(-1, D), scale)
    return out, lse


def expect_close(out, lse, want_out, want_lse, tol):
    empty = np.isneginf(want_lse)
    assert np.array_equal(np.isneginf(lse), empty)
    np.testing.assert_allclose(lse[~empty], want_lse[~empty], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.astype(np.float64), want_out, rtol=tol, atol=tol)
    assert not np.isnan(out).any()


@pytest.mark.parametrize("heads,s_q,causal", [(16, 1, False), (32, 2, True), (64, 4, True),
                                              (128, 3, False)])
def test_dense_matches_float64(heads, s_q, causal):
    rng = np.random.default_rng(heads + s_q)
    cache, values, table, seqlens = make_case(rng, [0, 1, 70, 300, 2])
    q = rng.standard_normal((len(seqlens), s_q, heads, D)).astype(np.float32)
    meta, splits = hfa.get_mla_metadata(seqlens, s_q * heads, 1)
    out, lse = hfa.flash_mla_with_kvcache(q, cache, table, seqlens, DV, meta, splits,
                                          causal=causal)
    assert out.shape == (len(seqlens), s_q, heads, DV) and out.dtype == np.float32
    assert lse.shape == (len(seqlens), heads, s_q) and lse.dtype == np.float32
    want_out, want_lse = dense_reference(q, values, table, seqlens, causal, D ** -0.5)
    expect_close(out, lse, want_out, want_lse, 2e-5)
    assert (out[0] == 0).all() and np.isneginf(lse[0]).all()  # the empty sequence


def test_fp8_records_match_float64():
    rng = np.random.default_rng(7)
    cache, values, table, seqlens = make_case(rng, [130, 0, 64, 9], fp8=True)
    q = rng.standard_normal((4, 2, 16, D)).astype(np.float32)
    meta, _ = hfa.get_mla_metadata()
    out, lse = hfa.flash_mla_with_kvcache(q, cache, table, seqlens, DV, meta, causal=True,
                                          is_fp8_kvcache=True, softmax_scale=0.07)
    want_out, want_lse = dense_reference(q, values, table, seqlens, True, 0.07)
    expect_close(out, lse, want_out, want_lse, 2e-5)


@pytest.mark.parametrize("fp8", [False, True])
def test_sparse_matches_float64(fp8):
    rng = np.random.default_rng(11)
    cache, values, table, seqlens = make_case(rng, [200, 0, 90], fp8=fp8)
    b, s_q, heads, topk = 3, 2, 64, 128
    q = rng.standard_normal((b, s_q, heads, D)).astype(np.float32)
    indices = np.full((b, s_q, topk), -1, dtype=np.int32)
    for bi in range(b):
        tokens = [table[bi, j // PAGE] * PAGE + j % PAGE for j in range(seqlens[bi])]
        for i in range(s_q):
            if tokens:
                n = rng.integers(0, topk + 1)
                indices[bi, i, :n] = rng.choice(tokens, size=n)
            rng.shuffle(indices[bi, i])
    meta, _ = hfa.get_mla_metadata()
    # block_table and cache_seqlens are not read with indices (FlashMLA's sparse decode).
    out, lse = hfa.flash_mla_with_kvcache(q, cache, None, None, DV, meta, indices=indices,
                                          is_fp8_kvcache=fp8)
    want_out, want_lse = sparse_reference(q, values, indices, D ** -0.5)
    expect_close(out, lse, want_out, want_lse, 2e-5)

    # topk_length keeps each sequence's first entries; attn_sink scales out, not lse.
    length = np.array([100, 0, 7], dtype=np.int32)
    sink = rng.standard_normal(heads).astype(np.float32)
    out, lse = hfa.flash_mla_with_kvcache(q, cache, None, None, DV, None, indices=indices,
                                          is_fp8_kvcache=fp8, topk_length=length,
                                          attn_sink=sink)
    kept = np.where(np.arange(topk)[None, None] < length[:, None, None], indices, -1)
    want_out, want_lse = sparse_reference(q, values, kept, D ** -0.5)
    factor = 1 / (1 + np.exp(sink[None, :, None] - want_lse))
    want_out = want_out * np.nan_to_num(factor).transpose(0, 2, 1)[..., None]
    expect_close(out, lse, want_out, want_lse, 2e-5)


def test_schedule_serves_calls_of_one_shape():
    rng = np.random.default_rng(3)
    cache, _, table, seqlens = make_case(rng, [70, 5])
    q = rng.standard_normal((2, 1, 16, D)).astype(np.float32)
    meta, splits = hfa.get_mla_metadata(seqlens, 16, 1)
    assert splits is None and not meta.have_initialized
    first, _ = hfa.flash_mla_with_kvcache(q, cache, table, seqlens, DV, meta, splits)
    again, _ = hfa.flash_mla_with_kvcache(q, cache, table, seqlens, DV, meta, splits)
    assert meta.have_initialized and np.array_equal(first, again)
    q2 = rng.standard_normal((2, 2, 16, D)).astype(np.float32)
    with pytest.raises(ValueError, match="^tile_scheduler_metadata: made for s_q = 1"):
        hfa.flash_mla_with_kvcache(q2, cache, table, seqlens, DV, meta)


def test_errors_name_the_argument():
    rng = np.random.default_rng(5)
    cache, _, table, seqlens = make_case(rng, [70, 5])
    q = rng.standard_normal((2, 1, 16, D)).astype(np.float32)
    call = hfa.flash_mla_with_kvcache
    with pytest.raises(ValueError, match="^head_dim_v: "):
        call(q, cache, table, seqlens, 256, None)
    with pytest.raises(ValueError, match="^num_splits: must be None"):
        call(q, cache, table, seqlens, DV, None, np.zeros(3, np.int32))
    with pytest.raises(NotImplementedError, match="^extra_k_cache: "):
        call(q, cache, table, seqlens, DV, None, extra_k_cache=cache)
    with pytest.raises(ValueError, match="^cache_seqlens: required without indices"):
        call(q, cache, table, None, DV, None)
    with pytest.raises(ValueError, match="^q: headdim 512 is not supported"):
        call(q[..., :512].copy(), cache, table, seqlens, DV, None)
    with pytest.raises(TypeError, match="^block_table: dtype int64"):
        call(q, cache, table.astype(np.int64), seqlens, DV, None)
    records = make_case(rng, [70, 5], fp8=True)[0]
    with pytest.raises(ValueError, match="^k_cache: expected bytes per fp8_mla record"):
        call(q, records[..., :640], table, seqlens, DV, None, is_fp8_kvcache=True)
    indices = np.zeros((2, 1, 64), dtype=np.int32)
    with pytest.raises(ValueError, match="^causal: must be False with indices"):
        call(q, cache, None, None, DV, None, causal=True, indices=indices)
    with pytest.raises(ValueError, match="^indices: expected shape"):
        call(q, cache, None, None, DV, None, indices=indices[:1])
    with pytest.raises(ValueError, match="^indices: expected dtype i32"):
        call(q, cache, None, None, DV, None, indices=indices.astype(np.float32))
    bad = indices.copy()
    bad[1, 0, 3] = cache.shape[0] * PAGE
    with pytest.raises(ValueError, match=r"^indices: element \(1, 0, 3\)"):
        call(q, cache, None, None, DV, None, indices=bad)


def test_quantize_writes_flashmla_records():
    """hfa.quantize_kv(x, "fp8_mla"): FlashMLA's record per row, decoded here from its bytes:
    power-of-two scales by FlashMLA's rule, latent values within half an E4M3 step, rotary values
    x's rounded to bf16; dequantize_kv reads back what decode_records does."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, PAGE, 1, D)) *
         np.exp(2 * rng.standard_normal((3, PAGE, 1, 1)))).astype(np.float32)
    codes, scale = hfa.quantize_kv(x, "fp8_mla")
    assert scale is None and codes.dtype == np.uint8 and codes.shape == (3, PAGE, 1, RECORD)
    scales = np.ascontiguousarray(codes[..., 512:528]).view("<f4").astype(np.float64)
    amax = np.abs(x[..., :512].astype(np.float64)).reshape(3, PAGE, 1, 4, 128).max(-1)
    np.testing.assert_array_equal(scales, np.exp2(np.ceil(np.log2(np.maximum(amax / 448,
                                                                             1e-4)))))
    values = decode_records(codes)
    latent_step = np.maximum(np.abs(x[..., :512]) / 16, np.repeat(scales, 128, -1) * 2.0 ** -10)
    assert (np.abs(values[..., :512] - x[..., :512]) <= latent_step).all()
    rope = (x[..., 512:].view(np.uint32) + 0x7FFF + ((x[..., 512:].view(np.uint32) >> 16) & 1))
    rope = (rope & 0xFFFF0000).view(np.float32)  # round to nearest even bf16
    np.testing.assert_array_equal(values[..., 512:], rope)
    back = hfa.dequantize_kv(codes, None, "fp8_mla")
    assert back.shape == x.shape
    np.testing.assert_array_equal(back, values.astype(np.float32))


def test_quantize_errors_name_the_argument():
    x = np.ones((2, 1, D), dtype=np.float32)
    with pytest.raises(ValueError, match="^scale: only fp8_per_head takes a scale"):
        hfa.quantize_kv(x, "fp8_mla", scale=np.ones(1, np.float32))
    with pytest.raises(ValueError, match="^x: headdim 512 must be 576 for fp8_mla"):
        hfa.quantize_kv(x[..., :512].copy(), "fp8_mla")
    codes, _ = hfa.quantize_kv(x, "fp8_mla")
    with pytest.raises(ValueError, match="^scale: must be None for fp8_mla"):
        hfa.dequantize_kv(codes, np.ones(2, np.float32), "fp8_mla")
    with pytest.raises(ValueError, match="^codes: expected last extent 656"):
        hfa.dequantize_kv(codes[..., :640].copy(), None, "fp8_mla")


def test_append_writes_the_latent_row_once():
    """flash_attn_with_kvcache's append (k=) into an MLA cache (v_cache its view): each new
    token's 576-wide row written once, v=None or k's view; the attention covers the new tokens
    (float64 reference over the cache so written); a V of its own is refused by name."""
    rng = np.random.default_rng(21)
    before, new = [70, 0, 5], 2
    cache, values, table, _ = make_case(rng, [n + new for n in before])
    slots = [(table[b, j // PAGE], j % PAGE) for b, n in enumerate(before)
             for j in range(n, n + new)]
    for page, slot in slots:
        cache[page, slot] = np.nan  # where the append writes
    k = rng.standard_normal((3, new, 1, D)).astype(np.float32)
    q = rng.standard_normal((3, 2, 16, D)).astype(np.float32)
    seqlens = np.array(before, np.int32)
    for v in (None, k[..., :DV]):
        out, lse = hfa.flash_attn_with_kvcache(q, cache, cache[..., :DV], k=k, v=v,
                                               cache_seqlens=seqlens, page_table=table,
                                               causal=True, return_softmax_lse=True)
        for n, (page, slot) in enumerate(slots):
            np.testing.assert_array_equal(cache[page, slot, 0], k[n // new, n % new, 0])
        values = cache[:, :, 0].astype(np.float64)
        want = dense_reference(q, values, table, seqlens + new, True, 1 / np.sqrt(D))
        expect_close(out, lse, *want, 2e-5)
    with pytest.raises(ValueError, match=r"^v: must be null or the view k_new\[\.\.\., :512\]"):
        hfa.flash_attn_with_kvcache(q, cache, cache[..., :DV], k=k, v=k[..., :DV].copy(),
                                    cache_seqlens=seqlens, page_table=table)
