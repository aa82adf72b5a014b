"""What each argument of hfa's Python entry points accepts: one description for the numpy and
torch front ends alike.

  - switches (causal, ...): a bool, never a string taken as True;
  - integers: in the range of INTEGERS, checked before anything converts them (ctypes and numpy
    wrap a Python int to the C ABI's int32 silently: window_size=(2**32 + 3, 0) would act as
    (3, 0));
  - arrays: labelled for the library with their own dtype, never another argument's (the
    library trusts the label to size what it reads and writes, and names an argument whose
    dtype does not fit its role); of rank MAX_RANK at most; writeable where the call writes them.

hfa/__init__.py checks the scalars before it hands a call to the torch or numpy front end, and
each front end labels and checks its arrays with array_code and check_array, so both give the
same normalized values and the same errors, naming the caller's argument.
"""

from __future__ import annotations

import numbers
import operator

from . import _lib


def flag(value, name: str) -> bool:
    """A switch such as causal: bool (Python or numpy), or the int 0 or 1. Anything else (a
    string, None, 2, a float) raises TypeError naming the argument: bool("no") is True, so
    taking truthiness would silently turn a typo into a mask."""
    if value is True or value is False:
        return value
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool"):  # numpy 1 and 2
        return bool(value)
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name}: expected a bool, got {type(value).__name__} {value!r}")


def _side(value, name: str) -> int:
    if value is None:  # newer FlashAttention releases: None = unbounded
        return -1
    return integer(value, name)


def window(window_size, name: str = "window_size") -> tuple:
    """(left, right) as ints, -1 (or None) = unbounded. A value of the wrong length raises
    ValueError, a non-integer side TypeError, a side out of [-1, int32 max] ValueError, all
    naming the argument."""
    if type(window_size) is tuple and len(window_size) == 2:  # the usual call: two compares
        left, right = window_size
        if (type(left) is int and type(right) is int and -1 <= left <= INT32_MAX
                and -1 <= right <= INT32_MAX):
            return window_size
    if isinstance(window_size, (str, bytes)) or not hasattr(window_size, "__len__"):
        raise TypeError(f"{name}: expected a (left, right) pair, got "
                        f"{type(window_size).__name__} {window_size!r}")
    if len(window_size) != 2:
        raise ValueError(f"{name}: expected a (left, right) pair, got {len(window_size)} values "
                         f"{tuple(window_size)!r}")
    left, right = window_size
    return _side(left, name), _side(right, name)


INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1

# Each integer argument's range: what the C ABI's field holds (int32), narrowed where nothing
# else means anything. The library checks the rest (sm_margin >= 0, num_splits up to its most
# splits, ...) and names the argument; what it cannot see is a value wrapped on the way in.
INTEGERS = {
    "window_size": (-1, INT32_MAX),  # -1 = unbounded
    "sm_margin": (INT32_MIN, INT32_MAX),
    "max_seqlen_q": (INT32_MIN, INT32_MAX),
    "max_seqlen_k": (INT32_MIN, INT32_MAX),
    "num_splits": (INT32_MIN, INT32_MAX),
    "split_size": (INT32_MIN, INT32_MAX),
    "cache_seqlens": (INT32_MIN, INT32_MAX),  # an int: every sequence's cache length
    "descale_block_q": (INT32_MIN, INT32_MAX),
    "descale_block_kv": (INT32_MIN, INT32_MAX),
    "block": (1, INT32_MAX),  # quantize_fp8's rows per scale
    "d": (1, INT32_MAX),  # hadamard_signs' length
    "seed": (0, 2 ** 64 - 1),  # a uint64
    "head_dim_v": (512, 512),  # flash_mla_with_kvcache's: MLA's latent width
}


def integer(value, name: str, none_ok: bool = False):
    """value as an int in INTEGERS[name]'s range: a Python or numpy integer (or a one-element
    integer tensor: a host sync), not a bool; None too when none_ok (a length derived when not
    given). TypeError or ValueError naming the argument."""
    low, high = INTEGERS[name]
    if type(value) is int and low <= value <= high:  # the usual call: no further call
        return value
    return bounded(value, name, low, high, none_ok)


