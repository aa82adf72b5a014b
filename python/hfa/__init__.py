"""hfa: exact attention, softmax(Q·Kᵀ·scale)·V, for Hopper GPUs and CPUs.

FlashAttention-3's Python entry points over hfa's C ABI (ctypes; nothing is built against
PyTorch). Inputs may be torch tensors (CPU or CUDA; autograd and torch.compile work; float8
e4m3 with FlashAttention-3's descales for the forward) or numpy arrays (float32/float16, on the
CPU). Layouts follow FlashAttention: q (batch, seqlen_q, heads_q,
headdim), k/v (batch, seqlen_k, heads_kv, headdim); varlen tensors are (total_tokens, heads,
headdim) with int32 cu_seqlens (batch + 1). LSE is float32 (batch, heads_q, seqlen_q), or
(heads_q, total_q) for varlen.

Importing hfa needs neither torch nor numpy, nor even the library: libhfa is loaded on first
use (HFA_LIBRARY, then next to this package, then the checkout's build/*/src/).
"""

import re
import sys

from . import _args, _block_mask, _kvcache, _lib
from ._lib import (HfaError, HfaInvalidArgument, HfaNotSupported, candidate_paths,
                   cuda_device_count, library_path, version)
from ._merge import merge_partials
from ._mla import flash_mla_with_kvcache, get_mla_metadata
from ._quant import dequantize_kv, hadamard_signs, quantize_fp8, quantize_kv
from ._version import __version__  # noqa: F401  (hfa.__version__)

__all__ = [
    "flash_attn_func", "flash_attn_varlen_func", "flash_attn_backward", "flash_attn_with_kvcache",
    "flash_attn_accumulate", "flash_mla_with_kvcache", "get_mla_metadata",
    "quantize_kv", "dequantize_kv", "quantize_fp8", "hadamard_signs", "merge_partials",
    "HfaError", "HfaInvalidArgument", "HfaNotSupported",
    "version", "cuda_device_count", "library_path", "candidate_paths",
]


_torch_frontend = None  # hfa._torch once loaded (it imports torch and registers the ops)


def _load_torch_frontend():
    global _torch_frontend
    if _torch_frontend is None:
        from . import _torch
        _torch_frontend = _torch
    return _torch_frontend




def _no_descales_for_numpy(q_descale, k_descale, v_descale, descale_block_q,
                           descale_block_kv):
    """numpy has no float8 dtype, so a numpy call has no FP8 inputs to descale."""
    given = [name for name, value in (("q_descale", q_descale), ("k_descale", k_descale),
                                      ("v_descale", v_descale))
             if value is not None]
    given += [name for name, rows in (("descale_block_q", descale_block_q),
                                      ("descale_block_kv", descale_block_kv)) if rows]
    if given:
        raise ValueError(f"{given[0]}: FP8 inputs are torch.float8_e4m3fn tensors (numpy has "
                         f"no fp8 dtype)")


def _rename_arguments(error, names):
    """Rewrites `error`'s message to name arguments as the caller passed them: `names` maps hfa's
    name for an argument (the C API's, or a layer's below) to the caller's, whole words only."""
    if error.args and isinstance(error.args[0], str):
        pattern = r"\b(" + "|".join(map(re.escape, names)) + r")\b"
        error.args = (re.sub(pattern, lambda m: names[m.group(1)], error.args[0]),) + error.args[1:]


def _table_names(page_table):
    """The block table's name in errors: FlashAttention-3's page_table or FlashAttention-2's
    block_table, whichever the caller passed (the layers below call it one or the other)."""
    passed = "page_table" if page_table is not None else "block_table"
    return {"page_table": passed, "block_table": passed}


def _all_none(*arguments):
    for a in arguments:
        if a is not None:
            return False
    return True


def _frontend(q):
    """hfa._torch for torch tensors, None for numpy arrays.

    Written for torch.compile: once hfa._torch is loaded (at import when torch was imported
    first, else on the first torch call), the first test is isinstance(q, torch.Tensor), which
    Dynamo folds to a constant; no sys.modules lookups or imports on that path."""
    if _torch_frontend is not None and isinstance(q, _torch_frontend.Tensor):
        return _torch_frontend
    module = type(q).__module__
    if module == "numpy":
        return None
    if module.split(".")[0] == "torch":
        return _load_torch_frontend()
    # Tensor subclasses defined outside torch (and numpy subclasses defined elsewhere).
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(q, torch.Tensor):
        return _load_torch_frontend()
    np = sys.modules.get("numpy")
    if np is not None and isinstance(q, np.ndarray):
        return None
    raise TypeError(f"q: expected a torch.Tensor or a numpy.ndarray, got {type(q).__name__}")


