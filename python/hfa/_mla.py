"""FlashMLA's Python API (flash_mla.flash_mla_with_kvcache, get_mla_metadata) over
hfa_forward_kvcache, for numpy arrays and torch tensors: a serving engine switches by changing
the import. MLA is no separate operation in hfa: the latent cache is k_cache, its first
head_dim_v columns (a view, never a copy) are v_cache, FlashMLA's FP8 cache is the fp8_mla
cache dtype, and sparse attention the indices option (hfa.h). Torch tensors go through the
custom op torch.ops.hfa.mla_decode (registered on the first torch call), so torch.compile traces
flash_mla_with_kvcache without a graph break.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from . import _args, _lib

# The library's names for what this API calls otherwise: v_cache is the view head_dim_v makes.
_NAMES = {"v_cache": "head_dim_v", "k_scale": "k_cache", "v_scale": "k_cache"}


@dataclasses.dataclass
class MlaSchedule:
    """get_mla_metadata's holder (FlashMLA's FlashMLASchedMeta): the shapes of the first call
    that used it, checked on every later one, as FlashMLA does, and on a GPU the schedule.

    On a Hopper GPU the MLA kernels (bf16/fp16 cache, FP8 records) balance the batch by a
    schedule made from cache_seqlens' values (FlashMLA's idea), one small kernel writing it into
    the call's workspace. The holder keeps that workspace: a later call with the same
    cache_seqlens tensor, unchanged since (its torch version), reads the schedule there instead
    of making it again (a step's later layers, as FlashMLA's metadata). A new cache_seqlens
    tensor, or one written in place by torch outside inference mode, is scheduled again; lengths
    written into the same tensor where torch keeps no version (an inference tensor, a kernel of
    one's own writing its memory) are not seen: make a new holder each step, as FlashMLA asks.
    Inside a CUDA graph's capture the schedule is made by the holder's first call of that
    capture and read by its later ones (each replay makes it again), never shared with calls
    outside it. Under torch.compile, and on the CPU (which splits by each sequence's length as
    it reads it), each call makes its own."""

    @dataclasses.dataclass
    class Config:
        b: int
        s_q: int
        h_q: int
        page_block_size: int
        h_k: int
        causal: bool
        is_fp8_kvcache: bool
        topk: Optional[int]

    have_initialized: bool = False
    config: Optional[Config] = None
    # FlashMLA's tensors, for callers that read them: hfa's schedule lives in `workspace`.
    tile_scheduler_metadata: None = None
    num_splits: None = None
    # The workspace holding the schedule, and what it was made from: (cache_seqlens, its torch
    # version, whether a graph was being captured, the device).
    workspace: object = dataclasses.field(default=None, repr=False)
    made_from: object = dataclasses.field(default=None, repr=False)


def get_mla_metadata(*args, **kwargs):
    """(MlaSchedule(), None), as FlashMLA since its 2026 API. The arguments of the older API
    (cache_seqlens, num_q_tokens_per_head_k, num_heads_k, ...) are accepted and not needed:
    callers of that API pass the pair on to flash_mla_with_kvcache, which takes it."""
    return MlaSchedule(), None


def _check_schedule(schedule, config):
    if schedule is None:
        return
    if not isinstance(schedule, MlaSchedule):
        raise TypeError(f"tile_scheduler_metadata: expected what hfa.get_mla_metadata returns, "
                        f"got {type(schedule).__name__}")
    if not schedule.have_initialized:
        schedule.have_initialized = True
        schedule.config = config
        return
    for field in dataclasses.fields(config):
        was, now = getattr(schedule.config, field.name), getattr(config, field.name)
        if was != now:
            raise ValueError(f"tile_scheduler_metadata: made for {field.name} = {was}, called "
                             f"with {now} (one schedule serves calls of the same shapes)")


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v,
                           tile_scheduler_metadata, num_splits=None, softmax_scale=None,
                           causal=False, is_fp8_kvcache=False, indices=None, attn_sink=None,
                           extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None):
    """MLA decode (FlashMLA's signature and results). Returns (out, lse).

    q (batch, seqlen_q, heads_q, 576); k_cache (num_blocks, page_block_size, heads_k, 576) of
    q's dtype, or with is_fp8_kvcache FlashMLA's FP8 cache (num_blocks, page_block_size, 1, 656)
    (float8_e4m3fn, int8 or uint8 bytes: 512 e4m3 latent codes, 4 float32 scales, 64 bf16 rotary
    values per token); head_dim_v 512 (V is the first 512 columns of the same rows).
    Dense: block_table (batch, max_blocks) and cache_seqlens (batch,) int32; causal is
    bottom-right aligned (speculative tokens see one more key each).
    Sparse (DeepSeek-V3.2): indices (batch, seqlen_q, topk) int32, each page * page_block_size +
    slot, -1 for none; block_table and cache_seqlens are then not read; topk_length (batch,)
    int32 keeps each sequence's first topk_length[b] indices; attn_sink (heads_q,) float32 scales
    the output by exp(lse) / (exp(lse) + exp(attn_sink)) (lse unchanged), applied to the
    float32 result the library writes, then rounded once to q's dtype. hfa's sparse form also
    takes a bf16 cache.
    tile_scheduler_metadata: get_mla_metadata()[0] (or None); num_splits must be None (hfa plans
    its splits: on a GPU, a schedule balancing the batch's keys over the SMs, kept by the holder
    for the calls after its first: MlaSchedule). softmax_scale: default 1/sqrt(576).
    out (batch, seqlen_q, heads_q, 512) of q's dtype; lse (batch, heads_q, seqlen_q) float32,
    natural log. A row with no key gets out 0 and lse -inf (FlashMLA: +inf), the value that
    merges correctly with other partial results.
    On a Hopper GPU dense MLA with a bf16/fp16 cache, or the FP8 cache with bf16 q, of 64-token
    pages runs (sm90's MLA decode kernels); indices, and the FP8 cache with fp16 q, raise
    NotImplementedError for now; the CPU computes them all.
    Not supported: extra_k_cache, extra_indices_in_kvcache, extra_topk_length (MODEL1's).
    """
    for name, value in (("extra_k_cache", extra_k_cache),
                        ("extra_indices_in_kvcache", extra_indices_in_kvcache),
                        ("extra_topk_length", extra_topk_length)):
        if value is not None:
            raise NotImplementedError(f"{name}: not supported by hfa yet")
    if num_splits is not None:
        raise ValueError("num_splits: must be None (hfa plans its splits itself)")
    head_dim_v = _args.integer(head_dim_v, "head_dim_v")
    causal = _args.flag(causal, "causal")
    is_fp8_kvcache = _args.flag(is_fp8_kvcache, "is_fp8_kvcache")
    softmax_scale = _args.real(softmax_scale, "softmax_scale", none_ok=True)
    for name, a in (("q", q), ("k_cache", k_cache)):
        if getattr(a, "ndim", None) != 4:
            raise ValueError(f"{name}: expected rank 4, got shape {tuple(getattr(a, 'shape', ()))}")
    for name, a in (("block_table", block_table), ("cache_seqlens", cache_seqlens),
                    ("indices", indices), ("topk_length", topk_length), ("attn_sink", attn_sink)):
        if a is not None and not hasattr(a, "shape"):
            raise TypeError(f"{name}: expected an array or tensor, got {type(a).__name__}")
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[-1])
    sparse = indices is not None
    if sparse:
        if causal:
            raise ValueError("causal: must be False with indices (they choose each row's keys)")
        block_table = cache_seqlens = None  # FlashMLA's sparse decode does not read them
    else:
        for name, value in (("attn_sink", attn_sink), ("topk_length", topk_length)):
            if value is not None:
                raise ValueError(f"{name}: only used with indices (sparse attention)")
        if block_table is None or cache_seqlens is None:
            raise ValueError(f"{'block_table' if block_table is None else 'cache_seqlens'}: "
                             f"required without indices (dense attention)")
    b, s_q, h_q = (int(n) for n in q.shape[:3])
    # What this layer reads itself (the library checks the rest): FlashMLA's shapes and dtypes.
    for name, a, shape, dtype in (("topk_length", topk_length, (b,), "int32"),
                                  ("attn_sink", attn_sink, (h_q,), "float32")):
        if a is not None and (tuple(a.shape) != shape or not str(a.dtype).endswith(dtype)):
            raise ValueError(f"{name}: expected {dtype} of shape {shape}, got {a.dtype} of "
                             f"shape {tuple(a.shape)}")
    if sparse and (getattr(indices, "ndim", 0) != 3 or tuple(indices.shape[:2]) != (b, s_q)):
        raise ValueError(f"indices: expected shape ({b}, {s_q}, topk) (batch, seqlen_q as q), "
                         f"got {tuple(indices.shape)}")
    _check_schedule(tile_scheduler_metadata, MlaSchedule.Config(
        b, s_q, h_q, int(k_cache.shape[1]), int(k_cache.shape[2]), causal, is_fp8_kvcache,
        int(indices.shape[-1]) if sparse else None))
    if s_q == 1:
        causal = False  # one row sees every key either way (FlashMLA's rule)

    from . import _frontend
    fe = _frontend(q)
    torch_like = fe is not None
    # With a sink the library writes the float32 result, scaled here and rounded once.
    float_out = attn_sink is not None
    arguments = (q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale, causal,
                 is_fp8_kvcache, indices, topk_length, float_out)
    if torch_like:
        out, lse = _torch_call(*arguments, schedule=tile_scheduler_metadata)
    else:
        out, lse = _numpy_call(*arguments)  # the CPU: no schedule to keep
    if attn_sink is not None:
        out = _apply_sink(out, lse, attn_sink, torch_like, q.dtype)
    return out, lse


def _call(q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale, causal,
          is_fp8_kvcache, indices, view, alloc, stream, alloc_workspace, reuse_schedule=False):
    """The library call shared by the front ends: view(a, name, bytes_as) -> (kept, Tensor);
    alloc(shape, like_q) an empty output (q's dtype, else float32); reuse_schedule: the
    workspace alloc_workspace gives holds the schedule (MlaSchedule)."""
    b, s_q, h_q = (int(n) for n in q.shape[:3])
    bytes_as = _lib.FP8_MLA if is_fp8_kvcache else None
    out = alloc((b, s_q, h_q, head_dim_v), True)
    lse = alloc((b, h_q, s_q), False)
    keep = []

    def tensor(a, name, bytes_as=None):
        if a is None:
            return None
        kept, t = view(a, name, bytes_as)
        keep.append((kept, t))
        return t

    qt = tensor(q, "q")
    kt = tensor(k_cache, "k_cache", bytes_as)
    # V is a view of the cache the library reads, which may be a copy of the caller's (a layout
    # it cannot take as it is): sliced from that one.
    vt = tensor(keep[-1][0][..., :head_dim_v], "v_cache", bytes_as)

    options = _lib.make_kvcache_options(
        cache_seqlens=tensor(cache_seqlens, "cache_seqlens"),
        block_table=tensor(block_table, "block_table"), indices=tensor(indices, "indices"),
        softmax_scale=softmax_scale, causal=causal, stream=stream, reuse_schedule=reuse_schedule)
    prepared = _lib.prepare_forward_kvcache(qt, kt, vt, tensor(out, "out"), tensor(lse, "lse"),
                                            options)
    _lib.run(prepared, alloc_workspace)
    return out, lse


def _renamed(call):
    """call() with the library's argument names turned into this API's in its errors."""
    try:
        return call()
    except (ValueError, TypeError, NotImplementedError) as e:
        from . import _rename_arguments
        _rename_arguments(e, _NAMES)
        raise


def _numpy_call(q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale, causal,
                is_fp8_kvcache, indices, topk_length, float_out):
    import numpy as np

    from . import _numpy
    if is_fp8_kvcache:
        if k_cache.dtype.itemsize != 1:
            raise TypeError(f"k_cache: an FP8 cache holds bytes (uint8 or int8), got "
                            f"{k_cache.dtype}")
        k_cache = k_cache.view(np.uint8)
    if topk_length is not None and indices is not None:
        position = np.arange(indices.shape[-1], dtype=np.int64)[None, None, :]
        limit = np.asarray(topk_length, dtype=np.int64)[:, None, None]
        indices = np.where(position < limit, indices, -1).astype(np.int32)

    def alloc(shape, like_q):
        return np.empty(shape, dtype=q.dtype if like_q and not float_out else np.float32)

    return _renamed(lambda: _call(
        q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale, causal,
        is_fp8_kvcache, indices, _numpy.view, alloc, None, _numpy.workspace))


def _torch_call(q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale, causal,
                is_fp8_kvcache, indices, topk_length, float_out, schedule=None):
    """The torch tensors' call: as torch ops (topk_length's mask) around hfa::mla_decode, so
    that torch.compile traces it without a graph break; or, where the holder keeps the schedule
    (_keeps_schedule), the same call with the holder's workspace."""
    import torch
    if is_fp8_kvcache and k_cache.element_size() != 1:
        raise TypeError(f"k_cache: an FP8 cache holds bytes (float8_e4m3fn, int8 or uint8), "
                        f"got {k_cache.dtype}")
    if topk_length is not None and indices is not None:
        position = torch.arange(indices.shape[-1], device=indices.device)[None, None, :]
        indices = torch.where(position < topk_length[:, None, None], indices,
                              torch.full_like(indices, -1))
    arguments = (q, k_cache, block_table, cache_seqlens, indices, head_dim_v, softmax_scale,
                 causal, is_fp8_kvcache, float_out)
    if _keeps_schedule(schedule, q, indices):
        return _torch_mla(*arguments, schedule=schedule)
    return _torch_op()(*arguments)


def _keeps_schedule(schedule, q, indices) -> bool:
    """Whether the holder keeps this call's schedule: a dense call on a GPU outside
    torch.compile (whose traced calls each make their own)."""
    import torch
    return (schedule is not None and q.device.type == "cuda" and indices is None
            and not torch.compiler.is_compiling())


def _torch_mla(q, k_cache, block_table, cache_seqlens, indices, head_dim_v, softmax_scale,
               causal, is_fp8_kvcache, float_out, schedule=None):
    """hfa::mla_decode's body: the library call on torch tensors, its workspace a fresh one, or
    the holder's with the schedule it keeps (_held_workspace)."""
    import ctypes

    import torch

    from . import _torch_calls
    cache = k_cache.view(torch.uint8) if is_fp8_kvcache else k_cache
    stream = None
    if q.device.type == "cuda":
        stream = ctypes.c_void_p(torch.cuda.current_stream(q.device).cuda_stream).value

    def alloc(shape, like_q):
        return torch.empty(shape, dtype=q.dtype if like_q and not float_out else torch.float32,
                           device=q.device)

    with torch.no_grad(), _torch_calls.on_device(q):
        alloc_workspace, reuse = (lambda n: _torch_calls.workspace(n, q.device)), False
        if schedule is not None:
            alloc_workspace, reuse, made_from = _held_workspace(schedule, q, cache_seqlens)
        result = _renamed(lambda: _call(
            q, cache, block_table, cache_seqlens, head_dim_v, softmax_scale, causal,
            is_fp8_kvcache, indices, _torch_calls.view, alloc, stream, alloc_workspace, reuse))
    if schedule is not None:
        schedule.made_from = made_from  # the call has made it, or read it
    return result


def _held_workspace(schedule, q, cache_seqlens):
    """(alloc_workspace, reuse, made_from) of a call through the holder: its workspace, which
    holds a schedule this call reads (reuse) when made from this cache_seqlens, unchanged, in
    the same capture state on the same device, else a new one this call makes it in. On q's
    device (the current one)."""
    import torch
    capturing = torch.cuda.is_current_stream_capturing()
    # An inference tensor has no version: its identity alone says "unchanged".
    version = None if cache_seqlens.is_inference() else cache_seqlens._version
    made_from = (cache_seqlens, version, capturing, q.device)
    was = schedule.made_from
    reuse = was is not None and was[0] is cache_seqlens and was[1:] == made_from[1:]

    def alloc_workspace(n):
        if not reuse:
            schedule.made_from = None  # until this call has made it
            schedule.workspace = torch.empty(n, dtype=torch.uint8, device=q.device)
        elif schedule.workspace.numel() != n:  # the shapes are the holder's (_check_schedule)
            raise RuntimeError(f"hfa: the schedule's workspace holds "
                               f"{schedule.workspace.numel()} bytes, the call needs {n}")
        elif not capturing:  # kept alive for this stream's use too
            schedule.workspace.record_stream(torch.cuda.current_stream(q.device))
        return schedule.workspace, schedule.workspace.data_ptr()

    return alloc_workspace, reuse, made_from


_MLA_OP = None


def _torch_op():
    """torch.ops.hfa.mla_decode, registered on first use (torch is imported by then): a custom op
    over the C ABI (ctypes) with a fake kernel for torch.compile. Its own op rather than the C++
    hfa::fwd_kvcache (which takes indices and FP8 MLA records too): that one exists only where
    libhfa_torch was built against the user's torch, this one wherever torch imports."""
    global _MLA_OP
    if _MLA_OP is None:
        _MLA_OP = _register_torch_op()
    return _MLA_OP


def _register_torch_op():
    from typing import Optional, Tuple

    import torch

    Tensor = torch.Tensor

    # No `from __future__ import annotations` effect here: custom_op reads these annotations as
    # objects, and this module's postponed ones would be strings; they are given explicitly.
    def mla_decode(q, k_cache, block_table, cache_seqlens, indices, head_dim_v, softmax_scale,
                   causal, is_fp8_kvcache, float_out):
        return _torch_mla(q, k_cache, block_table, cache_seqlens, indices, head_dim_v,
                          softmax_scale, causal, is_fp8_kvcache, float_out)

    mla_decode.__annotations__ = {
        "q": Tensor, "k_cache": Tensor, "block_table": Optional[Tensor],
        "cache_seqlens": Optional[Tensor], "indices": Optional[Tensor], "head_dim_v": int,
        "softmax_scale": float, "causal": bool, "is_fp8_kvcache": bool, "float_out": bool,
        "return": Tuple[Tensor, Tensor]}
    op = torch.library.custom_op("hfa::mla_decode", mla_decode, mutates_args=())

    @op.register_fake
    def _(q, k_cache, block_table, cache_seqlens, indices, head_dim_v, softmax_scale, causal,
          is_fp8_kvcache, float_out):
        b, s_q, h_q = q.shape[:3]
        return (q.new_empty((b, s_q, h_q, head_dim_v),
                            dtype=torch.float32 if float_out else q.dtype),
                q.new_empty((b, h_q, s_q), dtype=torch.float32))

    return op


def _apply_sink(out, lse, attn_sink, torch_like, dtype):
    """The float32 out · exp(lse) / (exp(lse) + exp(sink)) per (row, head), rounded once to
    `dtype` (q's); rows with no key (lse -inf) stay 0."""
    if torch_like:
        sink = attn_sink.to(lse.dtype).reshape(1, -1, 1)
        factor = 1.0 / (1.0 + (sink - lse).exp())
        return (out * factor.transpose(1, 2).unsqueeze(-1)).to(dtype)
    import numpy as np
    sink = np.asarray(attn_sink, dtype=np.float32).reshape(1, -1, 1)
    with np.errstate(over="ignore"):
        factor = 1.0 / (1.0 + np.exp(sink - lse))
    return (out * factor.transpose(0, 2, 1)[..., None]).astype(dtype)
