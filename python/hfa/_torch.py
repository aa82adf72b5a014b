"""The torch front end: hfa's ops (torch.ops.hfa.*), their fake kernels, and the flash_attn-style
entry points over them.

The ops come from one of two places, with the same schemas:
  - native: libhfa_torch (src/torch/ops.cpp), registered in C++ with an autograd kernel, so
    that a call goes through torch's dispatcher into libhfa with no Python in between (a few
    microseconds of host time). It is built where torch was found at build time and lies beside
    libhfa; HFA_TORCH_LIBRARY names another file.
  - ctypes: python/hfa/_torch_ctypes.py, torch.library.custom_op over the C ABI (~90 us a call),
    for a libhfa built without torch.
HFA_TORCH_OPS chooses: "auto" (the default: native when its library loads), "native" (an
error when it does not) or "ctypes". Either way the fake kernels below let
torch.compile(fullgraph=True) trace the ops as opaque nodes.

CUDA tensors run on torch's current stream of their device. The returned LSE does not require
grad: no gradient flows through it (the C ABI has no dLSE yet). Everything the library writes
is allocated with torch (out, lse, dq/dk/dv, workspaces).
"""

import os
import warnings

import torch

from . import _lib
from ._torch_shapes import dsinks_shape, is_varlen, lse_shape, out_dtype, out_shapes

if not hasattr(torch.library, "custom_op") or not hasattr(torch.library, "register_fake"):
    raise ImportError(f"hfa needs torch >= 2.4 (torch.library.custom_op); "
                      f"found {torch.__version__}")

Tensor = torch.Tensor

_NATIVE_NAMES = ("libhfa_torch.so",)
_MODES = ("auto", "native", "ctypes")


def _native_library_path():
    env = os.environ.get("HFA_TORCH_LIBRARY")
    if env:
        return env
    for name in _NATIVE_NAMES:
        path = os.path.join(os.path.dirname(os.path.realpath(_lib.library_path())), name)
        if os.path.isfile(path):
            return path
    return None


def _load_ops():
    """'native' or 'ctypes': which implementation registered torch.ops.hfa."""
    mode = os.environ.get("HFA_TORCH_OPS", "auto")
    if mode not in _MODES:
        raise ValueError(f"HFA_TORCH_OPS: expected one of {', '.join(_MODES)}, got {mode!r}")
    if mode != "ctypes":
        path = _native_library_path()
        problem = "not found beside libhfa (built only where torch is found)"
        if path is not None:
            try:
                _lib.library()  # libhfa first: the ops bind to this copy by its soname
                torch.ops.load_library(path)
                return "native"
            except OSError as e:
                problem = f"{path} did not load ({e})"
        if mode == "native":
            raise ImportError(f"HFA_TORCH_OPS=native: libhfa_torch {problem}")
        if path is not None:  # there but unusable (built for another torch?): say so once
            warnings.warn(f"hfa: C++ torch ops unavailable, using ctypes: {problem}")
    from . import _torch_ctypes  # noqa: F401  (registers hfa::fwd and hfa::bwd)
    return "ctypes"


OPS = _load_ops()
NATIVE = OPS == "native"
_fwd = torch.ops.hfa.fwd.default
_bwd = torch.ops.hfa.bwd.default


# --- fake kernels (shapes and dtypes only, for torch.compile and meta tensors) ----------------

@torch.library.register_fake("hfa::fwd")
def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
              causal, window_left, window_right, softcap, deterministic, sinks=None,
              seqused_q=None, seqused_k=None, q_descale=None, k_descale=None, v_descale=None,
              descale_block_q=0, descale_block_kv=0, sm_margin=0, vectors=None,
              kv_num_blocks=None, kv_indices=None, full_kv_num_blocks=None, full_kv_indices=None,
              kv_mask_bits=None, scalars=None):
    out_shape, lse = out_shapes(q, v, is_varlen(cu_seqlens_q, cu_seqlens_k))
    return (q.new_empty(out_shape, dtype=out_dtype(q.dtype)),
            q.new_empty(lse, dtype=torch.float32))


