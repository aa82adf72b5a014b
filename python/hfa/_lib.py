"""ctypes binding of the C ABI (include/hfa/hfa.h).

This module knows nothing of numpy or torch: it loads libhfa.so, mirrors the C structs, and
turns a failed status into a Python exception that carries hfa_last_error(). The numpy and torch
front ends build `Tensor` views over their own memory, prepare a call here (`prepare_forward`,
...: the arguments validated once, the workspace sized), allocate its workspace and `run` it.
"""

from __future__ import annotations

import collections
import ctypes
import glob
import os
import threading
from typing import NamedTuple, Optional, Sequence

# --- enums, as in hfa.h ------------------------------------------------------------------------

SUCCESS = 0
ERROR_INVALID_ARGUMENT = 1
ERROR_NOT_SUPPORTED = 2
ERROR_CUDA = 3
ERROR_INTERNAL = 4

F32, F16, BF16, E4M3, E5M2, I32 = 0, 1, 2, 3, 4, 5
FP4_E2M1X2, UE8M0 = 6, 7  # KV caches: two E2M1 values per byte; MXFP4 block scales
FP8_MLA = 8  # FlashMLA's 656-byte FP8 MLA token records (bytes)
DTYPE_NAMES = {F32: "float32", F16: "float16", BF16: "bfloat16", E4M3: "float8_e4m3",
               E5M2: "float8_e5m2", I32: "int32", FP4_E2M1X2: "fp4_e2m1x2", UE8M0: "ue8m0",
               FP8_MLA: "fp8_mla"}

CPU, CUDA = 0, 1
MAX_RANK = 4
CALL_BYTES = 2048  # HFA_CALL_BYTES
MAX_MERGE_PARTIALS = 16  # HFA_MAX_MERGE_PARTIALS

# hfa_kv_format: the cache formats of hfa_quantize_kv / hfa_dequantize_kv.
KV_FORMATS = {"fp8_per_head": 1, "fp8_per_token": 2, "nvfp4": 3, "mxfp4": 4, "fp8_mla": 5}
# hfa_fp8_granularity: the scale groups of hfa_quantize_fp8.
FP8_GRANULARITIES = {"tensor": 1, "head": 2, "block": 3}


# --- structs, field for field as in hfa.h (C enums are int-sized) ------------------------------

class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_RANK),
        ("stride", ctypes.c_int64 * MAX_RANK),
        ("device", ctypes.c_int),
        ("device_index", ctypes.c_int32),
    ]


# The options structs are not written out here: the library describes them (hfa/options.def,
# hfa_describe_options), and their fields are filled in from that description when it loads
# (_mirror_options), so that this mirror can never drift from the library it runs against. Each
# starts with struct_size, its size (hfa.h), which is no row: the library fills it in
# (hfa_init_options, with this mirror's size) and checks it at every call.
class Options(ctypes.Structure):
    """hfa_options (fields from the library's description)."""


class KVCacheOptions(ctypes.Structure):
    """hfa_kvcache_options (fields from the library's description)."""


class QuantizeOptions(ctypes.Structure):
    _fields_ = [
        ("format", ctypes.c_int),
        ("global_scale", ctypes.POINTER(Tensor)),
        ("stream", ctypes.c_void_p),
    ]


class QuantizeFp8Options(ctypes.Structure):
    _fields_ = [
        ("granularity", ctypes.c_int),
        ("block_rows", ctypes.c_int32),
        ("cu_seqlens", ctypes.POINTER(Tensor)),
        ("signs", ctypes.POINTER(Tensor)),
        ("stream", ctypes.c_void_p),
    ]