def bounded(value, name: str, low: int, high: int, none_ok: bool = False):
    """value as an int in [low, high] (integer's rules)."""
    if type(value) is int and low <= value <= high:  # the usual call: no ABC check
        return value
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or type(value).__name__ in ("bool_", "bool"):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__} {value!r}")
    try:
        number = operator.index(value)  # ints of any kind; never a float, which would truncate
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__} "
                        f"{value!r}") from None
    if not low <= number <= high:
        if (low, high) == (INT32_MIN, INT32_MAX):
            raise ValueError(f"{name}: {number} does not fit the C ABI's int32")
        raise ValueError(f"{name}: {number} is out of range [{low}, {high}]")
    return number


def sm_margin(value, name: str = "sm_margin") -> int:
    """SMs to leave free for other kernels (FlashAttention-3's sm_margin). The library checks
    the range (>= 0, below the GPU's SM count) and names the argument."""
    return integer(value, name)


_NO_DESCALE_BLOCKS = (0, 0)


def descale_blocks(block_q, block_kv) -> tuple:
    """(descale_block_q, descale_block_kv) checked by integer's rules; the usual call (no FP8
    blocks, two int zeros) in one test."""
    if type(block_q) is int and type(block_kv) is int and block_q == block_kv == 0:
        return _NO_DESCALE_BLOCKS  # the same values, and no tuple made a call
    return integer(block_q, "descale_block_q"), integer(block_kv, "descale_block_kv")


def attention_scalars(window_size, softmax_scale, softcap, causal, sm_margin) -> tuple:
    """The scalars every attention entry point takes, (window_size, softmax_scale, softcap,
    causal, sm_margin) checked and normalized by window, real, flag and sm_margin's rules. The
    usual call passes values that are already what those return (an unbounded window, Python
    floats and bools, an int margin): one test, no call each (this is the per-call path, and
    every microsecond of it shows: bench/overhead_parts.py)."""
    if (type(causal) is bool and type(softcap) is float
            and (softmax_scale is None or type(softmax_scale) is float)
            and type(sm_margin) is int and INT32_MIN <= sm_margin <= INT32_MAX
            and type(window_size) is tuple and window_size == (-1, -1)):
        return window_size, softmax_scale, softcap, causal, sm_margin
    return (window(window_size), real(softmax_scale, "softmax_scale", none_ok=True),
            real(softcap, "softcap"), flag(causal, "causal"), integer(sm_margin, "sm_margin"))


def varlen_integers(max_seqlen_q, max_seqlen_k, num_splits) -> tuple:
    """flash_attn_varlen_func's own integers, (max_seqlen_q, max_seqlen_k, num_splits) checked
    by integer's rules (the lengths may be None); the usual call's (int lengths that fit the C
    ABI's int32, INTEGERS' range for both, and no splits) in one test, as attention_scalars'."""
    if (type(max_seqlen_q) is int and type(max_seqlen_k) is int and type(num_splits) is int
            and num_splits == 0 and INT32_MIN <= max_seqlen_q <= INT32_MAX
            and INT32_MIN <= max_seqlen_k <= INT32_MAX):
        return max_seqlen_q, max_seqlen_k, num_splits
    return (integer(max_seqlen_q, "max_seqlen_q", none_ok=True),
            integer(max_seqlen_k, "max_seqlen_k", none_ok=True), integer(num_splits, "num_splits"))


def kvcache_scalars(rotary_interleaved, return_softmax_lse, num_splits, split_size,
                    max_seqlen_q) -> tuple:
    """flash_attn_with_kvcache's own scalars, (rotary_interleaved, return_softmax_lse,
    num_splits, split_size, max_seqlen_q) checked and normalized by flag's and integer's rules
    (max_seqlen_q may be None); the usual call's (bools, the defaults of the others) in one
    test, as attention_scalars'."""
    if (type(rotary_interleaved) is bool and type(return_softmax_lse) is bool
            and type(num_splits) is int and type(split_size) is int
            and num_splits == split_size == 0 and max_seqlen_q is None):
        return rotary_interleaved, return_softmax_lse, num_splits, split_size, max_seqlen_q
    return (flag(rotary_interleaved, "rotary_interleaved"),
            flag(return_softmax_lse, "return_softmax_lse"), integer(num_splits, "num_splits"),
            integer(split_size, "split_size"),
            integer(max_seqlen_q, "max_seqlen_q", none_ok=True))


