"""flash_attn_with_kvcache through the numpy front end, against a float64 attention over the
gathered (and, for quantized caches, dequantized) cache."""

import numpy as np
import pytest

import hfa


def reference(q, k_rows, v_rows, seqlens, causal):
    """out, lse in float64; k_rows[b] / v_rows[b] are (seqlen_k, heads_kv, d) float64."""
    batch, sq, hq, d = q.shape
    out = np.zeros((batch, sq, hq, v_rows[0].shape[-1] if batch else d))
    lse = np.full((batch, hq, sq), -np.inf)
    for b in range(batch):
        n = int(seqlens[b])
        group = hq // k_rows[b].shape[1]
        for h in range(hq):
            k = k_rows[b][:n, h // group].astype(np.float64)
            v = v_rows[b][:n, h // group].astype(np.float64)
            for i in range(sq):
                last = n - 1 if not causal else min(n - 1, i + n - sq)
                if last < 0:
                    continue
                s = k[: last + 1] @ q[b, i, h].astype(np.float64) / np.sqrt(d)
                m = s.max()
                p = np.exp(s - m)
                out[b, i, h] = p @ v[: last + 1] / p.sum()
                lse[b, h, i] = m + np.log(p.sum())
    return out, lse


def block_table(rng, seqlens, page_size):
    """A shuffled block table (unused entries -1) and the number of pages it addresses."""
    need = [(int(n) + page_size - 1) // page_size for n in seqlens]
    num_pages = sum(need) + 1  # one page no sequence uses
    order = rng.permutation(num_pages).astype(np.int32)
    table = np.full((len(seqlens), max(max(need), 1)), -1, dtype=np.int32)
    used = 0
    for b, pages in enumerate(need):
        table[b, :pages] = order[used:used + pages]
        used += pages
    return table, num_pages


def scatter(cache, table, num_pages, page_size):
    """Contiguous (batch, n, heads, d) rows into the pages the table names."""
    pages = np.zeros((num_pages, page_size) + cache.shape[2:], dtype=cache.dtype)
    for b in range(table.shape[0]):
        for p, page in enumerate(table[b]):
            if page >= 0:
                rows = cache[b, p * page_size:(p + 1) * page_size]
                pages[page, : rows.shape[0]] = rows
    return pages


def cache_of(rng, k, v, seqlens, page_size):
    """(k_cache, v_cache, block_table) over contiguous k, v (batch, cap, heads, d): themselves
    with no table when page_size is None, else scattered into shuffled pages."""
    if page_size is None:
        return k, v, None
    table, num_pages = block_table(rng, seqlens, page_size)
    return scatter(k, table, num_pages, page_size), scatter(v, table, num_pages, page_size), table


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("page_size", [None, 1, 16])
@pytest.mark.parametrize("causal", [False, True])
def test_plain_cache(dtype, page_size, causal):
    rng = np.random.default_rng(7)
    batch, sq, hq, hkv, d, cap = 3, 4, 4, 2, 64, 50
    seqlens = np.array([0, 1, 47], dtype=np.int32)
    q = rng.standard_normal((batch, sq, hq, d)).astype(dtype)
    k = rng.standard_normal((batch, cap, hkv, d)).astype(dtype)
    v = rng.standard_normal((batch, cap, hkv, d)).astype(dtype)
    kc, vc, table = cache_of(rng, k, v, seqlens, page_size)
    ref_out, ref_lse = reference(q, k, v, seqlens, causal)
    tol = 1e-5 if dtype == "float32" else 2e-3
    for splits in (dict(num_splits=3), dict(split_size=16)):
        out, lse = hfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, page_table=table,
                                               causal=causal, return_softmax_lse=True, **splits)
        np.testing.assert_allclose(out.astype(np.float64), ref_out, atol=tol, rtol=tol)
        np.testing.assert_allclose(lse, ref_lse, atol=1e-4, rtol=1e-5)
        assert out.dtype == q.dtype and lse.dtype == np.float32


def e4m3_table():
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    e, m = (codes >> 3) & 15, codes & 7
    value = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8) * 2.0 ** (e - 7))
    value = sign * value
    value[(codes & 0x7f) == 0x7f] = np.nan
    return value


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def random_e4m3_codes(rng, shape):
    codes = rng.integers(0, 256, size=shape, dtype=np.uint8)
    codes[(codes & 0x7f) == 0x7f] = 0x38  # no NaN codes
    codes[(codes & 0x7f) > 0x50] &= 0xc7  # keep the values moderate (|x| < 64)
    return codes


