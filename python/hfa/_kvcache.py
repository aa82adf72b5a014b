"""flash_attn_with_kvcache over hfa_forward_kvcache, for numpy arrays and torch tensors.

The cache format follows from the dtypes (see hfa.h, hfa_kvcache_options):
  - k_cache of q's dtype: a plain cache, no scales;
  - float8 e4m3 (torch.float8_e4m3fn), or uint8 with float32 k_scale: FP8 E4M3, k_scale/v_scale
    per kv-head (heads_kv,) or per (token, kv-head) (cache shape without the last dim);
  - uint8 with uint8 (or torch float8 e4m3 / e8m0) k_scale: packed FP4 E2M1, last dim headdim/2;
    NVFP4 (E4M3 scale per 16 values) when k_global_scale/v_global_scale (float32, (1,)) are
    given, MXFP4 (UE8M0 scale per 32 values) when not.
k / v (the new tokens' keys and values, q's dtype) are appended to the cache in place before the
attention, rotated by rotary_cos / rotary_sin when given and encoded in the cache's format (CPU
and CUDA alike); with cu_seqlens_k_new they are packed (total_k_new, heads_kv, headdim), each
sequence appending its own number of tokens.
"""

from __future__ import annotations

import ctypes

from . import _lib

# FlashAttention-3 arguments hfa does not implement yet. Passing any of them raises rather
# than silently computing something else.
_NOT_YET = ("qv", "cache_batch_idx", "cache_leftpad", "rotary_seqlens", "scheduler_metadata")

def check_not_yet(attention_chunk, qv, cache_batch_idx, cache_leftpad, rotary_seqlens,
                  scheduler_metadata):
    """NotImplementedError naming the first of _NOT_YET given (the arguments in its order), or a
    nonzero attention_chunk."""
    if (qv is None and cache_batch_idx is None and cache_leftpad is None
            and rotary_seqlens is None and scheduler_metadata is None
            and not attention_chunk):  # the usual call: one test
        return
    given = (qv, cache_batch_idx, cache_leftpad, rotary_seqlens, scheduler_metadata)
    for name, value in zip(_NOT_YET, given):
        if value is not None:
            raise NotImplementedError(f"flash_attn_with_kvcache: {name} is not supported by hfa "
                                      f"yet")
    if attention_chunk:
        raise NotImplementedError("flash_attn_with_kvcache: attention_chunk is not supported by "
                                  "hfa yet")


def scales_from_descales(q, k_cache, k_scale, v_scale, q_descale, k_descale, v_descale):
    """(k_scale, v_scale) with FlashAttention-3's descales folded in. A descale applies to an fp8
    tensor only (FlashAttention-3 ignores those of 16-bit ones); for a float8 e4m3 cache,
    k_descale / v_descale of shape (num_seqs, heads_kv) broadcast over the sequences (stride 0,
    or one row) are its per-kv-head scales."""
    if q_descale is None and k_descale is None and v_descale is None:
        return k_scale, v_scale

    def is_e4m3(t):
        return "float8_e4m3" in str(getattr(t, "dtype", ""))

    if q_descale is not None and is_e4m3(q):
        raise NotImplementedError("q_descale: fp8 queries are not supported by the KV-cache "
                                  "path yet")
    if not is_e4m3(k_cache):
        return k_scale, v_scale
    scales = []
    for name, scale, descale in (("k", k_scale, k_descale), ("v", v_scale, v_descale)):
        if descale is not None:
            if scale is not None:
                raise ValueError(f"{name}_scale, {name}_descale: give one (the same scales)")
            if descale.ndim != 2 or not (descale.shape[0] == 1 or descale.stride(0) == 0):
                raise NotImplementedError(
                    f"{name}_descale: per-sequence descales are not supported; hfa takes one "
                    f"scale per kv-head, shape (num_seqs, heads_kv) broadcast with stride 0 "
                    f"(got shape {tuple(descale.shape)}, strides {tuple(descale.stride())})")
            scale = descale[0]
        scales.append(scale)
    return tuple(scales)


_FLOAT_CODES = {"f32": _lib.F32, "f16": _lib.F16, "bf16": _lib.BF16}