class Call(ctypes.Structure):
    """hfa_call: a call prepared once (prepare_forward, ...), run by run(); opaque."""
    _fields_ = [("opaque", ctypes.c_uint64 * (CALL_BYTES // 8))]


def make_tensor(data: int, dtype: int, shape: Sequence[int], stride: Sequence[int],
                device: int = CPU, device_index: int = 0) -> Tensor:
    """A view over memory the caller owns; strides count elements, not bytes."""
    if len(shape) != len(stride) or len(shape) > MAX_RANK:
        raise ValueError(f"hfa tensors have rank <= {MAX_RANK}; got shape {tuple(shape)}")
    t = Tensor()
    t.data = data or None  # an empty tensor may have no storage: pass NULL, the library decides
    t.dtype = dtype
    t.rank = rank = len(shape)
    # Whole slices (a loop of item assignments cost twice the rest of the call); ctypes takes
    # Python and numpy integers, and raises TypeError on anything else.
    t.shape[:rank] = shape
    t.stride[:rank] = stride
    t.device = device
    t.device_index = device_index
    return t


# --- finding and loading the library -----------------------------------------------------------

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# python/hfa/ -> the repository root, when the package is used from a checkout. An installed
# package (pip install .) has its library beside it, and no build folders to look in.
_REPO_ROOT = os.path.dirname(os.path.dirname(_PACKAGE_DIR))
_IN_CHECKOUT = os.path.isfile(os.path.join(_REPO_ROOT, "CMakeLists.txt"))
_LIB_NAMES = ("libhfa.so", "libhfa.dylib", "hfa.dll")


def candidate_paths() -> list:
    """Where we look for the library, in order. HFA_LIBRARY, when set, is the only candidate:
    a user who names a file must get that file or an error, never a silent substitute."""
    env = os.environ.get("HFA_LIBRARY")
    if env:
        return [env]
    paths = [os.path.join(_PACKAGE_DIR, n) for n in _LIB_NAMES]
    if not _IN_CHECKOUT:
        return paths
    build = os.path.join(_REPO_ROOT, "build")
    for preset in ("release", "cpu"):
        paths += [os.path.join(build, preset, "src", n) for n in _LIB_NAMES]
    # Any other build folder (debug, a helper's own folder, ...): newest first.
    others = []
    for n in _LIB_NAMES:
        others += glob.glob(os.path.join(build, "*", "src", n))
    others.sort(key=os.path.getmtime, reverse=True)
    paths += [p for p in others if p not in paths]
    return paths


class OptionInfo(ctypes.Structure):
    """hfa_option_info: one field of an options struct, described."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("caller", ctypes.c_char_p),
        ("note", ctypes.c_char_p),
        ("kind", ctypes.c_int),
        ("calls", ctypes.c_uint32),
        ("offset", ctypes.c_size_t),
        ("flag_offset", ctypes.c_size_t),
        ("default_value", ctypes.c_double),
        ("low", ctypes.c_double),
        ("high", ctypes.c_double),
    ]


# One row of the description as plain Python values (its strings as bytes), with
# hfa_option_info's fields: what OPTION_INFO holds. The front end reads rows in code that
# torch.compile traces, and the dynamo of torch 2.11 cannot read a ctypes Structure's fields (it
# finds the class's CField descriptors, not their values).
Row = collections.namedtuple("Row", [field for field, _ in OptionInfo._fields_])


# hfa_option_kind, and each kind's C type.
FLAG, INT32, REAL, SCALE, TENSOR, HANDLE, BYTES, VECTOR = range(8)
_KIND_TYPES = {FLAG: ctypes.c_int32, INT32: ctypes.c_int32, REAL: ctypes.c_float,
               SCALE: ctypes.c_float, TENSOR: ctypes.POINTER(Tensor), HANDLE: ctypes.c_void_p,
               BYTES: ctypes.c_size_t, VECTOR: ctypes.POINTER(Tensor)}
_POINTERS = (TENSOR, VECTOR)  # the kinds a tensor is given for, as a pointer to its view
_DEFAULT_WHEN_NONE = (*_POINTERS, SCALE)  # None: a null pointer, an unset scale (_set)
_NUMBERS = (FLAG, INT32, REAL, BYTES)  # a value equal to the row's default_value is that default
# hfa_option_calls
CALL_FORWARD, CALL_BACKWARD, CALL_KVCACHE = 1, 2, 4
_OPTIONS_STRUCTS = {0: Options, 1: KVCacheOptions}  # hfa_options_struct
OPTION_INFO = {}  # struct class -> {field name: Row}, once the library is loaded


def _mirror_options(lib: ctypes.CDLL) -> None:
    """Each options struct's fields from the library's description, in its order, and a check
    that ctypes lays them out where the library has them (a library of another version would
    fail here, not corrupt a call)."""
    describe = lib.hfa_describe_options
    describe.restype = ctypes.POINTER(OptionInfo)
    describe.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int32),
                         ctypes.POINTER(ctypes.c_size_t)]
    for which, struct in _OPTIONS_STRUCTS.items():
        count, size = ctypes.c_int32(0), ctypes.c_size_t(0)
        rows = describe(which, ctypes.byref(count), ctypes.byref(size))
        infos = [rows[i] for i in range(count.value)]
        if "_fields_" not in struct.__dict__:  # set once a process
            fields = [("struct_size", ctypes.c_size_t)]
            for info in infos:
                name = info.name.decode()
                if info.kind == SCALE:
                    fields.append(("has_" + name, ctypes.c_int32))
                fields.append((name, _KIND_TYPES[info.kind]))
            struct._fields_ = fields
        for info in infos:
            name = info.name.decode()
            flag = "has_" + name if info.kind == SCALE else name
            if (getattr(struct, name).offset, getattr(struct, flag).offset) != (
                    info.offset, info.flag_offset):
                raise OSError(f"hfa: {struct.__name__}.{name} lies elsewhere in this libhfa")
        if ctypes.sizeof(struct) != size.value:
            raise OSError(f"hfa: {struct.__name__} has another size in this libhfa")
        OPTION_INFO[struct] = {info.name.decode(): Row(*(getattr(info, field)
                                                         for field in Row._fields))
                               for info in infos}


_lib = None
_lib_lock = threading.Lock()


def _declare(lib: ctypes.CDLL) -> None:
    T = ctypes.POINTER(Tensor)
    O = ctypes.POINTER(Options)
    C = ctypes.POINTER(Call)
    size_p = ctypes.POINTER(ctypes.c_size_t)
    sigs = {
        "hfa_init_options": (None, [O, ctypes.c_size_t]),
        "hfa_init_kvcache_options": (None, [ctypes.POINTER(KVCacheOptions), ctypes.c_size_t]),
        "hfa_prepare_forward": (ctypes.c_int, [T, T, T, T, T, O, C, size_p]),
        "hfa_prepare_backward": (ctypes.c_int, [T, T, T, T, T, T, T, T, T, O, C, size_p]),
        "hfa_prepare_forward_kvcache": (ctypes.c_int, [T, T, T, T, T,
                                                       ctypes.POINTER(KVCacheOptions), C, size_p]),
        "hfa_run": (ctypes.c_int, [C, ctypes.c_void_p, ctypes.c_size_t]),
        "hfa_quantize_kv": (ctypes.c_int, [T, T, T, ctypes.POINTER(QuantizeOptions)]),
        "hfa_dequantize_kv": (ctypes.c_int, [T, T, T, ctypes.POINTER(QuantizeOptions)]),
        "hfa_quantize_fp8": (ctypes.c_int, [T, T, T, ctypes.POINTER(QuantizeFp8Options)]),
        "hfa_hadamard_signs": (ctypes.c_int, [ctypes.c_uint64, T, ctypes.c_void_p]),
        "hfa_merge_partials": (ctypes.c_int, [ctypes.POINTER(T), ctypes.POINTER(T), ctypes.c_int32,
                                              T, T, ctypes.c_void_p]),
        "hfa_last_error": (ctypes.c_char_p, []),
        "hfa_status_name": (ctypes.c_char_p, [ctypes.c_int]),
        "hfa_version": (ctypes.c_char_p, []),
        "hfa_cuda_device_count": (ctypes.c_int32, []),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def library() -> ctypes.CDLL:
    """The loaded libhfa, loaded on first use (so `import hfa` works without it)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            tried = []
            for path in candidate_paths():
                if not os.path.isfile(path):
                    tried.append(f"{path} (not found)")
                    continue
                try:
                    lib = ctypes.CDLL(path)
                    _mirror_options(lib)
                    _declare(lib)
                except (OSError, AttributeError) as e:
                    tried.append(f"{path} ({e})")
                    continue
                _lib = lib
                break
            else:
                raise OSError("hfa: cannot load libhfa; build it (cmake --workflow --preset "
                              "release) or set HFA_LIBRARY to its path. Tried:\n  "
                              + "\n  ".join(tried))
    return _lib


def library_path() -> Optional[str]:
    lib = library()
    return getattr(lib, "_name", None)


# --- errors ------------------------------------------------------------------------------------

class HfaError(RuntimeError):
    """A CUDA or internal failure inside libhfa (status CUDA or INTERNAL)."""


class HfaInvalidArgument(ValueError):
    """The call was malformed; the message names the argument at fault."""


class HfaNotSupported(NotImplementedError):
    """Well-formed, but this build or device cannot run it."""


def error_for(status: int, message: str) -> Exception:
    """The exception for a failed status: ValueError for INVALID_ARGUMENT, NotImplementedError
    for NOT_SUPPORTED, RuntimeError otherwise. Each subclass keeps the status code."""
    cls = {ERROR_INVALID_ARGUMENT: HfaInvalidArgument,
           ERROR_NOT_SUPPORTED: HfaNotSupported}.get(status, HfaError)
    err = cls(message)
    err.status = status
    return err


# The C ABI's names of the arguments whose Python name differs: a message that starts with one
# names the argument as the caller wrote it.
_CALLER_NAMES = {"k_new": "k", "v_new": "v", "sinks": "learnable_sink", "block_rows": "block"}


def _callers_words(message: str, names) -> str:
    argument, colon, rest = message.partition(":")
    if colon and argument in names:
        return names[argument] + colon + rest
    return message


def check(status: int, names=_CALLER_NAMES) -> None:
    """Raises error_for a failed status; `names` maps the C ABI's names of arguments to the
    caller's, where they differ (a call's own map adds those its front end derives: an output
    shaped after an input names that input)."""
    if status == SUCCESS:
        return
    lib = library()
    # hfa_last_error is per thread; ctypes runs the call and this one on the same thread.
    message = (lib.hfa_last_error() or b"").decode("utf-8", "replace")
    name = (lib.hfa_status_name(status) or b"").decode("utf-8", "replace")
    raise error_for(status, _callers_words(message, names)
                    or f"hfa: {name or 'error'} (status {status})")


# --- calls -------------------------------------------------------------------------------------

def defaults(struct, init) -> ctypes.Structure:
    """A struct of the library's defaults, filled in by its initializer (hfa_init_*options) with
    this mirror's size."""
    o = struct()
    init(ctypes.byref(o), ctypes.sizeof(o))
    return o


def _options(struct, init, values) -> ctypes.Structure:
    """defaults(struct, init) with the fields of `values` set, by the kind the library describes
    for each: keyword names are the C fields' (window_size=(left, right) gives window_left and
    window_right, None for -1 as newer FlashAttention releases allow). Tensors given must outlive
    the options (they hold pointers to them)."""
    o = defaults(struct, init)
    fields = OPTION_INFO[struct]
    if "window_size" in values:
        left, right = values.pop("window_size")
        values["window_left"] = -1 if left is None else left
        values["window_right"] = -1 if right is None else right
    for name, value in values.items():
        info = fields.get(name)
        if info is None:
            raise TypeError(f"{name}: not an option of {struct.__name__}")
        if value is None and info.kind in _DEFAULT_WHEN_NONE or (
                info.kind in _NUMBERS and value == info.default_value):
            continue  # the initializer's value already: set by hand, it costs a call
        _set(o, info, value)
    return o


def _set(o: ctypes.Structure, info: Row, value) -> None:
    """One field of an options struct, by its row's kind."""
    name = info.name.decode()
    if info.kind == SCALE:
        setattr(o, "has_" + name, 0 if value is None else 1)
        setattr(o, name, 0.0 if value is None else float(value))
    elif info.kind in _POINTERS:
        setattr(o, name, None if value is None else ctypes.pointer(value))
    elif info.kind == FLAG:
        setattr(o, name, 1 if value else 0)
    elif info.kind == REAL:
        setattr(o, name, float(value))
    elif info.kind in (INT32, BYTES):
        setattr(o, name, int(value))
    else:
        setattr(o, name, value)


# The fields the Python entry points set by hand: named parameters (FlashAttention's names, in
# its positions), values they derive (window_size, the varlen bounds) and what the call itself
# supplies (stream, workspace and reuse_schedule, which promises what the workspace holds, the
# outputs). Any other row is taken as a keyword argument by its caller name (caller_rows): a new
# option needs no edit here.
_HAND_SET = frozenset((
    "softmax_scale", "causal", "window_left", "window_right", "softcap", "cu_seqlens_q",
    "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "deterministic", "stream", "workspace",
    "workspace_bytes", "sinks", "seqused_q", "seqused_k", "dsinks", "q_descale", "k_descale",
    "v_descale", "descale_block_q", "descale_block_kv", "sm_margin", "accumulate", "softmax_d",
    "cache_seqlens", "block_table", "k_scale", "v_scale", "k_global_scale", "v_global_scale",
    "num_splits", "validate", "k_new", "v_new", "rotary_cos", "rotary_sin", "rotary_interleaved",
    "split_size", "cu_seqlens_k_new", "reuse_schedule"))
_caller_rows = {}


def caller_rows(struct, call: int) -> dict:
    """{caller name: Row} of the rows of `struct` that `call` (CALL_*) reads and no
    entry point sets by hand: the keyword arguments an entry point takes from the description."""
    key = (struct, call)
    rows = _caller_rows.get(key)
    if rows is None:
        rows = {info.caller.decode(): info for name, info in option_rows(struct).items()
                if info.calls & call and name not in _HAND_SET}
        _caller_rows[key] = rows
    return rows


def option_rows(struct) -> dict:
    """{field name: Row} of `struct`, the library loaded first: the description is the
    library's, so a front end's first call of a process may be the one that reads it."""
    rows = OPTION_INFO.get(struct)
    if rows is None:
        library()
        rows = OPTION_INFO[struct]
    return rows


def vector_rows(struct) -> list:
    """The VECTOR rows of `struct` in their order: the entries of the torch ops' `vectors`
    argument (src/torch/ops.cpp)."""
    return [info for info in option_rows(struct).values() if info.kind == VECTOR]


SCALARS = (FLAG, INT32, REAL, SCALE)  # the kinds the torch ops take in `scalars`


class OpArguments(NamedTuple):
    """The torch ops' option arguments for the rows a caller gave by keyword (op_arguments).
    Each row reaches an op one way, by its kind, so that a new row of a kind needs no schema
    edit where its kind comes in a list (src/torch/ops.cpp)."""
    vectors: Optional[list]  # `vectors`: entry n for the n-th VECTOR row (vector_rows)
    tensors: dict  # the TENSOR rows, {field: tensor}: the arguments of their fields' names
    scalars: Optional[list]  # `scalars`: (row, value) pairs (scalars_of)


NO_OP_ARGUMENTS = OpArguments(None, {}, None)  # the usual call: no keyword row


def op_arguments(struct, fields: dict) -> OpArguments:
    """The torch ops' option arguments for the rows given ({field: value}, hfa._args.options):
    the VECTOR rows in `vectors` (None where not given; None when no vector is given), the
    TENSOR rows by name (python/tests/test_torch_schema.py checks that the full ops take every
    one their calls read) and the scalar rows in `scalars`. A row of another kind has no place
    in the ops: NotImplementedError naming it."""
    if not fields:
        return NO_OP_ARGUMENTS
    rows = option_rows(struct)
    for field in fields:
        if rows[field].kind not in SCALARS + (VECTOR, TENSOR):
            raise NotImplementedError(f"{rows[field].caller.decode()}: not taken by the torch "
                                      "ops (numpy arrays and the C ABI take it)")
    vectors = [fields.get(info.name.decode()) for info in vector_rows(struct)]
    return OpArguments(vectors if any(t is not None for t in vectors) else None,
                       {field: value for field, value in fields.items()
                        if rows[field].kind == TENSOR},
                       scalars_of(struct, fields))


def scalars_of(struct, fields: dict):
    """The torch ops' `scalars` argument for the scalar rows given ({field: value}, checked by
    hfa._args.options): (row, value) pairs, row the field's index among the struct's rows (the
    description's order) and value a float (a flag 0 or 1; None, a SCALE left at its default, is
    not sent); None when none is given (the usual call). src/torch/ops.cpp reads them."""
    if not fields:
        return None
    pairs = []
    for row, (name, info) in enumerate(option_rows(struct).items()):
        value = fields.get(name)
        if info.kind in SCALARS and value is not None:
            pairs += [float(row), float(value)]
    return pairs or None


def set_scalars(options: ctypes.Structure, scalars) -> None:
    """The torch ops' `scalars` (scalars_of's pairs) set in an options struct, as src/torch/ops.cpp
    sets them: the ctypes ops' half of that argument."""
    rows = list(OPTION_INFO[type(options)].values())
    if len(scalars) % 2:
        raise ValueError(f"scalars: (row, value) pairs, got {len(scalars)} numbers")
    for row, value in zip(scalars[::2], scalars[1::2]):
        if row != int(row) or not 0 <= row < len(rows) or rows[int(row)].kind not in SCALARS:
            raise ValueError(f"scalars: {row} is no scalar row of the options")
        info = rows[int(row)]
        if info.kind == INT32:
            if value != int(value) or not -2 ** 31 <= value < 2 ** 31:
                raise ValueError(f"{info.caller.decode()}: {value} is not an int32")
            value = int(value)
        _set(options, info, value)


def make_options(**values) -> Options:
    """The defaults of hfa_options with `values` applied (_options)."""
    return _options(Options, library().hfa_init_options, values)


def _ref(t: Optional[Tensor]):
    return ctypes.byref(t) if t is not None else None


def _prepare(prepare, *arguments):
    """(call, workspace bytes it needs) from hfa_prepare_*(arguments, call, bytes): the arguments
    checked, once. What the tensors and options view must outlive the call's run (hfa.h)."""
    call, workspace_bytes = Call(), ctypes.c_size_t(0)
    check(prepare(*arguments, ctypes.byref(call), ctypes.byref(workspace_bytes)))
    return call, workspace_bytes.value


def prepare_forward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Optional[Tensor],
                    options: Options):
    return _prepare(library().hfa_prepare_forward, _ref(q), _ref(k), _ref(v), _ref(out),
                    _ref(lse), ctypes.byref(options))


def prepare_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                     dq: Tensor, dk: Tensor, dv: Tensor, options: Options):
    return _prepare(library().hfa_prepare_backward, _ref(dout), _ref(q), _ref(k), _ref(v),
                    _ref(out), _ref(lse), _ref(dq), _ref(dk), _ref(dv), ctypes.byref(options))


def prepare_forward_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, out: Tensor,
                            lse: Optional[Tensor], options: KVCacheOptions):
    return _prepare(library().hfa_prepare_forward_kvcache, _ref(q), _ref(k_cache),
                    _ref(v_cache), _ref(out), _ref(lse), ctypes.byref(options))