def unpack_fp4(packed):
    low = E2M1[packed & 0xf]
    high = E2M1[packed >> 4]
    return np.stack([low, high], axis=-1).reshape(packed.shape[:-1] + (packed.shape[-1] * 2,))


@pytest.mark.parametrize("fmt", ["fp8_per_head", "fp8_per_token", "nvfp4", "mxfp4"])
def test_quantized_cache(fmt):
    rng = np.random.default_rng(11)
    batch, sq, hq, hkv, d, cap = 2, 2, 4, 2, 64, 30
    seqlens = np.array([30, 9], dtype=np.int32)
    q = rng.standard_normal((batch, sq, hq, d)).astype(np.float32)
    extra = {}
    if fmt.startswith("fp8"):
        codes = [random_e4m3_codes(rng, (batch, cap, hkv, d)) for _ in range(2)]
        if fmt == "fp8_per_head":
            scales = [rng.uniform(0.01, 0.05, (hkv,)).astype(np.float32) for _ in range(2)]
            values = [e4m3_table()[c] * s[None, None, :, None] for c, s in zip(codes, scales)]
        else:
            scales = [rng.uniform(0.01, 0.05, (batch, cap, hkv)).astype(np.float32) for _ in range(2)]
            values = [e4m3_table()[c] * s[..., None] for c, s in zip(codes, scales)]
    else:
        codes = [rng.integers(0, 256, (batch, cap, hkv, d // 2), dtype=np.uint8) for _ in range(2)]
        if fmt == "nvfp4":
            scales = [rng.choice([0x28, 0x30, 0x38, 0x3c], (batch, cap, hkv, d // 16)).astype(np.uint8)
                      for _ in range(2)]
            globals_ = [np.array([0.25], np.float32), np.array([0.5], np.float32)]
            extra = dict(k_global_scale=globals_[0], v_global_scale=globals_[1])
            values = [unpack_fp4(c) * np.repeat(e4m3_table()[s], 16, axis=-1) * g[0]
                      for c, s, g in zip(codes, scales, globals_)]
        else:
            scales = [rng.integers(124, 129, (batch, cap, hkv, d // 32), dtype=np.uint8) for _ in range(2)]
            values = [unpack_fp4(c) * np.repeat(2.0 ** (s.astype(np.float64) - 127), 32, axis=-1)
                      for c, s in zip(codes, scales)]
    out, lse = hfa.flash_attn_with_kvcache(q, codes[0], codes[1], cache_seqlens=seqlens,
                                           k_scale=scales[0], v_scale=scales[1], causal=True,
                                           return_softmax_lse=True, **extra)
    ref_out, ref_lse = reference(q, values[0], values[1], seqlens, True)
    np.testing.assert_allclose(out, ref_out, atol=2e-5 * max(1, np.abs(ref_out).max()), rtol=1e-4)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-4, rtol=1e-5)


def test_defaults_and_int_seqlens():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 1, 2, 64)).astype(np.float32)
    k = rng.standard_normal((2, 12, 2, 64)).astype(np.float32)
    v = rng.standard_normal((2, 12, 2, 64)).astype(np.float32)
    whole = hfa.flash_attn_with_kvcache(q, k, v)  # default: the whole cache
    ref, _ = reference(q, k, v, [12, 12], False)
    np.testing.assert_allclose(whole, ref, atol=1e-5)
    five = hfa.flash_attn_with_kvcache(q, k, v, cache_seqlens=5)
    ref, _ = reference(q, k, v, [5, 5], False)
    np.testing.assert_allclose(five, ref, atol=1e-5)


def test_not_yet_and_errors():
    q = np.zeros((1, 1, 2, 64), np.float32)
    k = np.zeros((1, 8, 2, 64), np.float32)
    seqlens = np.array([4], np.int32)
    for name in ("rotary_seqlens", "cache_batch_idx", "scheduler_metadata"):
        with pytest.raises(NotImplementedError, match=name):
            hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=seqlens, **{name: k})
    # Named as passed: FlashAttention-3's page_table, or FlashAttention-2's block_table.
    with pytest.raises(hfa.HfaInvalidArgument, match="^page_table: entry \\(0, 0\\) = 5"):
        hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=seqlens,
                                    page_table=np.array([[5]], np.int32))
    with pytest.raises(hfa.HfaInvalidArgument, match="^block_table: entry \\(0, 0\\) = 5"):
        hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=seqlens,
                                    block_table=np.array([[5]], np.int32))
    with pytest.raises(TypeError, match="^block_table: .*int64"):
        hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=seqlens,
                                    block_table=np.array([[0]], np.int64))
    with pytest.raises(hfa.HfaInvalidArgument, match="^cache_seqlens: element 0 \\(9\\)"):
        hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=np.array([9], np.int32))
    with pytest.raises(hfa.HfaInvalidArgument, match="^k_cache: dtype f16 is not supported"):
        hfa.flash_attn_with_kvcache(q, k.astype(np.float16), k.astype(np.float16),
                                    cache_seqlens=seqlens)
    with pytest.raises(hfa.HfaInvalidArgument, match="^k_scale: must be null"):
        hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=seqlens,
                                    k_scale=np.ones(2, np.float32))
    with pytest.raises(hfa.HfaInvalidArgument, match="^v_scale: must be null"):
        hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=seqlens,
                                    v_scale=np.ones(2, np.float32))
    with pytest.raises(TypeError, match="k_scale"):
        hfa.flash_attn_with_kvcache(q, k.astype(np.uint8), k.astype(np.uint8),
                                    cache_seqlens=seqlens, k_scale=np.ones(2, np.float64))
    with pytest.raises(hfa.HfaInvalidArgument, match="^num_splits"):
        hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=seqlens, num_splits=-2)
    with pytest.raises(hfa.HfaInvalidArgument, match="^split_size"):
        hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=seqlens, split_size=-1)
    with pytest.raises(hfa.HfaInvalidArgument, match="^split_size: excludes num_splits"):
        hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=seqlens, split_size=8, num_splits=2)