def _cache_codes(cache_kind: str, scale_kind, has_global: bool):
    """(cache dtype code, scale dtype code) from the kinds of k_cache and k_scale (hfa._args'
    kinds, or the dtype's name for others); scale_kind None when there is no k_scale. They are
    the byte formats that label uint8 caches and scales (hfa._args.array_code); any other array
    is labelled with its own dtype. A float cache is passed as it is (the library checks it
    matches q and has no scales: no byte format for them, so a uint8 scale is rejected here)."""
    if cache_kind in _FLOAT_CODES:
        return _FLOAT_CODES[cache_kind], _lib.F32
    if cache_kind == "e4m3":
        if scale_kind not in (None, "f32"):
            raise TypeError("k_scale: an e4m3 cache takes float32 scales")
        return _lib.E4M3, _lib.F32
    if cache_kind != "u8":
        raise TypeError("k_cache: expected q's dtype, float8 e4m3 or uint8 (packed FP4, or FP8 "
                        "codes with float32 scales)")
    fp4_scales = {"e4m3": _lib.E4M3, "e8m0": _lib.UE8M0,
                  "u8": _lib.E4M3 if has_global else _lib.UE8M0}
    if scale_kind is None:
        raise ValueError("k_scale: a uint8 k_cache needs k_scale (float32: FP8 E4M3 codes; "
                         "uint8: FP4 block scales, NVFP4 with k_global_scale, MXFP4 without)")
    if scale_kind == "f32":
        return _lib.E4M3, _lib.F32
    if scale_kind in fp4_scales:
        return _lib.FP4_E2M1X2, fp4_scales[scale_kind]
    raise TypeError("k_scale: expected float32 (FP8 cache) or uint8 / float8 (FP4 block scales)")


def resolve(q, k_cache, v_cache, kind_of, full_seqlens, longest_sequence, cache_seqlens,
            page_table, k_scale, k_global_scale, cu_seqlens_q, max_seqlen_q):
    """What a call means before any view is made: (cache dtype code, scale dtype code,
    cache_seqlens as a vector, max_seqlen_q, batch). kind_of(a, name) -> a kind of
    _cache_codes (TypeError naming the argument for what is no array of the front end's);
    full_seqlens(q, batch, length) makes an int32 vector on q's device;
    longest_sequence(cu_seqlens) the most rows of a sequence (a host read of the offsets).
    Positional, as the front ends' calls: a keyword costs more to pass than most checks here."""
    varlen = cu_seqlens_q is not None
    if varlen and q.ndim != 3:
        raise ValueError(f"q: expected rank 3 (total_q, heads_q, headdim) with cu_seqlens_q, got "
                         f"shape {tuple(q.shape)}")
    if not varlen and q.ndim != 4:
        raise ValueError(f"q: expected rank 4 (batch, seqlen_q, heads_q, headdim), got shape "
                         f"{tuple(q.shape)}")
    cache_kind = kind_of(k_cache, "k_cache")
    kind_of(v_cache, "v_cache")
    scale_kind = kind_of(k_scale, "k_scale") if k_scale is not None else None
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.ndim != 4:
            raise ValueError(f"{name}: expected rank 4 (num_pages, page_size, heads_kv, headdim) "
                             f"or (batch, max_seqlen_cache, heads_kv, headdim), got shape "
                             f"{tuple(cache.shape)}")
    cache_code, scale_code = _cache_codes(cache_kind, scale_kind, k_global_scale is not None)
    if varlen:
        # Its values are read here (longest_sequence) before the library checks them.
        if kind_of(cu_seqlens_q, "cu_seqlens_q") != "i32":
            raise TypeError(f"cu_seqlens_q: expected int32, got {cu_seqlens_q.dtype}")
        if cu_seqlens_q.ndim != 1 or cu_seqlens_q.shape[0] < 1:
            raise ValueError(f"cu_seqlens_q: expected shape (batch + 1,), got "
                             f"{tuple(cu_seqlens_q.shape)}")
        batch = int(cu_seqlens_q.shape[0]) - 1
        if max_seqlen_q is None:
            max_seqlen_q = max(1, longest_sequence(cu_seqlens_q)) if batch else 1
    else:
        batch = int(q.shape[0])
    if isinstance(cache_seqlens, int):  # checked by hfa._args.integer
        cache_seqlens = full_seqlens(q, batch, cache_seqlens)
    elif cache_seqlens is None:
        # FlashAttention's default: the whole cache (every page of the table).
        if page_table is not None:
            kind_of(page_table, "page_table")  # its shape is read here
            if page_table.ndim != 2:
                raise ValueError(f"page_table: expected rank 2 (batch, max_pages), got shape "
                                 f"{tuple(page_table.shape)}")
        capacity = (int(page_table.shape[1]) * int(k_cache.shape[1]) if page_table is not None
                    else int(k_cache.shape[1]))
        cache_seqlens = full_seqlens(q, batch, capacity)
    return cache_code, scale_code, cache_seqlens, max_seqlen_q, batch