def run(prepared, allocate) -> None:
    """hfa_run of a prepared (call, workspace bytes), with the workspace it needs from
    allocate(bytes) -> (kept, address), kept alive until the call returns (never asked for 0
    bytes: a CPU call needs none)."""
    call, workspace_bytes = prepared
    kept, address = allocate(workspace_bytes) if workspace_bytes else (None, None)
    check(library().hfa_run(ctypes.byref(call), address, workspace_bytes))


def make_kvcache_options(**values) -> KVCacheOptions:
    """The defaults of hfa_kvcache_options with `values` applied (_options)."""
    return _options(KVCacheOptions, library().hfa_init_kvcache_options, values)


def make_quantize_options(format: int, global_scale: Optional[Tensor] = None,
                          stream=None) -> QuantizeOptions:
    """The options of hfa_quantize_kv; global_scale must outlive them."""
    o = QuantizeOptions()
    o.format = format
    if global_scale is not None:
        o.global_scale = ctypes.pointer(global_scale)
    o.stream = stream
    return o


def quantize_kv(x: Tensor, codes: Tensor, scale: Tensor, options: QuantizeOptions) -> None:
    check(library().hfa_quantize_kv(_ref(x), _ref(codes), _ref(scale), ctypes.byref(options)))


def dequantize_kv(codes: Tensor, scale: Tensor, out: Tensor, options: QuantizeOptions,
                  names=_CALLER_NAMES) -> None:
    check(library().hfa_dequantize_kv(_ref(codes), _ref(scale), _ref(out), ctypes.byref(options)),
          names)