def test_paged_varlen_errors_name_the_callers_arguments():
    """flash_attn_varlen_func with a block table runs flash_attn_with_kvcache, whose arguments
    are named otherwise: its errors still name the caller's seqused_k, k, v and block_table. A
    decreasing cu_seqlens_q is the offsets' fault, even where a length also exceeds max_seqlen_q."""
    q = np.zeros((3, 2, 64), np.float32)
    pool = np.zeros((4, 8, 2, 64), np.float32)
    cu = np.array([0, 1, 3], np.int32)
    used = np.array([4, 8], np.int32)
    table = np.array([[0, 1], [2, 3]], np.int32)

    def call(q=q, k=pool, v=pool, cu_seqlens_q=cu, seqused_k=used, block_table=table):
        hfa.flash_attn_varlen_func(q, k, v, cu_seqlens_q, None, 2, None, seqused_k=seqused_k,
                                   block_table=block_table)

    call()
    with pytest.raises(hfa.HfaInvalidArgument,
                       match="^seqused_k: element 1 \\(99\\) exceeds the cache's capacity 16"):
        call(seqused_k=np.array([4, 99], np.int32))
    with pytest.raises(TypeError, match="^seqused_k: .*int64"):
        call(seqused_k=used.astype(np.int64))
    with pytest.raises(hfa.HfaInvalidArgument,
                       match="^block_table: entry \\(0, 1\\) = 9 is outside \\[0, 4\\) "
                             "\\(num_pages of k\\)$"):
        call(block_table=np.array([[0, 9], [2, 3]], np.int32), seqused_k=np.array([9, 8], np.int32))
    with pytest.raises(TypeError, match="^block_table: .*int64"):
        call(block_table=table.astype(np.int64))
    with pytest.raises(hfa.HfaInvalidArgument, match="^k: dtype f16 is not supported"):
        call(k=pool.astype(np.float16), v=pool.astype(np.float16))
    with pytest.raises(hfa.HfaInvalidArgument, match="^v: expected heads 2 \\(as k\\), got 1"):
        call(v=pool[:, :, :1])
    with pytest.raises(hfa.HfaInvalidArgument,
                       match="^cu_seqlens_q: must not decrease, but element 2 \\(2\\) < "
                             "element 1 \\(3\\)"):
        call(q=q[:2], cu_seqlens_q=np.array([0, 3, 2], np.int32))