def run(q, k_cache, v_cache, *, kind_of, view, alloc_out, alloc_lse, full_seqlens,
        alloc_workspace, longest_sequence,
        cache_seqlens, page_table, k_scale, v_scale, k_global_scale, v_global_scale,
        softmax_scale, causal, window_size, softcap, num_splits, stream, k=None, v=None,
        rotary_cos=None, rotary_sin=None, rotary_interleaved=True, split_size=0,
        cu_seqlens_q=None, max_seqlen_q=None, cu_seqlens_k_new=None, sm_margin=0,
        options=None):
    """The front-end-independent part of the ctypes path. resolve() says what kind_of,
    full_seqlens and longest_sequence are; view(a, name, bytes_as, written) -> (kept, Tensor),
    a labelled with its own dtype (uint8 as the byte format bytes_as) and writeable when
    written; alloc_out(shape) and alloc_lse(shape) allocate outputs like q;
    alloc_workspace(bytes) -> (kept, address) the split partials' scratch (GPU). options: the
    rows given by their caller names ({field: value}, hfa._args.options)."""
    cache_code, scale_code, cache_seqlens, max_seqlen_q, batch = resolve(
        q, k_cache, v_cache, kind_of, full_seqlens, longest_sequence, cache_seqlens, page_table,
        k_scale, k_global_scale, cu_seqlens_q, max_seqlen_q)
    varlen = cu_seqlens_q is not None
    if varlen:
        total_q, heads_q = int(q.shape[0]), int(q.shape[1])
    else:
        seqlen_q, heads_q = int(q.shape[1]), int(q.shape[2])
    keep = []  # every array and view the call reads, alive until it returns

    def tensor(a, name, bytes_as=None, written=False):
        if a is None:
            return None
        kept, t = view(a, name, bytes_as, written)
        keep.append((kept, t))
        return t

    packed = cache_code == _lib.FP4_E2M1X2
    hdim_v = int(v_cache.shape[-1]) * (2 if packed else 1)
    if varlen:
        out = alloc_out((total_q, heads_q, hdim_v))
        lse = alloc_lse((heads_q, total_q))
    else:
        out = alloc_out((batch, seqlen_q, heads_q, hdim_v))
        lse = alloc_lse((batch, heads_q, seqlen_q))

    # New tokens are written into the caches, and so are their scales where each token has its
    # own (every format but FP8's calibrated scale per kv-head, (heads_kv,)).
    appends = k is not None or v is not None
    scales_written = appends and k_scale is not None and k_scale.ndim > 1
    qt = tensor(q, "q")
    kt = tensor(k_cache, "k_cache", cache_code, written=appends)
    vt = tensor(v_cache, "v_cache", cache_code, written=appends)
    ot = tensor(out, "out")
    lt = tensor(lse, "lse")
    rows = _lib.option_rows(_lib.KVCacheOptions)
    by_row = {field: tensor(value, rows[field].caller.decode())
              if rows[field].kind in _lib._POINTERS else value
              for field, value in options.items()} if options else {}
    options = _lib.make_kvcache_options(
        **by_row, cache_seqlens=tensor(cache_seqlens, "cache_seqlens"),
        block_table=tensor(page_table, "page_table"),
        k_scale=tensor(k_scale, "k_scale", scale_code, written=scales_written),
        v_scale=tensor(v_scale, "v_scale", scale_code, written=scales_written),
        k_global_scale=tensor(k_global_scale, "k_global_scale"),
        v_global_scale=tensor(v_global_scale, "v_global_scale"),
        softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
        num_splits=num_splits, stream=stream,
        k_new=tensor(k, "k"), v_new=tensor(v, "v"),
        rotary_cos=tensor(rotary_cos, "rotary_cos"), rotary_sin=tensor(rotary_sin, "rotary_sin"),
        rotary_interleaved=rotary_interleaved, split_size=split_size,
        cu_seqlens_q=tensor(cu_seqlens_q, "cu_seqlens_q"),
        max_seqlen_q=0 if max_seqlen_q is None else max_seqlen_q,
        cu_seqlens_k_new=tensor(cu_seqlens_k_new, "cu_seqlens_k_new"),
        sm_margin=sm_margin)
    _lib.run(_lib.prepare_forward_kvcache(qt, kt, vt, ot, lt, options), alloc_workspace)
    return out, lse