def _attention_options(options: dict, fe, call: int):
    """The keyword options of an attention call (hfa_options' rows by their caller names) as
    {field: value} (hfa._args.options), block_mask= replaced by the rows it stands for, as
    torch tensors or numpy arrays for the front end fe (hfa._block_mask). Callers skip the
    call when no option is given (the usual call)."""
    if "block_mask" in options:
        options = dict(options)
        block_mask = options.pop("block_mask")
        given = {} if block_mask is None else _block_mask.rows(block_mask, as_numpy=fe is None)
        for name in given:
            if name in options:
                raise TypeError(f"{name}: given twice (as a keyword and in block_mask)")
        options.update(given)
    return _args.options(options, _lib.Options, call)


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, deterministic=False, return_attn_probs=False,
                    learnable_sink=None, out=None, q_descale=None, k_descale=None,
                    v_descale=None, descale_block_q=0, descale_block_kv=0, sm_margin=0,
                    **options):
    """Attention over fixed-length batches (FlashAttention-3's signature).

    softmax_scale: default 1/sqrt(headdim). causal and window_size=(left, right) are aligned
    to the bottom-right corner when seqlen_q != seqlen_k; -1 = unbounded. softcap > 0 applies
    softcap·tanh(s/softcap) to the scores. deterministic: reproducible backward.
    learnable_sink (FlashAttention-4's name): attention sinks, one logit per query head
    (heads_q,), that join each row's softmax denominator (gpt-oss); the LSE includes them, and
    with torch they get a gradient.
    out: a caller's buffer to write the result into (vLLM's out=; not differentiable).
    FP8 (forward only, as FlashAttention-3's): q, k, v torch.float8_e4m3fn, the value of a code
    being code · descale. q_descale / k_descale / v_descale (float32, optional: None = 1) are
    (1,) per tensor, (batch, heads_kv) as FlashAttention-3's (q's also (batch, heads_q)), or
    (batch, num_blocks, heads) per block of descale_block_q (q) / descale_block_kv (k, v)
    rows; any strides (expanded views are read in place). The output is bfloat16 (out= may be
    bfloat16 or float16); a backward raises NotImplementedError ("FP8 backward is not
    supported"). On a GPU descale_block_kv is a multiple of 128.
    sm_margin (FlashAttention-3's): SMs the GPU forward leaves free for kernels that run beside
    it (NCCL's, in context parallelism), >= 0 and below the SM count; its backward checks it
    too but its grid is not limited by it (hfa.h); the CPU ignores it.
    **options: every other row of the options' description (include/hfa/options.def) this call
    reads, by its name (hfa._lib.caller_rows), checked as the named arguments are.
    block_mask= (CPU): block-sparse attention from torch's FlexAttention BlockMask (its partial
    blocks' bits evaluated from its mask_mod once, cached on it: under torch.compile, call once
    eagerly first) or a mapping of the kv_num_blocks ... sparse_block_kv rows' values
    (hfa._block_mask); with torch tensors through the ops, autograd included.
    Returns out, or (out, lse) when return_attn_probs (the LSE, not the probabilities, as FA3).
    """
    # The scalar arguments checked and normalized (hfa._args): this is the per-call path, and
    # every microsecond of it shows (bench/overhead_parts.py).
    window_size, softmax_scale, softcap, causal, sm_margin = _args.attention_scalars(
        window_size, softmax_scale, softcap, causal, sm_margin)
    deterministic = _args.flag(deterministic, "deterministic")
    return_attn_probs = _args.flag(return_attn_probs, "return_attn_probs")
    descale_block_q, descale_block_kv = _args.descale_blocks(descale_block_q, descale_block_kv)
    fe = _frontend(q)
    options = _attention_options(options, fe, _lib.CALL_FORWARD) if options else None
    if fe is not None:
        return fe.flash_attn_func(q, k, v, softmax_scale, causal, window_size, softcap,
                                  deterministic, return_attn_probs, learnable_sink, out,
                                  q_descale, k_descale, v_descale, descale_block_q,
                                  descale_block_kv, sm_margin, options)
    _no_descales_for_numpy(q_descale, k_descale, v_descale, descale_block_q, descale_block_kv)
    from . import _numpy
    _numpy.check_out(out)
    result, lse = _kvcache.into(out, *_numpy.forward(
        q, k, v, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
        softcap=softcap, learnable_sink=learnable_sink, sm_margin=sm_margin, options=options))
    return (result, lse) if return_attn_probs else result


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           deterministic=False, return_attn_probs=False, seqused_q=None,
                           seqused_k=None, learnable_sink=None, out=None, block_table=None,
                           page_table=None, num_splits=0, q_descale=None, k_descale=None,
                           v_descale=None, s_aux=None, descale_block_q=0, descale_block_kv=0,
                           sm_margin=0, **options):
    """Attention over variable-length sequences packed as (total_tokens, heads, headdim);
    sequence b is rows cu_seqlens[b]:cu_seqlens[b+1]. seqused_q / seqused_k (int32, (batch,),
    as in FlashAttention-3): only the first seqused[b] rows / keys of sequence b are used; the
    out rows beyond seqused_q[b] come back 0 and their LSE -inf. s_aux is learnable_sink's
    other name (transformers passes it). out: a caller's buffer (not differentiable).
    Paged (FlashAttention-3's call from vLLM and SGLang): with block_table (or page_table), k
    and v are a paged KV cache (num_pages, page_size, heads_kv, headdim), seqused_k (required)
    the cache tokens of each sequence, cu_seqlens_k unused; this runs flash_attn_with_kvcache
    with varlen queries (num_splits and the descales as there). Otherwise as flash_attn_func,
    FP8 inputs and their descales included (a per-block descale counts the blocks of each
    sequence from its first row), and sm_margin. block_mask= is the packed tokens' mask, as
    FlexAttention users write it for documents packed into one sequence: batch 1, blocks
    counted from token 0, ANDed with the sequences' bounds."""
    window_size, softmax_scale, softcap, causal, sm_margin = _args.attention_scalars(
        window_size, softmax_scale, softcap, causal, sm_margin)
    deterministic = _args.flag(deterministic, "deterministic")
    return_attn_probs = _args.flag(return_attn_probs, "return_attn_probs")
    max_seqlen_q, max_seqlen_k, num_splits = _args.varlen_integers(max_seqlen_q, max_seqlen_k,
                                                                   num_splits)
    descale_block_q, descale_block_kv = _args.descale_blocks(descale_block_q, descale_block_kv)
    if s_aux is not None:
        if learnable_sink is not None:
            raise ValueError("s_aux, learnable_sink: give one (they are the same argument)")
        learnable_sink = s_aux
    if block_table is not None or page_table is not None:
        if (learnable_sink is not None or seqused_q is not None or deterministic
                or descale_block_q or descale_block_kv):
            raise NotImplementedError("flash_attn_varlen_func: with a block_table, sinks, "
                                      "seqused_q, deterministic and per-block descales are not "
                                      "supported yet")
        if seqused_k is None:
            raise ValueError("seqused_k: required with a block_table (the tokens in each "
                             "sequence's pages)")
        try:
            return flash_attn_with_kvcache(
                q, k, v, cache_seqlens=seqused_k, page_table=page_table, block_table=block_table,
                cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q, softmax_scale=softmax_scale,
                causal=causal, window_size=window_size, softcap=softcap, num_splits=num_splits,
                q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                sm_margin=sm_margin, return_softmax_lse=return_attn_probs, out=out, **options)
        except (ValueError, TypeError, NotImplementedError) as e:
            # Named as this call's caller passed them, not as flash_attn_with_kvcache's.
            _rename_arguments(e, {"cache_seqlens": "seqused_k", "k_cache": "k", "v_cache": "v"})
            raise
    fp8 = (q_descale, k_descale, v_descale, descale_block_q, descale_block_kv)
    fe = _frontend(q)
    options = _attention_options(options, fe, _lib.CALL_FORWARD) if options else None
    if fe is not None:
        return fe.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                         max_seqlen_k, softmax_scale, causal, window_size,
                                         softcap, deterministic, return_attn_probs, seqused_q,
                                         seqused_k, learnable_sink, out, *fp8, sm_margin,
                                         options)
    _no_descales_for_numpy(*fp8)
    from . import _numpy
    _numpy.check_out(out)
    result, lse = _kvcache.into(out, *_numpy.forward(
        q, k, v, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
        softcap=softcap, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, learnable_sink=learnable_sink,
        seqused_q=seqused_q, seqused_k=seqused_k, sm_margin=sm_margin, options=options))
    return (result, lse) if return_attn_probs else result