@pytest.mark.parametrize("page_size", [None, 16])
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_queries(page_size, causal):
    """Decode, speculative and chunked-prefill rows in one call: each sequence's rows against
    the reference of that sequence alone (no rows, more rows than keys, an empty cache)."""
    rng = np.random.default_rng(13)
    hq, hkv, d, cap = 4, 2, 64, 40
    rows = [1, 0, 5, 3, 1]
    seqlens = np.array([30, 4, 0, 2, 40], dtype=np.int32)
    cu = np.concatenate([[0], np.cumsum(rows)]).astype(np.int32)
    total = int(cu[-1])
    q = rng.standard_normal((total, hq, d)).astype(np.float32)
    k = rng.standard_normal((len(rows), cap, hkv, d)).astype(np.float32)
    v = rng.standard_normal((len(rows), cap, hkv, d)).astype(np.float32)
    kc, vc, table = cache_of(rng, k, v, seqlens, page_size)
    want_out = np.zeros((total, hq, d))
    want_lse = np.full((hq, total), -np.inf)
    for b in range(len(rows)):
        first, last = cu[b], cu[b + 1]
        o, lse = reference(q[None, first:last], k[b:b + 1], v[b:b + 1], seqlens[b:b + 1], causal)
        want_out[first:last], want_lse[:, first:last] = o[0], lse[0]
    for extra in ({}, dict(max_seqlen_q=9, num_splits=3), dict(split_size=8)):
        out = np.full((total, hq, d), np.nan, np.float32)
        out, lse = hfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, page_table=table,
                                               cu_seqlens_q=cu, causal=causal,
                                               return_softmax_lse=True, **extra)
        assert out.shape == (total, hq, d) and lse.shape == (hq, total)
        np.testing.assert_allclose(out, want_out, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(lse, want_lse, atol=1e-4, rtol=1e-5)


def test_varlen_query_errors():
    q = np.zeros((3, 2, 64), np.float32)
    k = np.zeros((2, 8, 2, 64), np.float32)
    seqlens = np.array([4, 8], np.int32)
    cu = np.array([0, 1, 3], np.int32)
    with pytest.raises(TypeError, match="cu_seqlens_q"):
        hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=seqlens, cu_seqlens_q=cu.astype(np.int64))
    with pytest.raises(ValueError, match="^q: expected rank 3"):
        hfa.flash_attn_with_kvcache(q[None], k, k, cache_seqlens=seqlens, cu_seqlens_q=cu)
    with pytest.raises(hfa.HfaInvalidArgument, match="^cu_seqlens_q: last element 4"):
        hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=seqlens,
                                    cu_seqlens_q=np.array([0, 1, 4], np.int32))
    with pytest.raises(hfa.HfaInvalidArgument, match="^max_seqlen_q: 1 is smaller than sequence 1"):
        hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=seqlens, cu_seqlens_q=cu,
                                    max_seqlen_q=1)
    with pytest.raises(hfa.HfaInvalidArgument, match="^cache_seqlens: expected shape \\(2\\)"):
        hfa.flash_attn_with_kvcache(q, k, k, cache_seqlens=np.array([4], np.int32),
                                    cu_seqlens_q=cu)
    with pytest.raises(hfa.HfaInvalidArgument, match="^max_seqlen_q: is only used with"):
        hfa.flash_attn_with_kvcache(q[None], k[:1], k[:1], cache_seqlens=seqlens[:1],
                                    max_seqlen_q=3)
    packed = np.zeros((3, 2, 64), np.float32)  # new tokens 1 and 2
    with pytest.raises(TypeError, match="cu_seqlens_k_new"):
        hfa.flash_attn_with_kvcache(q, k, k, k=packed, v=packed, cache_seqlens=seqlens - 3,
                                    cu_seqlens_q=cu, cu_seqlens_k_new=cu.astype(np.int64))
    # An append writes the caches: two of them, or the memory rule is broken first.
    with pytest.raises(hfa.HfaInvalidArgument, match="^cu_seqlens_k_new: last element 4"):
        hfa.flash_attn_with_kvcache(q, k, k.copy(), k=packed, v=packed, cache_seqlens=seqlens - 3,
                                    cu_seqlens_q=cu,
                                    cu_seqlens_k_new=np.array([0, 1, 4], np.int32))
    with pytest.raises(hfa.HfaInvalidArgument, match="^k: expected rank 3"):
        hfa.flash_attn_with_kvcache(q, k, k, k=packed[None], v=packed[None],
                                    cache_seqlens=seqlens - 3, cu_seqlens_q=cu,
                                    cu_seqlens_k_new=cu)


