"""hfa.quantize_kv / hfa.dequantize_kv on numpy arrays: the bytes the append of
flash_attn_with_kvcache (k= / v=) writes, round trips within each format's error, and errors
naming the argument. The torch side (CPU and CUDA) is test_torch_quant.py."""

import numpy as np
import pytest

import hfa

FORMATS = ["fp8_per_head", "fp8_per_token", "nvfp4", "mxfp4"]


def values(shape, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * rng.uniform(0.01, 10.0, shape[:-1] + (1,))
    x = x.astype(dtype)
    x.flat[5] = 0.0
    return x


def format_args(format, x):
    """The inputs a format takes: fp8_per_head a per-kv-head scale, nvfp4 a global scale."""
    amax = np.abs(x.astype(np.float32))
    if format == "fp8_per_head":
        return {"scale": (amax.max(axis=tuple(range(x.ndim - 2)) + (x.ndim - 1,)) / 448)
                .astype(np.float32)}
    if format == "nvfp4":
        return {"global_scale": np.array([amax.max() / (448 * 6)], np.float32)}
    return {}


def quantize(format, x):
    kw = format_args(format, x)
    codes, scale = hfa.quantize_kv(x, format, **kw)
    return codes, scale, kw.get("global_scale")


@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("shape", [(7, 2, 64), (3, 4, 2, 128), (2, 32)])
def test_round_trip(format, shape):
    """Each value comes back within its format's step of the largest value of its block."""
    x = values(shape)
    codes, scale, global_scale = quantize(format, x)
    y = hfa.dequantize_kv(codes, scale, format, global_scale=global_scale)
    assert y.shape == x.shape and y.dtype == np.float32
    block = {"nvfp4": 16, "mxfp4": 32}.get(format, shape[-1])
    blocks = np.abs(x).reshape(x.shape[:-1] + (-1, block)).max(axis=-1, keepdims=True)
    if format == "fp8_per_head":  # the scale covers every token of the head
        blocks = np.broadcast_to(np.abs(x).max(axis=tuple(range(x.ndim - 2)) + (x.ndim - 1,))
                                 [:, None, None], blocks.shape)
    bound = {"fp8_per_head": 2 ** -3, "fp8_per_token": 2 ** -3, "nvfp4": 0.34,
             "mxfp4": 0.67}[format]
    err = np.abs(y - x).reshape(blocks.shape[:-1] + (block,))
    assert np.all(err <= bound * blocks + 1e-30), float((err / (blocks + 1e-30)).max())
    # Quantizing what dequantize gave back gives the same codes (the values are on the grid),
    # and the float16 result is the float32 one rounded.
    again, _ = hfa.quantize_kv(y, format, **format_args(format, x))
    assert np.array_equal(again, codes)
    y16 = hfa.dequantize_kv(codes, scale, format, global_scale=global_scale, dtype=np.float16)
    assert np.array_equal(y16, y.astype(np.float16))


def appended_cache(format, x, page_size, dtype):
    """x (tokens, heads_kv, d) appended by flash_attn_with_kvcache into a paged cache of the
    format (pages in a shuffled order), then read back per token: (codes, scale) as
    quantize_kv lays them out."""
    tokens, heads, d = x.shape
    pages = -(-tokens // page_size) + 1
    table = np.random.default_rng(1).permutation(pages).astype(np.int32)[None]
    kw = format_args(format, x)
    code_d = d // 2 if format in ("nvfp4", "mxfp4") else d
    cache = np.zeros((pages, page_size, heads, code_d), np.uint8)
    if format == "fp8_per_head":
        scale = kw["scale"]
    elif format == "fp8_per_token":
        scale = np.zeros((pages, page_size, heads), np.float32)
    else:
        scale = np.zeros((pages, page_size, heads, d // (16 if format == "nvfp4" else 32)),
                         np.uint8)
    g = kw.get("global_scale")
    q = np.zeros((1, 1, heads, d), dtype)
    hfa.flash_attn_with_kvcache(q, cache, cache.copy(), k=x[None], v=x[None],
                                cache_seqlens=np.zeros(1, np.int32), page_table=table,
                                k_scale=scale, v_scale=scale.copy(), k_global_scale=g,
                                v_global_scale=g)
    positions = np.arange(tokens)
    page, slot = table[0, positions // page_size], positions % page_size
    return cache[page, slot], scale if format == "fp8_per_head" else scale[page, slot]


@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_bit_identical_to_the_append(format, dtype):
    """quantize_kv writes the bytes the append writes for the same tokens (the CPU append)."""
    x = values((37, 3, 64), dtype, seed=2)
    x[4, 1, :32] = 0.0  # an all-zero block
    x[9, 0, 3] = 1e-30  # underflow to signed zero
    codes, scale, _ = quantize(format, x)
    cache_codes, cache_scale = appended_cache(format, x, page_size=8, dtype=dtype)
    assert codes.tobytes() == cache_codes.tobytes()
    assert scale.tobytes() == cache_scale.tobytes()


def test_strided_input_and_cache_views():
    """x may be any view with a unit last stride (a slice of a larger array), and a cache page
    is a valid (page_size, heads_kv, d) input to dequantize."""
    x = values((10, 4, 64))
    codes, scale = hfa.quantize_kv(x[::2], "mxfp4")
    codes_full, scale_full = hfa.quantize_kv(x, "mxfp4")
    assert np.array_equal(codes, codes_full[::2]) and np.array_equal(scale, scale_full[::2])
    y = hfa.dequantize_kv(codes_full[1::3], scale_full[1::3], "mxfp4")
    assert np.array_equal(y, hfa.dequantize_kv(codes_full, scale_full, "mxfp4")[1::3])


def test_attention_over_quantized_tokens_matches_dequantized():
    """A cache filled by quantize_kv attends like a plain cache of the dequantized values."""
    rng = np.random.default_rng(3)
    k, v = values((2, 16, 2, 64), seed=4), values((2, 16, 2, 64), seed=5)
    q = rng.standard_normal((2, 1, 4, 64)).astype(np.float32)
    kc, ks = hfa.quantize_kv(k, "fp8_per_token")
    vc, vs = hfa.quantize_kv(v, "fp8_per_token")
    out = hfa.flash_attn_with_kvcache(q, kc, vc, k_scale=ks, v_scale=vs, cache_seqlens=16)
    plain = hfa.flash_attn_with_kvcache(q, hfa.dequantize_kv(kc, ks, "fp8_per_token"),
                                        hfa.dequantize_kv(vc, vs, "fp8_per_token"),
                                        cache_seqlens=16)
    assert np.abs(out - plain).max() <= 1e-5


def test_errors():
    x = values((4, 2, 64))
    with pytest.raises(ValueError, match=r"^format: expected one of fp8_per_head, fp8_per_token, "
                                         r"nvfp4, mxfp4, fp8_mla, got 'fp8'"):
        hfa.quantize_kv(x, "fp8")
    with pytest.raises(ValueError, match=r"^format: "):
        hfa.dequantize_kv(x, x, None)
    with pytest.raises(ValueError, match=r"^scale: fp8_per_head takes the cache's calibrated"):
        hfa.quantize_kv(x, "fp8_per_head")
    with pytest.raises(ValueError, match=r"^scale: only fp8_per_head takes a scale"):
        hfa.quantize_kv(x, "mxfp4", scale=np.ones(2, np.float32))
    with pytest.raises(ValueError, match=r"^global_scale: nvfp4 needs it"):
        hfa.quantize_kv(x, "nvfp4")
    with pytest.raises(ValueError, match=r"^global_scale: only nvfp4"):
        hfa.quantize_kv(x, "mxfp4", global_scale=np.ones(1, np.float32))
    with pytest.raises(ValueError, match=r"^x: expected rank 2 to 4"):
        hfa.quantize_kv(x[0, 0], "mxfp4")
    with pytest.raises(TypeError, match=r"^x: expected a float32 or float16 numpy array"):
        hfa.quantize_kv(x.astype(np.float64), "mxfp4")
    with pytest.raises(TypeError, match=r"^x: "):
        hfa.quantize_kv([[1.0]], "mxfp4")
    with pytest.raises(hfa.HfaInvalidArgument, match=r"^x: headdim 48 must be a multiple of 32"):
        hfa.quantize_kv(values((4, 2, 48)), "mxfp4")
    with pytest.raises(hfa.HfaInvalidArgument, match=r"^scale: expected shape \(2\)"):
        hfa.quantize_kv(x, "fp8_per_head", scale=np.ones(3, np.float32))
    with pytest.raises(TypeError, match=r"^scale: dtype float64 is not supported"):
        hfa.quantize_kv(x, "fp8_per_head", scale=np.ones(2, np.float64))
    with pytest.raises(hfa.HfaInvalidArgument, match=r"^global_scale: expected f32 of shape \(1\)"):
        hfa.quantize_kv(x, "nvfp4", global_scale=np.ones(2, np.float32))
    codes, scale = hfa.quantize_kv(x, "mxfp4")
    with pytest.raises(hfa.HfaInvalidArgument, match=r"^scale: expected extent 4 in dim 0"):
        hfa.dequantize_kv(codes, scale[:3], "mxfp4")
    with pytest.raises(hfa.HfaInvalidArgument, match=r"^scale: expected 2 scales per row"):
        hfa.dequantize_kv(codes, scale[..., :1], "mxfp4")
    with pytest.raises(TypeError, match=r"^codes: dtype int16 is not supported"):
        hfa.dequantize_kv(codes.astype(np.int16), scale, "mxfp4")
    with pytest.raises(TypeError, match=r"^dtype: expected float32 or float16"):
        hfa.dequantize_kv(codes, scale, "mxfp4", dtype=np.float64)
    with pytest.raises(ValueError, match=r"^scale: is None"):
        hfa.dequantize_kv(codes, None, "mxfp4")