def flash_attn_backward(dout, q, k, v, out, lse, softmax_scale=None, causal=False,
                        window_size=(-1, -1), softcap=0.0, deterministic=False,
                        cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                        max_seqlen_k=None, learnable_sink=None, seqused_q=None,
                        seqused_k=None, sm_margin=0, softmax_d=None, **options):
    """(dq, dk, dv) for dout, given the forward's out and lse and the same options; with
    learnable_sink, (dq, dk, dv, dsink). Gradient rows beyond seqused_q/k are 0.
    For numpy arrays (no autograd there) and for torch users who call it directly.
    sm_margin: checked as the forward's; the GPU backward's grid is not limited by it.
    softmax_d (float32, laid out as lse): D = rowsum(dout * out) computed once by the caller,
    e.g. for the steps of a context-parallel ring, which share the final out; out is then not
    read. lse may be a slice of a longer one (any strides with a unit last one).
    block_mask=: the forward's (flash_attn_func), its rows cached on a BlockMask."""
    window_size, softmax_scale, softcap, causal, sm_margin = _args.attention_scalars(
        window_size, softmax_scale, softcap, causal, sm_margin)
    deterministic = _args.flag(deterministic, "deterministic")
    max_seqlen_q = _args.integer(max_seqlen_q, "max_seqlen_q", none_ok=True)
    max_seqlen_k = _args.integer(max_seqlen_k, "max_seqlen_k", none_ok=True)
    fe = _frontend(q)
    options = _attention_options(options, fe, _lib.CALL_BACKWARD) if options else None
    if fe is not None:
        return fe.flash_attn_backward(dout, q, k, v, out, lse, softmax_scale, causal,
                                      window_size, softcap, deterministic, cu_seqlens_q,
                                      cu_seqlens_k, max_seqlen_q, max_seqlen_k, learnable_sink,
                                      seqused_q, seqused_k, sm_margin=sm_margin,
                                      softmax_d=softmax_d, options=options)
    from . import _numpy
    return _numpy.backward(dout, q, k, v, out, lse, softmax_scale=softmax_scale, causal=causal,
                           window_size=window_size, softcap=softcap, deterministic=deterministic,
                           cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                           max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                           learnable_sink=learnable_sink, seqused_q=seqused_q,
                           seqused_k=seqused_k, sm_margin=sm_margin, softmax_d=softmax_d,
                           options=options)


