"""quantize_kv / dequantize_kv over hfa_quantize_kv / hfa_dequantize_kv (hfa.h), for numpy
arrays and torch tensors (CPU and CUDA).

The codes and scales are the bytes flash_attn_with_kvcache's append (k= / v=) writes for the
same values, in the dtypes flash_attn_with_kvcache reads (see hfa._kvcache):
  format         codes                          scale
  fp8_per_head   (..., heads_kv, d) e4m3        (heads_kv,) float32, given (calibrated)
  fp8_per_token  (..., heads_kv, d) e4m3        (..., heads_kv) float32, computed
  nvfp4          (..., heads_kv, d / 2) uint8   (..., heads_kv, d / 16) uint8 (e4m3), computed,
                                                with global_scale (1,) float32 given
  mxfp4          (..., heads_kv, d / 2) uint8   (..., heads_kv, d / 32) uint8 (ue8m0), computed
  fp8_mla        (..., heads_kv, 656) uint8     None: FlashMLA's records hold their scales
e4m3 codes are uint8 for numpy, torch.float8_e4m3fn for torch (uint8 where torch lacks it).
fp8_mla takes rows of d = 576 (MLA's [latent 512 ; rotary 64]) and writes FlashMLA's FP8 cache
token per row (flash_mla_with_kvcache's is_fp8_kvcache=True cache; hfa.flash_mla_with_kvcache
reads it): 512 e4m3 codes, 4 float32 scales (the smallest power of two >= max(amax / 448, 1e-4)
per 128 values), 64 bf16 rotary values. CPU only for now.

quantize_fp8 / hadamard_signs over hfa_quantize_fp8 / hfa_hadamard_signs: q, k, v as e4m3 codes
with float32 descales for the FP8 forward (flash_attn_func's q_descale= ... ), torch only.
"""

from __future__ import annotations

import ctypes

from . import _args, _lib

_FP4 = {"nvfp4": 16, "mxfp4": 32}  # values per block scale
_SCALE_CODES = {"fp8_per_head": _lib.F32, "fp8_per_token": _lib.F32, "nvfp4": _lib.E4M3,
                "mxfp4": _lib.UE8M0}
_MLA_RECORD = 656  # bytes of an fp8_mla record (the library checks the rows are 576 wide)


def _format(format):
    if not isinstance(format, str) or format not in _lib.KV_FORMATS:
        raise ValueError(f"format: expected one of {', '.join(_lib.KV_FORMATS)}, got {format!r}")
    return format