def real(value, name: str, none_ok: bool = False):
    """A float argument (softmax_scale, softcap) as a float: a Python or numpy real number, not a
    bool or a string (float("0.5") would take one); None too when none_ok (a default). The
    library checks the value (finite, the sign) and names the argument."""
    if type(value) is float or (value is None and none_ok):  # the usual call
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__} {value!r}")
    return float(value)


def options(values: dict, struct, call: int) -> dict:
    """The keyword arguments an entry point takes from the options' description rather than by
    name (hfa._lib.caller_rows): {field: value}, each scalar checked by its row's kind as the
    named ones are (a vector is the front end's to label; the library checks its dtype, shape and
    device). TypeError for a name that is no such row's."""
    if not values:  # the usual call
        return values
    rows = _lib.caller_rows(struct, call)
    fields = {}
    for name, value in values.items():
        info = rows.get(name)
        if info is None:
            raise TypeError(f"{name}: not an argument of this call")
        if info.kind == _lib.FLAG:
            value = flag(value, name)
        elif info.kind == _lib.INT32:
            value = bounded(value, name, int(info.low), int(info.high))
        elif info.kind in (_lib.REAL, _lib.SCALE):
            value = real(value, name, none_ok=info.kind == _lib.SCALE)
        fields[info.name.decode()] = value
    return fields


def lengths(value, name: str):
    """An array of lengths (or None) as it is; a single length (a number, never an array or a
    tensor) as integer(value, name)."""
    if value is None or not isinstance(value, (numbers.Number, str, bytes)):
        return value
    return integer(value, name)


# --- arrays ------------------------------------------------------------------------------------

# The element kinds the front ends report for their dtypes ("u8": numpy's and torch's uint8),
# and the hfa_dtype each is labelled with. uint8 has none of its own: it holds the bytes of FP8
# or FP4 codes and their block scales, and the call's format says which (array_code's bytes_as).
KIND_CODES = {"f32": _lib.F32, "f16": _lib.F16, "bf16": _lib.BF16, "e4m3": _lib.E4M3,
              "e5m2": _lib.E5M2, "e8m0": _lib.UE8M0, "i32": _lib.I32}
BYTE_CODES = (_lib.E4M3, _lib.UE8M0, _lib.FP4_E2M1X2, _lib.FP8_MLA)


def array_code(name: str, kind, dtype, bytes_as=None) -> int:
    """The hfa_dtype that labels argument `name`, an array of element kind `kind` (None: a
    dtype hfa does not know; `dtype` is the front end's, for the message): its own, or for
    uint8 the byte format `bytes_as` (the cache's codes, the scales' format) when the call
    gives one. TypeError naming the argument for a dtype with no label here."""
    code = KIND_CODES.get(kind)
    if code is not None:
        return code
    if kind == "u8" and bytes_as in BYTE_CODES:
        return bytes_as
    hint = " here (uint8 holds FP8 / FP4 codes and their scales only)" if kind == "u8" else ""
    raise TypeError(f"{name}: dtype {dtype} is not supported{hint}")


def check_array(name: str, rank: int, writeable: bool, written: bool) -> None:
    """What the library cannot see: a rank its Tensor cannot hold, and a read-only array (numpy's
    writeable flag: a view of bytes, a setflags(write=False) array) that the call would write."""
    if rank > _lib.MAX_RANK:
        raise ValueError(f"{name}: rank {rank} is more than {_lib.MAX_RANK}")
    if written and not writeable:
        raise ValueError(f"{name}: is read-only, and this call writes it in place")