@torch.library.register_fake("hfa::bwd")
def _bwd_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
              softmax_scale, causal, window_left, window_right, softcap, deterministic,
              sinks=None, seqused_q=None, seqused_k=None, sm_margin=0, vectors=None,
              kv_num_blocks=None, kv_indices=None, full_kv_num_blocks=None, full_kv_indices=None,
              kv_mask_bits=None, scalars=None):
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape),
            q.new_empty(dsinks_shape(sinks), dtype=torch.float32))


def _kvcache_out_shape(q, v_cache, cache_code):
    headdim_v = v_cache.shape[-1] * (2 if cache_code == _lib.FP4_E2M1X2 else 1)
    return tuple(q.shape[:-1]) + (headdim_v,)


if NATIVE:
    _fwd_into = torch.ops.hfa.fwd_into.default
    _fwd_kvcache = torch.ops.hfa.fwd_kvcache.default
    _fwd_kvcache_into = torch.ops.hfa.fwd_kvcache_into.default

    @torch.library.register_fake("hfa::fwd_into")
    def _fwd_into_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                       softmax_scale, causal, window_left, window_right, softcap, sinks=None,
                       seqused_q=None, seqused_k=None, q_descale=None, k_descale=None,
                       v_descale=None, descale_block_q=0, descale_block_kv=0, sm_margin=0,
                       vectors=None, kv_num_blocks=None, kv_indices=None,
                       full_kv_num_blocks=None, full_kv_indices=None, kv_mask_bits=None,
                       scalars=None, *, out):
        varlen = is_varlen(cu_seqlens_q, cu_seqlens_k)
        return q.new_empty(lse_shape(q, varlen), dtype=torch.float32)

    # Where cu_seqlens_q (varlen queries) lies in the KV-cache ops' arguments after scale_code.
    _KV_CU_SEQLENS_Q = [a.name for a in _fwd_kvcache._schema.arguments].index("cu_seqlens_q") - 5

    @torch.library.register_fake("hfa::fwd_kvcache")
    def _fwd_kvcache_fake(q, k_cache, v_cache, cache_code, scale_code, *args):
        varlen = args[_KV_CU_SEQLENS_Q] is not None
        return (q.new_empty(_kvcache_out_shape(q, v_cache, cache_code)),
                q.new_empty(lse_shape(q, varlen), dtype=torch.float32))

    @torch.library.register_fake("hfa::fwd_kvcache_into")
    def _fwd_kvcache_into_fake(q, k_cache, v_cache, cache_code, scale_code, *args, out):
        varlen = args[_KV_CU_SEQLENS_Q] is not None
        return q.new_empty(lse_shape(q, varlen), dtype=torch.float32)

    # The plain calls' ops (out alone, fewer arguments: src/torch/ops.cpp says why).
    _attention = torch.ops.hfa.attention.default
    _varlen_attention = torch.ops.hfa.varlen_attention.default
    _kvcache_attention = torch.ops.hfa.kvcache_attention.default

    @torch.library.register_fake("hfa::attention")
    def _attention_fake(q, k, v, *options):
        return q.new_empty(out_shapes(q, v, False)[0], dtype=out_dtype(q.dtype))

    @torch.library.register_fake("hfa::varlen_attention")
    def _varlen_attention_fake(q, k, v, *options):
        return q.new_empty(out_shapes(q, v, True)[0], dtype=out_dtype(q.dtype))

    @torch.library.register_fake("hfa::kvcache_attention")
    def _kvcache_attention_fake(q, k_cache, v_cache, *options):
        return q.new_empty(tuple(q.shape[:-1]) + (v_cache.shape[-1],))


# --- flash_attn-style entry points -------------------------------------------------------------

def _window(window_size):
    left, right = window_size
    return (-1 if left is None else int(left)), (-1 if right is None else int(right))


def _as_int(n, name):
    if type(n) is int:  # the usual call (hfa._args.integer has checked the value)
        return n
    # Accepting a tensor costs a host sync (.item()); pass Python ints under torch.compile.
    if isinstance(n, torch.Tensor):
        return int(n.item())
    if n is None:
        raise ValueError(f"{name}: required for varlen inputs")
    return n