# --- the front ends ----------------------------------------------------------------------------
#
# numpy_forward and torch_forward take the call's arguments positionally, in one order (their
# parameters'), the order of hfa._torch.forward_kvcache's after the cache codes: this is the
# per-call path, and binding a keyword costs Python 3.11 some 60 ns, a few microseconds over a
# call's two dozen (bench/cpu_host_cost.py). hfa.flash_attn_with_kvcache has checked and
# normalized the scalars.

def numpy_forward(q, k_cache, v_cache, out, cache_seqlens, page_table, k_scale, v_scale,
                  k_global_scale, v_global_scale, k, v, rotary_cos, rotary_sin,
                  rotary_interleaved, cu_seqlens_q, max_seqlen_q, cu_seqlens_k_new,
                  softmax_scale, causal, window_size, softcap, num_splits, split_size,
                  sm_margin, options):
    import numpy as np

    from . import _numpy

    def kind_of(a, name):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name}: expected a numpy array, got {type(a).__name__}")
        kind = _numpy._KINDS.get(a.dtype)
        return kind if kind is not None else str(a.dtype)  # str(): costly, for messages

    def view(a, name, bytes_as, written):
        return _numpy.view(a, name, bytes_as, written)

    kind_of(q, "q")
    _numpy.check_out(out)
    return into(out, *run(
        q, k_cache, v_cache, kind_of=kind_of, view=view,
        alloc_out=lambda shape: np.empty(shape, dtype=q.dtype),
        alloc_lse=lambda shape: np.empty(shape, dtype=np.float32),
        full_seqlens=lambda like, b, n: np.full((b,), n, dtype=np.int32),
        alloc_workspace=_numpy.workspace, longest_sequence=lambda cu: int(np.diff(cu).max()),
        stream=None, cache_seqlens=cache_seqlens, page_table=page_table, k_scale=k_scale,
        v_scale=v_scale, k_global_scale=k_global_scale, v_global_scale=v_global_scale, k=k, v=v,
        rotary_cos=rotary_cos, rotary_sin=rotary_sin, rotary_interleaved=rotary_interleaved,
        cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q, cu_seqlens_k_new=cu_seqlens_k_new,
        softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
        num_splits=num_splits, split_size=split_size, sm_margin=sm_margin, options=options))


# hfa._torch and hfa._torch_calls (they import torch, which a numpy caller never needs), imported
# by the first torch call and kept: an import statement costs a call more than its lookups.
_torch_modules = None


def _torch_front_end():
    global _torch_modules
    if _torch_modules is None:
        from . import _torch, _torch_calls
        _torch_modules = _torch, _torch_calls
    return _torch_modules


# The arguments of a call that are tensors or None (cache_seqlens may be an int instead), in the
# front ends' order.
_TENSOR_ARGUMENTS = ("cache_seqlens", "page_table", "k_scale", "v_scale", "k_global_scale",
                     "v_global_scale", "k", "v", "rotary_cos", "rotary_sin", "cu_seqlens_q",
                     "cu_seqlens_k_new")