def rotate(x, cos, sin, positions, interleaved):
    """Rotary embedding of x (..., d) at positions (broadcast over the leading dims), float64."""
    x = x.astype(np.float64).copy()
    half = cos.shape[1]
    c, s = cos[positions].astype(np.float64), sin[positions].astype(np.float64)
    if interleaved:
        a, b = x[..., 0:2 * half:2].copy(), x[..., 1:2 * half:2].copy()
        x[..., 0:2 * half:2], x[..., 1:2 * half:2] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., :half].copy(), x[..., half:2 * half].copy()
        x[..., :half], x[..., half:2 * half] = a * c - b * s, a * s + b * c
    return x


@pytest.mark.parametrize("interleaved", [True, False])
def test_append_with_rotary(interleaved):
    rng = np.random.default_rng(5)
    batch, hq, hkv, d, new, rotary_dim = 2, 4, 2, 64, 3, 32
    lengths = np.array([0, 9], np.int32)
    q = rng.standard_normal((batch, new, hq, d)).astype(np.float32)
    cache_k = rng.standard_normal((batch, 16, hkv, d)).astype(np.float32)
    cache_v = rng.standard_normal((batch, 16, hkv, d)).astype(np.float32)
    k_new = rng.standard_normal((batch, new, hkv, d)).astype(np.float32)
    v_new = rng.standard_normal((batch, new, hkv, d)).astype(np.float32)
    angles = rng.standard_normal((20, rotary_dim // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    want_k, want_v, q_rot = cache_k.astype(np.float64), cache_v.astype(np.float64), []
    for b in range(batch):
        pos = lengths[b] + np.arange(new)
        want_k[b, pos] = rotate(k_new[b], cos, sin, pos[:, None], interleaved)
        want_v[b, pos] = v_new[b]
        q_rot.append(rotate(q[b], cos, sin, pos[:, None], interleaved))
    ref, ref_lse = reference(np.stack(q_rot), want_k, want_v, lengths + new, True)
    out, lse = hfa.flash_attn_with_kvcache(q, cache_k, cache_v, k=k_new, v=v_new,
                                           rotary_cos=cos, rotary_sin=sin, cache_seqlens=lengths,
                                           causal=True, rotary_interleaved=interleaved,
                                           return_softmax_lse=True)
    np.testing.assert_allclose(cache_k, want_k, atol=1e-5)  # appended in place, rotated
    np.testing.assert_allclose(cache_v, want_v, atol=0)
    np.testing.assert_allclose(out, ref, atol=1e-5)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-5)


def gather(pages, table, length):
    """The first `length` rows of one sequence of a paged cache, through its block table row."""
    page_size = pages.shape[1]
    return np.concatenate([pages[table[p]] for p in range(-(-length // page_size))])[:length]


@pytest.mark.parametrize("page_size", [None, 16])
@pytest.mark.parametrize("varlen_q", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_append(page_size, varlen_q, causal):
    """cu_seqlens_k_new: each sequence appends its own number of packed new tokens (0 included),
    rotated at cache_seqlens[b] + i; the queries (fixed length or varlen, counted apart from the
    new tokens) rotate at cache_seqlens[b] + i when causal, else at cache_seqlens[b]."""
    rng = np.random.default_rng(17)
    hq, hkv, d, cap, rotary_dim = 4, 2, 64, 24, 32
    new = [2, 0, 3, 1]
    lengths = np.array([5, 3, 0, 9], np.int32)
    rows = [1, 2, 3, 0] if varlen_q else [2] * len(new)
    cu_new = np.concatenate([[0], np.cumsum(new)]).astype(np.int32)
    cu_q = np.concatenate([[0], np.cumsum(rows)]).astype(np.int32)
    q = rng.standard_normal((int(cu_q[-1]), hq, d)).astype(np.float32)
    k = rng.standard_normal((len(new), cap, hkv, d)).astype(np.float32)
    v = rng.standard_normal((len(new), cap, hkv, d)).astype(np.float32)
    k_new = rng.standard_normal((int(cu_new[-1]), hkv, d)).astype(np.float32)
    v_new = rng.standard_normal((int(cu_new[-1]), hkv, d)).astype(np.float32)
    angles = rng.standard_normal((cap, rotary_dim // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    kc, vc, table = cache_of(rng, k, v, lengths + np.array(new, np.int32), page_size)

    want_k, want_v = k.astype(np.float64), v.astype(np.float64)
    want_out = np.zeros((len(q), hq, d))
    want_lse = np.full((hq, len(q)), -np.inf)
    for b, n in enumerate(new):
        pos = lengths[b] + np.arange(n)
        want_k[b, pos] = rotate(k_new[cu_new[b]:cu_new[b + 1]], cos, sin, pos[:, None], True)
        want_v[b, pos] = v_new[cu_new[b]:cu_new[b + 1]]
        q_pos = lengths[b] + (np.arange(rows[b]) if causal else np.zeros(rows[b], int))
        q_rot = rotate(q[cu_q[b]:cu_q[b + 1]], cos, sin, q_pos[:, None], True)
        o, lse = reference(q_rot[None], want_k[b:b + 1], want_v[b:b + 1], [lengths[b] + n], causal)
        want_out[cu_q[b]:cu_q[b + 1]], want_lse[:, cu_q[b]:cu_q[b + 1]] = o[0], lse[0]

    queries = dict(cu_seqlens_q=cu_q) if varlen_q else {}
    out, lse = hfa.flash_attn_with_kvcache(
        q if varlen_q else q.reshape(len(new), 2, hq, d), kc, vc, k=k_new, v=v_new,
        rotary_cos=cos, rotary_sin=sin, cache_seqlens=lengths, page_table=table,
        cu_seqlens_k_new=cu_new, causal=causal, return_softmax_lse=True, **queries)
    if not varlen_q:  # fixed-length out (batch, 2, ...), lse (batch, heads, 2): as the packed rows
        out, lse = out.reshape(want_out.shape), lse.transpose(1, 0, 2).reshape(want_lse.shape)
    for b, n in enumerate(new):  # appended in place
        length = lengths[b] + n
        got_k = kc[b, :length] if table is None else gather(kc, table[b], length)
        got_v = vc[b, :length] if table is None else gather(vc, table[b], length)
        np.testing.assert_allclose(got_k, want_k[b, :length], atol=1e-5)
        np.testing.assert_allclose(got_v, want_v[b, :length], atol=0)
    np.testing.assert_allclose(out, want_out, atol=1e-5)
    np.testing.assert_allclose(lse, want_lse, atol=1e-5)