def _sinks(learnable_sink):
    # The library takes float32 sinks; a parameter of another float dtype is converted here,
    # where autograd sees the cast and carries the gradient back through it.
    if learnable_sink is None or learnable_sink.dtype == torch.float32:
        return learnable_sink
    return learnable_sink.to(torch.float32)


def _fp8(q_descale, k_descale, v_descale, descale_block_q, descale_block_kv):
    """The FP8 arguments of hfa::fwd, in its order."""
    return q_descale, k_descale, v_descale, int(descale_block_q), int(descale_block_kv)


_NO_FP8 = (None, None, None, 0, 0)


def _forward(q, k, v, out, cu_q, cu_k, max_q, max_k, scale, causal, wl, wr, softcap,
             deterministic, sinks, seqused_q, seqused_k, fp8=_NO_FP8, sm_margin=0,
             arguments=_lib.NO_OP_ARGUMENTS):
    """(out, lse); into the caller's out when given (no autograd through it). fp8: _fp8's;
    arguments: the ops' option arguments (_option_arguments)."""
    vectors = arguments.vectors
    rows = dict(arguments.tensors, scalars=arguments.scalars)  # after `vectors`, by name
    if out is None:
        return _fwd(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, wl, wr, softcap,
                    deterministic, sinks, seqused_q, seqused_k, *fp8, sm_margin, vectors, **rows)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                       for t in (q, k, v, sinks)):
        raise ValueError("out: writing into a given out is not differentiable; call under "
                         "torch.no_grad() or leave out=None")
    into_args = (q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, wl, wr, softcap, sinks,
                 seqused_q, seqused_k, *fp8, sm_margin, vectors)
    if NATIVE:
        return out, _fwd_into(*into_args, out=out, **rows)
    if out.dtype != out_dtype(q.dtype):  # an f16 out of FP8 inputs: hfa::fwd returns bf16
        from . import _torch_ctypes
        return out, _torch_ctypes.fwd_into(*into_args, out=out, **rows)
    result, lse = _fwd(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, wl, wr, softcap,
                       deterministic, sinks, seqused_q, seqused_k, *fp8, sm_margin, vectors,
                       **rows)
    if out.shape != result.shape or out.dtype != result.dtype or out.device != result.device:
        raise ValueError(f"out: expected {tuple(result.shape)} {result.dtype} on "
                         f"{result.device}, got {tuple(out.shape)} {out.dtype} on {out.device}")
    return out.copy_(result), lse


def check_tensors(**arguments):
    """TypeError naming the first argument that is neither None nor a tensor: an op's schema
    rejects one too, but as a RuntimeError about the op's own parameter."""
    for name, t in arguments.items():
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")


def _option_arguments(options, struct=_lib.Options):
    """The ops' option arguments (hfa._lib.op_arguments) for the rows given by the caller's
    keywords ({field: value}, hfa._args.options), each VECTOR and TENSOR row's value a tensor
    (TypeError naming the argument otherwise)."""
    if not options:
        return _lib.NO_OP_ARGUMENTS
    rows = _lib.option_rows(struct)
    check_tensors(**{rows[field].caller.decode(): value for field, value in options.items()
                     if rows[field].kind in (_lib.TENSOR, _lib.VECTOR)})
    return _lib.op_arguments(struct, options)