def torch_forward(q, k_cache, v_cache, out, cache_seqlens, page_table, k_scale, v_scale,
                  k_global_scale, v_global_scale, k, v, rotary_cos, rotary_sin,
                  rotary_interleaved, cu_seqlens_q, max_seqlen_q, cu_seqlens_k_new,
                  softmax_scale, causal, window_size, softcap, num_splits, split_size,
                  sm_margin, options):
    _torch, _torch_calls = _torch_modules or _torch_front_end()
    Tensor = _torch.Tensor
    if (type(k_cache) is not Tensor or type(v_cache) is not Tensor
            or (out is not None and type(out) is not Tensor)):
        _torch.check_tensors(k_cache=k_cache, v_cache=v_cache, out=out)
    arrays = (cache_seqlens, page_table, k_scale, v_scale, k_global_scale, v_global_scale, k, v,
              rotary_cos, rotary_sin, cu_seqlens_q, cu_seqlens_k_new)
    for value in arrays:  # mostly None, the rest tensors: the check that names one is rarely run
        if value is not None and type(value) is not Tensor:
            for name, given in zip(_TENSOR_ARGUMENTS, arrays):
                if given is not None and not isinstance(given, int):
                    _torch.check_tensors(**{name: given})
            break
    if _torch.NATIVE:
        cache_code, scale_code, cache_seqlens, max_seqlen_q, _ = resolve(
            q, k_cache, v_cache, _torch_calls.kind_of, _torch_calls.full_lengths,
            _torch_calls.longest_sequence, cache_seqlens, page_table, k_scale, k_global_scale,
            cu_seqlens_q, max_seqlen_q)
        return _torch.forward_kvcache(
            q, k_cache, v_cache, out, cache_code, scale_code, cache_seqlens, page_table, k_scale,
            v_scale, k_global_scale, v_global_scale, k, v, rotary_cos, rotary_sin,
            rotary_interleaved, cu_seqlens_q, 0 if max_seqlen_q is None else max_seqlen_q,
            cu_seqlens_k_new, softmax_scale, causal, window_size, softcap, num_splits, split_size,
            sm_margin, options)
    import torch

    def view(t, name, bytes_as, written):
        if written:  # the library writes it: the caller's tensor itself, never a copy
            return t, _torch_calls.view_as_is(t, name, bytes_as)
        return _torch_calls.view(t, name, bytes_as)

    stream = None
    if q.device.type == "cuda":
        stream = ctypes.c_void_p(torch.cuda.current_stream(q.device).cuda_stream).value
    result = run(
        q, k_cache, v_cache, kind_of=_torch_calls.kind_of, view=view,
        alloc_out=lambda shape: torch.empty(shape, dtype=q.dtype, device=q.device),
        alloc_lse=lambda shape: torch.empty(shape, dtype=torch.float32, device=q.device),
        full_seqlens=_torch_calls.full_lengths,
        alloc_workspace=lambda n: _torch_calls.workspace(n, q.device),
        longest_sequence=_torch_calls.longest_sequence, stream=stream,
        cache_seqlens=cache_seqlens, page_table=page_table, k_scale=k_scale, v_scale=v_scale,
        k_global_scale=k_global_scale, v_global_scale=v_global_scale, k=k, v=v,
        rotary_cos=rotary_cos, rotary_sin=rotary_sin, rotary_interleaved=rotary_interleaved,
        cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q, cu_seqlens_k_new=cu_seqlens_k_new,
        softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
        num_splits=num_splits, split_size=split_size, sm_margin=sm_margin, options=options)
    return into(out, *result)


def into(out, result, lse):
    """(out, lse) with result copied into the caller's out, when one was given."""
    if out is None:
        return result, lse
    if tuple(out.shape) != tuple(result.shape) or out.dtype != result.dtype:
        raise ValueError(f"out: expected shape {tuple(result.shape)} and dtype {result.dtype}, "
                         f"got {tuple(out.shape)} {out.dtype}")
    out[...] = result
    return out, lse