def _shapes(format, shape):
    """(codes shape, scale shape) for values of `shape`; the scale's is None for fp8_per_head
    (an input). A headdim the format cannot take is left to the library to name."""
    rows, d = tuple(shape[:-1]), int(shape[-1])
    if format == "fp8_mla":
        return rows + (_MLA_RECORD,), None
    if format in _FP4:
        return rows + (d // 2,), rows + (d // _FP4[format],)
    return rows + (d,), (None if format == "fp8_per_head" else rows)


def _check_rank(a, name):
    if not 2 <= a.ndim <= 4:
        raise ValueError(f"{name}: expected rank 2 to 4 ([pages,] [page_size,] heads_kv, headdim), "
                         f"got shape {tuple(a.shape)}")


def _check_global(format, global_scale):
    if format == "nvfp4" and global_scale is None:
        raise ValueError("global_scale: nvfp4 needs it (float32, shape (1,)): the cache's "
                         "k_global_scale / v_global_scale, e.g. amax / (448 * 6)")
    if format != "nvfp4" and global_scale is not None:
        raise ValueError(f"global_scale: only nvfp4 takes one, not {format}")


def _check_scale_input(format, scale, name="scale"):
    if format == "fp8_per_head" and scale is None:
        raise ValueError(f"{name}: fp8_per_head takes the cache's calibrated scale per kv-head "
                         "(float32, (heads_kv,)), e.g. amax over the tokens / 448; "
                         "fp8_per_token computes one per row")
    if format != "fp8_per_head" and scale is not None:
        raise ValueError(f"{name}: only fp8_per_head takes a scale; {format} computes its own")


def _check_scale_output(format, scale):
    """dequantize_kv's scale: fp8_mla's are inside its records, the others' are required."""
    if format == "fp8_mla" and scale is not None:
        raise ValueError("scale: must be None for fp8_mla (its scales are inside its records)")
    if format != "fp8_mla" and scale is None:
        raise ValueError("scale: is None (dequantize_kv needs the codes' scales)")


def quantize_kv(x, format, *, scale=None, global_scale=None):
    """(codes, scale) of x (..., heads_kv, headdim) in a cache format; see the module doc."""
    format = _format(format)
    _check_scale_input(format, scale)
    _check_global(format, global_scale)
    fe = _torch_side() if _is_torch(x) else _NumpySide()
    x = fe.values(x, "x")
    _check_rank(x, "x")
    codes_shape, scale_shape = _shapes(format, x.shape)
    codes = fe.empty(codes_shape, "codes", format, x)
    written = scale_shape is not None and format != "fp8_mla"
    if written:
        scale = fe.empty(scale_shape, "scale", format, x)
    keep = []
    options = _lib.make_quantize_options(_lib.KV_FORMATS[format],
                                         fe.view(global_scale, "global_scale", keep),
                                         fe.stream(x))
    _lib.quantize_kv(fe.view(x, "x", keep),
                     fe.view(codes, "codes", keep, _code(format), written=True),
                     fe.view(scale, "scale", keep, _SCALE_CODES.get(format), written=written),
                     options)
    return codes, scale


def dequantize_kv(codes, scale, format, *, global_scale=None, dtype=None):
    """The values the decode reads from codes and scale (quantize_kv's layouts), as float32
    (numpy, torch) or the given dtype (numpy float32 / float16; torch float32, float16,
    bfloat16)."""
    format = _format(format)
    _check_global(format, global_scale)
    fe = _torch_side() if _is_torch(codes) else _NumpySide()
    _check_scale_output(format, scale)
    keep = []
    codes_view = fe.view(codes, "codes", keep, _code(format))  # checks codes is an array
    _check_rank(codes, "codes")
    if format == "fp8_mla":  # a record of another size is the library's to name, as codes'
        width = 576
    else:
        width = int(codes.shape[-1]) * (2 if format in _FP4 else 1)
    shape = tuple(codes.shape[:-1]) + (width,)
    out = fe.empty_values(shape, dtype, codes)
    options = _lib.make_quantize_options(_lib.KV_FORMATS[format],
                                         fe.view(global_scale, "global_scale", keep),
                                         fe.stream(codes))
    # out is shaped after codes here: what the library finds wrong with its shape is codes'.
    _lib.dequantize_kv(codes_view, fe.view(scale, "scale", keep, _SCALE_CODES.get(format)),
                       fe.view(out, "out", keep, written=True), options, {"out": "codes"})
    return out


def hadamard_signs(d, seed=0, device="cpu"):
    """(d,) float32 torch tensor of +-1 on `device`: the signs of the randomized Hadamard
    rotation, the same on every device for a seed (splitmix64, hfa_hadamard_signs)."""
    import torch
    d, seed = _args.integer(d, "d"), _args.integer(seed, "seed")
    signs = torch.empty(d, dtype=torch.float32, device=device)
    fe = _torch_side()
    _lib.hadamard_signs(seed, fe.view(signs, "signs", [], written=True), fe.stream(signs))
    return signs


def _fp8_scale_shape(granularity, block, x, cu_seqlens):
    """The FP8 forward's descale shape for this granularity (hfa.h, hfa_quantize_fp8)."""
    if granularity == "tensor":
        return (1,)
    varlen = cu_seqlens is not None
    batch = int(cu_seqlens.numel()) - 1 if varlen else int(x.shape[0])
    heads = int(x.shape[-2])
    if granularity == "head":
        return (batch, heads)
    if varlen:
        longest = int((cu_seqlens[1:] - cu_seqlens[:-1]).max()) if batch > 0 else 0
    else:
        longest = int(x.shape[1])
    return (batch, -(-longest // block), heads)


def quantize_fp8(x, granularity="tensor", block=128, hadamard=False, signs=None, seed=0,
                 cu_seqlens=None):
    """(codes, scales) of a torch tensor x for the FP8 forward: value = code * scale.

    x: (batch, seqlen, heads, d), or (total, heads, d) with int32 cu_seqlens (batch + 1);
    float32, float16 or bfloat16, CPU or CUDA. codes: torch.float8_e4m3fn of x's shape. scales:
    float32 in the forward's descale shapes: "tensor" (1,), "head" (batch, heads), "block"
    (batch, ceil(longest sequence / block), heads) with blocks of `block` rows counted from each
    sequence's first row (pass descale_block_q= / descale_block_kv= = block). scale =
    amax / 448 over the group, 1 for an all-zero group.
    hadamard=True (or signs given): rotate every row by H_d · diag(signs) / sqrt(d) first, d 64,
    128 or 256, signs = hadamard_signs(d, seed) unless given. Rotate q and k with the same signs
    (q·kᵀ is unchanged), never v. The CPU and a GPU return the same bytes."""
    if granularity not in _lib.FP8_GRANULARITIES:
        raise ValueError(f"granularity: expected one of {', '.join(_lib.FP8_GRANULARITIES)}, "
                         f"got {granularity!r}")
    if not _is_torch(x):
        raise TypeError(f"x: quantize_fp8 takes a torch tensor, got {type(x).__name__}")
    import torch
    fe = _torch_side()
    x = fe.values(x, "x")
    want_rank = 3 if cu_seqlens is not None else 4
    if x.dim() != want_rank:
        layout = ("(total, heads, d) with cu_seqlens" if cu_seqlens is not None
                  else "(batch, seqlen, heads, d)")
        raise ValueError(f"x: expected rank {want_rank} {layout}, got shape {tuple(x.shape)}")
    block = _args.integer(block, "block") if granularity == "block" else 0
    if cu_seqlens is not None:  # read here, for the scales' shape, before the library checks it
        fe.check_tensor(cu_seqlens, "cu_seqlens")
        if cu_seqlens.dtype != torch.int32 or cu_seqlens.dim() != 1 or cu_seqlens.numel() < 1:
            raise ValueError(f"cu_seqlens: expected int32 of shape (batch + 1,), got "
                             f"{cu_seqlens.dtype} {tuple(cu_seqlens.shape)}")
    if signs is None and hadamard:
        signs = hadamard_signs(x.shape[-1], seed, x.device)
    codes = torch.empty(x.shape, dtype=fe.e4m3 or torch.uint8, device=x.device)
    scales = torch.empty(_fp8_scale_shape(granularity, block, x, cu_seqlens),
                         dtype=torch.float32, device=x.device)
    keep = []
    _lib.quantize_fp8(fe.view(x, "x", keep),
                      fe.view(codes, "codes", keep, _lib.E4M3, written=True),
                      fe.view(scales, "scale", keep, written=True),
                      _lib.FP8_GRANULARITIES[granularity], block,
                      fe.view(cu_seqlens, "cu_seqlens", keep), fe.view(signs, "signs", keep),
                      fe.stream(x))
    return codes, scales


def _code(format):
    if format == "fp8_mla":
        return _lib.FP8_MLA
    return _lib.FP4_E2M1X2 if format in _FP4 else _lib.E4M3


def _is_torch(a):
    return type(a).__module__.split(".")[0] == "torch" or (
        not type(a).__module__.startswith("numpy") and hasattr(a, "data_ptr"))


# --- numpy -------------------------------------------------------------------------------------

class _NumpySide:
    def __init__(self):
        import numpy as np
        self.np = np

    def values(self, x, name):
        np = self.np
        if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float16):
            raise TypeError(f"{name}: expected a float32 or float16 numpy array (or a torch "
                            f"tensor), got {getattr(x, 'dtype', type(x).__name__)}")
        return x

    def empty(self, shape, name, format, like):
        dtype = (self.np.float32 if name == "scale" and format.startswith("fp8")
                 else self.np.uint8)
        return self.np.empty(shape, dtype=dtype)

    def empty_values(self, shape, dtype, like):
        dtype = self.np.dtype(self.np.float32 if dtype is None else dtype)
        if dtype not in (self.np.float32, self.np.float16):
            raise TypeError(f"dtype: expected float32 or float16, got {dtype}")
        return self.np.empty(shape, dtype=dtype)

    def view(self, a, name, keep, bytes_as=None, written=False):
        """hfa._numpy.view's Tensor over a (None for None), which `keep` keeps alive."""
        if a is None:
            return None
        from . import _numpy
        kept, t = _numpy.view(a, name, bytes_as, written)
        keep.append(kept)
        return t

    def stream(self, _):
        return None


# --- torch -------------------------------------------------------------------------------------

def _torch_side():
    import torch

    class _TorchSide:
        e4m3 = getattr(torch, "float8_e4m3fn", None)
        floats = {torch.float32: _lib.F32, torch.float16: _lib.F16, torch.bfloat16: _lib.BF16}

        def check_tensor(self, t, name):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")

        def values(self, x, name):
            self.check_tensor(x, name)
            if x.dtype not in self.floats:
                raise TypeError(f"{name}: expected float32, float16 or bfloat16, got {x.dtype}")
            return x

        def empty(self, shape, name, format, like):
            if name == "scale" and format.startswith("fp8"):
                dtype = torch.float32
            elif (name == "codes" and format in ("fp8_per_head", "fp8_per_token")
                  and self.e4m3 is not None):
                dtype = self.e4m3
            else:
                dtype = torch.uint8
            return torch.empty(shape, dtype=dtype, device=like.device)

        def empty_values(self, shape, dtype, like):
            dtype = torch.float32 if dtype is None else dtype
            if dtype not in self.floats:
                raise TypeError(f"dtype: expected float32, float16 or bfloat16, got {dtype}")
            return torch.empty(shape, dtype=dtype, device=like.device)

        def view(self, t, name, keep, bytes_as=None, written=False):
            """hfa._torch_calls' Tensor over t (None for None), which `keep` keeps alive: over a
            copy where an input's layout needs one, never for one the library writes."""
            if t is None:
                return None
            from . import _torch_calls
            if written:
                keep.append(t)
                return _torch_calls.view_as_is(t, name, bytes_as)
            kept, tensor = _torch_calls.view(t, name, bytes_as)
            keep.append(kept)
            return tensor

        def stream(self, a):
            if a.device.type != "cuda":
                return None
            return ctypes.c_void_p(torch.cuda.current_stream(a.device).cuda_stream).value

    return _TorchSide()