def _plain(learnable_sink, out, q_descale, k_descale, v_descale, descale_block_q,
           descale_block_kv):
    """Whether a forward gives none of what only hfa::fwd takes (sinks, out=, FP8 descales):
    then, when it wants no LSE and no sm_margin either, the plain op runs it."""
    return (NATIVE and learnable_sink is None and out is None and q_descale is None
            and k_descale is None and v_descale is None and not descale_block_q
            and not descale_block_kv)


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, deterministic=False, return_attn_probs=False,
                    learnable_sink=None, out=None, q_descale=None, k_descale=None,
                    v_descale=None, descale_block_q=0, descale_block_kv=0, sm_margin=0,
                    options=None):
    wl, wr = window_size  # ints: hfa.flash_attn_func normalized it (hfa._args.window)
    if not (return_attn_probs or sm_margin or options) and _plain(learnable_sink, out, q_descale,
                                                      k_descale, v_descale, descale_block_q,
                                                      descale_block_kv):
        if type(k) is not Tensor or type(v) is not Tensor:  # the rest are None (_plain)
            check_tensors(k=k, v=v)
        # The scalars as hfa.flash_attn_func normalized them (bools, a float softcap).
        return _attention(q, k, v, softmax_scale, causal, wl, wr, softcap, deterministic)
    check_tensors(k=k, v=v, learnable_sink=learnable_sink, out=out, q_descale=q_descale,
                  k_descale=k_descale, v_descale=v_descale)
    out, lse = _forward(q, k, v, out, None, None, 0, 0, softmax_scale, bool(causal), wl, wr,
                        float(softcap), bool(deterministic), _sinks(learnable_sink), None, None,
                        _fp8(q_descale, k_descale, v_descale, descale_block_q,
                             descale_block_kv), int(sm_margin), _option_arguments(options))
    return (out, lse) if return_attn_probs else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           deterministic=False, return_attn_probs=False, seqused_q=None,
                           seqused_k=None, learnable_sink=None, out=None, q_descale=None,
                           k_descale=None, v_descale=None, descale_block_q=0,
                           descale_block_kv=0, sm_margin=0, options=None):
    wl, wr = window_size  # normalized by hfa.flash_attn_varlen_func
    if (not (return_attn_probs or sm_margin or options) and seqused_q is None and seqused_k is None
            and _plain(learnable_sink, out, q_descale, k_descale, v_descale, descale_block_q,
                       descale_block_kv)):
        if not (type(k) is Tensor and type(v) is Tensor and type(cu_seqlens_q) is Tensor
                and type(cu_seqlens_k) is Tensor):  # the rest are None (_plain)
            check_tensors(k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
        return _varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                 _as_int(max_seqlen_q, "max_seqlen_q"),
                                 _as_int(max_seqlen_k, "max_seqlen_k"), softmax_scale, causal,
                                 wl, wr, softcap, deterministic)
    check_tensors(k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                  seqused_q=seqused_q, seqused_k=seqused_k, learnable_sink=learnable_sink,
                  out=out, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    out, lse = _forward(q, k, v, out, cu_seqlens_q, cu_seqlens_k,
                        _as_int(max_seqlen_q, "max_seqlen_q"),
                        _as_int(max_seqlen_k, "max_seqlen_k"), softmax_scale, bool(causal), wl,
                        wr, float(softcap), bool(deterministic), _sinks(learnable_sink),
                        seqused_q, seqused_k,
                        _fp8(q_descale, k_descale, v_descale, descale_block_q,
                             descale_block_kv), int(sm_margin), _option_arguments(options))
    return (out, lse) if return_attn_probs else out


def _max_lengths(cu_seqlens_q, max_seqlen_q, max_seqlen_k):
    if cu_seqlens_q is None:
        return 0, 0
    return _as_int(max_seqlen_q, "max_seqlen_q"), _as_int(max_seqlen_k, "max_seqlen_k")


def flash_attn_backward(dout, q, k, v, out, lse, softmax_scale=None, causal=False,
                        window_size=(-1, -1), softcap=0.0, deterministic=False,
                        cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                        max_seqlen_k=None, learnable_sink=None, seqused_q=None,
                        seqused_k=None, sm_margin=0, softmax_d=None, options=None):
    check_tensors(dout=dout, k=k, v=v, out=out, lse=lse, cu_seqlens_q=cu_seqlens_q,
                  cu_seqlens_k=cu_seqlens_k, learnable_sink=learnable_sink, seqused_q=seqused_q,
                  seqused_k=seqused_k, softmax_d=softmax_d)
    wl, wr = _window(window_size)
    mq, mk = _max_lengths(cu_seqlens_q, max_seqlen_q, max_seqlen_k)
    sinks = _sinks(learnable_sink)
    vectors, tensors, scalars = _option_arguments(options)
    arguments = (cu_seqlens_q, cu_seqlens_k, mq, mk, softmax_scale, bool(causal), wl, wr,
                 float(softcap), bool(deterministic), sinks, seqused_q, seqused_k,
                 int(sm_margin))
    if softmax_d is None:
        dq, dk, dv, dsinks = _bwd(dout, q, k, v, out, lse, *arguments, vectors, **tensors,
                                  scalars=scalars)
    else:  # no op takes a given D: the C ABI directly
        from . import _torch_calls
        dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
        dsinks = torch.empty(dsinks_shape(sinks), dtype=torch.float32, device=q.device)
        _torch_calls.backward_into(dout, q, k, v, out, lse, dq, dk, dv, dsinks, *arguments,
                                   softmax_d=softmax_d, vectors=vectors, tensors=tensors,
                                   scalars=scalars)
    return (dq, dk, dv) if sinks is None else (dq, dk, dv, dsinks)


def flash_attn_accumulate(q, k, v, out, lse, softmax_scale, causal, window_size, softcap,
                          cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, learnable_sink,
                          seqused_q, seqused_k, sm_margin, options=None):
    """hfa.flash_attn_accumulate on torch tensors: the C ABI directly (an in-place merge is no
    op's, and not differentiable)."""
    check_tensors(k=k, v=v, out=out, lse=lse, cu_seqlens_q=cu_seqlens_q,
                  cu_seqlens_k=cu_seqlens_k, learnable_sink=learnable_sink, seqused_q=seqused_q,
                  seqused_k=seqused_k)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                       for t in (q, k, v, learnable_sink)):
        raise ValueError("flash_attn_accumulate is not differentiable; call it under "
                         "torch.no_grad()")
    from . import _torch_calls
    wl, wr = window_size  # normalized by hfa.flash_attn_accumulate
    mq, mk = _max_lengths(cu_seqlens_q, max_seqlen_q, max_seqlen_k)
    vectors, tensors, scalars = _option_arguments(options)
    _torch_calls.forward_into(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, mq, mk,
                              softmax_scale, bool(causal), wl, wr, float(softcap),
                              _sinks(learnable_sink), seqused_q, seqused_k,
                              sm_margin=int(sm_margin), accumulate=True, vectors=vectors,
                              tensors=tensors, scalars=scalars)
    return out, lse