def quantize_fp8(x: Tensor, codes: Tensor, scale: Tensor, granularity: int, block_rows: int,
                 cu_seqlens: Optional[Tensor], signs: Optional[Tensor], stream=None) -> None:
    o = QuantizeFp8Options()
    o.granularity = granularity
    o.block_rows = block_rows
    if cu_seqlens is not None:
        o.cu_seqlens = ctypes.pointer(cu_seqlens)
    if signs is not None:
        o.signs = ctypes.pointer(signs)
    o.stream = stream
    check(library().hfa_quantize_fp8(_ref(x), _ref(codes), _ref(scale), ctypes.byref(o)))


def hadamard_signs(seed: int, signs: Tensor, stream=None) -> None:
    check(library().hfa_hadamard_signs(ctypes.c_uint64(seed), _ref(signs), stream))


def merge_partials(outs: Sequence[Tensor], lses: Sequence[Tensor], out: Tensor,
                   lse: Optional[Tensor], stream=None) -> None:
    """hfa_merge_partials: partial i is (outs[i], lses[i]). The counts are checked here, with
    the C++ API's messages: the C ABI's num_partials is no argument of a Python caller."""
    if not 1 <= len(outs) <= MAX_MERGE_PARTIALS:
        raise error_for(ERROR_INVALID_ARGUMENT, f"outs: expected 1 to {MAX_MERGE_PARTIALS} partial "
                        f"outputs (HFA_MAX_MERGE_PARTIALS), got {len(outs)}")
    if len(lses) != len(outs):
        raise error_for(ERROR_INVALID_ARGUMENT, f"lses: expected {len(outs)} LSEs (one per "
                        f"partial output), got {len(lses)}")
    arrays = [(ctypes.POINTER(Tensor) * len(ts))(*(ctypes.pointer(t) for t in ts))
              for ts in (outs, lses)]
    check(library().hfa_merge_partials(arrays[0], arrays[1], len(outs), _ref(out), _ref(lse),
                                       stream))


def version() -> str:
    return library().hfa_version().decode()


def cuda_device_count() -> int:
    return int(library().hfa_cuda_device_count())