def flash_attn_accumulate(q, k, v, out, lse, softmax_scale=None, causal=False,
                          window_size=(-1, -1), softcap=0.0, cu_seqlens_q=None,
                          cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                          learnable_sink=None, seqused_q=None, seqused_k=None, sm_margin=0,
                          **options):
    """Attention of q over these k, v merged into a running result (out, lse), in place:
    attention split over keys (a context-parallel ring's steps, a KV cache split across GPUs)
    without a partial output or a separate merge. out is float32 ((batch, seqlen_q, heads_q,
    headdim_v), or (total_q, heads_q, headdim_v) with cu_seqlens) and lse float32 as the
    forward's, both any strides with a unit last one (slices of larger ones work). Afterwards
    lse = log(exp(lse_before) + exp(lse_call)) and out the two results weighted by their
    shares (hfa.merge_partials' rule, in fp32). A row whose lse is -inf has no result yet and
    its out is not read, so a series may start from torch.empty / np.empty out and lse = -inf.
    A row this call's keys do not reach keeps its values; rows beyond seqused_q are not touched.
    Masks are bottom-right aligned on this call's keys, as in any call: give each part the
    window that places it (hfa.distributed does). learnable_sink: pass it to one call of a
    series. Not differentiable (torch: call under torch.no_grad()). On a GPU: f16/bf16 inputs
    with no softcap. Returns (out, lse)."""
    window_size, softmax_scale, softcap, causal, sm_margin = _args.attention_scalars(
        window_size, softmax_scale, softcap, causal, sm_margin)
    max_seqlen_q = _args.integer(max_seqlen_q, "max_seqlen_q", none_ok=True)
    max_seqlen_k = _args.integer(max_seqlen_k, "max_seqlen_k", none_ok=True)
    fe = _frontend(q)
    options = _attention_options(options, fe, _lib.CALL_FORWARD) if options else None
    if fe is not None:
        return fe.flash_attn_accumulate(q, k, v, out, lse, softmax_scale, causal, window_size,
                                        softcap, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                        max_seqlen_k, learnable_sink, seqused_q, seqused_k,
                                        sm_margin, options)
    from . import _numpy
    return _numpy.forward(q, k, v, softmax_scale=softmax_scale, causal=causal,
                          window_size=window_size, softcap=softcap, cu_seqlens_q=cu_seqlens_q,
                          cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                          max_seqlen_k=max_seqlen_k, out=out, lse=lse,
                          learnable_sink=learnable_sink, seqused_q=seqused_q,
                          seqused_k=seqused_k, sm_margin=sm_margin, accumulate=True,
                          options=options)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, page_table=None, cu_seqlens_q=None,
                            cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                            rotary_interleaved=True, scheduler_metadata=None, num_splits=0,
                            pack_gqa=None, sm_margin=0, return_softmax_lse=False, *,
                            block_table=None, k_scale=None, v_scale=None, k_global_scale=None,
                            v_global_scale=None, split_size=0, out=None, **options):
    """Attention of a few new query tokens over a KV cache (FlashAttention-3's signature).

    q (batch, seqlen_q, heads_q, headdim); k_cache / v_cache paged (num_pages, page_size,
    heads_kv, headdim) with page_table (int32, (batch, max_pages); FlashAttention-2's name
    block_table works too), or contiguous (batch, max_seqlen_cache, heads_kv, headdim).
    cache_seqlens: int32 (batch,) or an int: the cache tokens each sequence attends to (default
    the whole cache). causal / window_size are bottom-right aligned: query i sees cache key
    j <= cache_seqlens[b] - seqlen_q + i. num_splits: split-KV chunks (0 = auto); split_size
    (hfa's keyword) instead: keys per chunk at fixed boundaries, so that a sequence's result
    does not depend on the rest of the batch.
    Varlen queries (chunked prefill, speculative and plain decode in one call): q (total_q,
    heads_q, headdim) with cu_seqlens_q (int32, (batch + 1,)) delimiting each sequence's rows,
    bottom-right aligned per sequence; max_seqlen_q bounds a sequence's rows (derived from
    cu_seqlens_q when None: a device-to-host read for CUDA tensors); out is (total_q, heads_q,
    headdim) and lse (heads_q, total_q).
    Quantized caches (hfa's own keywords; see hfa._kvcache for how the dtypes pick a format):
    FP8 E4M3 with float32 k_scale / v_scale per kv-head or per (token, kv-head); NVFP4 / MXFP4
    packed two per byte with block scales (and k_global_scale / v_global_scale for NVFP4).
    k / v (batch, seqlen_new, heads_kv, headdim): new tokens appended in place at
    cache_seqlens[b] + i before the attention (which then covers cache_seqlens + seqlen_new keys;
    cache_seqlens is not updated), with rotary_cos / rotary_sin (seqlen_ro, rotary_dim / 2)
    applied to them and to q (rotary_interleaved: GPT-J pairs, else GPT-NeoX halves; query row i
    at cache_seqlens[b] + i when causal or windowed, else at cache_seqlens[b], i counting the
    sequence's own rows with cu_seqlens_q); a GPU writes the bytes the CPU writes. With
    cu_seqlens_k_new (int32, (batch + 1,)) k / v are packed (total_k_new, heads_kv, headdim):
    sequence b appends rows cu_seqlens_k_new[b] .. cu_seqlens_k_new[b + 1] (any number, 0
    included) and attends to cache_seqlens[b] + that many keys; with fixed-length or varlen q.
    Descales (FlashAttention-3's, as vLLM passes them: (num_seqs, heads_kv), stride 0 over the
    sequences): k_descale / v_descale of a float8 e4m3 cache are its per-kv-head scales (one row,
    broadcast); descales of 16-bit tensors are ignored, as FlashAttention-3 does.
    out: a caller's buffer to write the result into (vLLM's out=).
    Not yet: cache_batch_idx, cache_leftpad, rotary_seqlens, per-sequence descales, fp8 q; they
    raise NotImplementedError. pack_gqa is accepted and ignored (speed only). sm_margin: SMs to
    leave free for kernels that run beside the call (NCCL's); the GPU plans its automatic split
    count for the SMs left (its grid is not persistent); >= 0 and below the SM count.
    CUDA tensors run on a Hopper GPU with headdim 64, 128 or 256 (the same for k and v); others
    raise NotImplementedError.
    Returns out, or (out, lse) with return_softmax_lse (lse float32 (batch, heads_q, seqlen_q),
    or (heads_q, total_q) for varlen q).
    """
    window_size, softmax_scale, softcap, causal, sm_margin = _args.attention_scalars(
        window_size, softmax_scale, softcap, causal, sm_margin)
    rotary_interleaved, return_softmax_lse, num_splits, split_size, max_seqlen_q = (
        _args.kvcache_scalars(rotary_interleaved, return_softmax_lse, num_splits, split_size,
                              max_seqlen_q))
    fe = _frontend(q)
    if fe is None or type(cache_seqlens) is not fe.Tensor:  # a tensor of lengths is taken as is
        cache_seqlens = _args.lengths(cache_seqlens, "cache_seqlens")
    options = _args.options(options, _lib.KVCacheOptions, _lib.CALL_KVCACHE) if options else None
    if (fe is not None and fe.NATIVE and k is None and v is None
            and not (return_softmax_lse or attention_chunk or split_size or sm_margin or options)
            and _all_none(qv, rotary_cos, rotary_sin, cache_batch_idx, cache_leftpad,
                          cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q, rotary_seqlens,
                          q_descale, k_descale, v_descale, scheduler_metadata, k_scale, v_scale,
                          k_global_scale, v_global_scale, out)
            and (page_table is None or block_table is None)
            and all(isinstance(t, fe.Tensor) for t in (cache_seqlens, k_cache, v_cache))
            and (page_table is None or isinstance(page_table, fe.Tensor))
            and k_cache.dtype == q.dtype):
        # The plain call: a 16-bit cache read in place, out alone (hfa::kvcache_attention).
        try:
            return fe.kvcache_attention(q, k_cache, v_cache, cache_seqlens,
                                        page_table if page_table is not None else block_table,
                                        softmax_scale, causal, window_size, softcap, num_splits)
        except (ValueError, TypeError, NotImplementedError) as e:
            _rename_arguments(e, _table_names(page_table))
            raise
    _kvcache.check_not_yet(attention_chunk, qv, cache_batch_idx, cache_leftpad, rotary_seqlens,
                           scheduler_metadata)
    k_scale, v_scale = _kvcache.scales_from_descales(q, k_cache, k_scale, v_scale, q_descale,
                                                     k_descale, v_descale)
    if block_table is not None and page_table is not None:
        raise ValueError("page_table, block_table: give one (they are the same argument)")
    forward = _kvcache.numpy_forward if fe is None else _kvcache.torch_forward
    try:
        # Positional, in the front ends' order (hfa._kvcache says why).
        out, lse = forward(q, k_cache, v_cache, out, cache_seqlens,
                           page_table if page_table is not None else block_table, k_scale,
                           v_scale, k_global_scale, v_global_scale, k, v, rotary_cos, rotary_sin,
                           rotary_interleaved, cu_seqlens_q, max_seqlen_q, cu_seqlens_k_new,
                           softmax_scale, causal, window_size, softcap, num_splits, split_size,
                           sm_margin, options)
    except (ValueError, TypeError, NotImplementedError) as e:
        _rename_arguments(e, _table_names(page_table))
        raise
    return (out, lse) if return_softmax_lse else out


# When torch is already loaded, register hfa::fwd / hfa::bwd now rather than on the first call,
# so that a first call made under torch.compile does not have to trace an import.
if "torch" in sys.modules:
    try:
        _load_torch_frontend()
    except ImportError:  # e.g. a torch too old for custom_op: the first torch call will say so
        pass