def kvcache_attention(q, k_cache, v_cache, cache_seqlens, page_table, softmax_scale, causal,
                      window_size, softcap, num_splits):
    """out of a plain call of flash_attn_with_kvcache (a 16-bit cache of q's dtype, nothing
    appended, no LSE wanted) through the native hfa::kvcache_attention."""
    wl, wr = window_size  # normalized by hfa.flash_attn_with_kvcache
    return _kvcache_attention(q, k_cache, v_cache, cache_seqlens, page_table, softmax_scale,
                              bool(causal), wl, wr, float(softcap), int(num_splits))


def forward_kvcache(q, k_cache, v_cache, out, cache_code, scale_code, cache_seqlens, page_table,
                    k_scale, v_scale, k_global_scale, v_global_scale, k, v, rotary_cos,
                    rotary_sin, rotary_interleaved, cu_seqlens_q, max_seqlen_q,
                    cu_seqlens_k_new, softmax_scale, causal, window_size, softcap, num_splits,
                    split_size, sm_margin=0, options=None):
    """(out, lse) through the native hfa::fwd_kvcache ops (python/hfa/_kvcache.py has already
    resolved the cache format and the lengths' defaults; hfa.flash_attn_with_kvcache normalized
    the scalars: bools, ints, a (left, right) window)."""
    wl, wr = window_size
    args = (q, k_cache, v_cache, cache_code, scale_code, cache_seqlens, page_table, k_scale,
            v_scale, k_global_scale, v_global_scale, k, v, rotary_cos, rotary_sin,
            rotary_interleaved, cu_seqlens_q, max_seqlen_q, cu_seqlens_k_new, softmax_scale,
            causal, wl, wr, softcap, num_splits, split_size, sm_margin)
    if not options:  # the usual call: the op's later arguments keep their defaults (None)
        if out is None:
            return _fwd_kvcache(*args)
        return out, _fwd_kvcache_into(*args, out=out)
    vectors, tensors, scalars = _option_arguments(options, _lib.KVCacheOptions)
    if out is None:
        return _fwd_kvcache(*args, vectors, **tensors, scalars=scalars)
    return out, _fwd_kvcache_into(*args, vectors, **tensors, scalars=scalars, out=out)
