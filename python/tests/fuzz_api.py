"""The fuzz of hfa's Python entry points (test_fuzz_api.py on numpy arrays, test_torch_fuzz_api.py
on torch CPU tensors): a valid call of each entry point, then one argument changed at random (a
dtype, a shape, a layout, a read-only flag, an integer out of range, something that is no array,
an output aliasing an input), and the call's outcome checked:

  - a result, or a clean exception (ValueError, TypeError, NotImplementedError) whose message
    starts with the caller's name of an argument: the changed one where the fault can only be
    its own (an integer out of range, a dtype with no label, a read-only output, ...);
  - after a rejection, every array the caller gave byte-identical; after a result, every array
    the call does not write;
  - a change of layout alone (strides, a read-only input) gives the unchanged call's result.

A crash is the failure this exists to find (under AddressSanitizer in CI: an out-of-bounds read
or write). HFA_FUZZ_ITERATIONS sets the calls per entry point (default 200); the seed is fixed.
"""

import inspect
import os

import numpy as np

import hfa
from hfa import _lib

ITERATIONS = int(os.environ.get("HFA_FUZZ_ITERATIONS", "200"))
CLEAN_ERRORS = (ValueError, TypeError, NotImplementedError)

# Integers each entry point takes, and values to put there: ones that wrap to 32 bits, negative
# ones, and what is no integer.
HUGE_INTEGERS = [2 ** 31, 2 ** 32 + 3, 2 ** 40, -2 ** 31 - 1, -2 ** 40, np.int64(2 ** 33),
                 np.uint64(2 ** 63)]
NOT_INTEGERS = [1.5, "8", True, np.float32(2.0), [1]]
ODD_FLOATS = [float("nan"), float("inf"), -1.0, 1e40, "1.0"]


# --- the front ends ------------------------------------------------------------------------------

class NumpyArrays:
    """What the fuzz does to an array, on numpy arrays."""

    dtypes = [np.float64, np.float16, np.float32, np.int32, np.int64, np.uint8, np.int8, np.bool_]
    # Dtypes no argument takes: an argument given one must be named in the error.
    unlabelled = {np.dtype(d) for d in (np.float64, np.int64, np.int8, np.bool_)}
    has_read_only = True

    def array(self, a):
        return a

    def to_numpy(self, a):
        return a

    def snapshot(self, a):
        return a.tobytes(), a.dtype, a.shape

    def astype(self, a, dtype):
        with np.errstate(over="ignore"):  # a mask's bits past float16's range: inf, as meant
            return a.astype(dtype)

    def dtype_is_unlabelled(self, a):
        return a.dtype in self.unlabelled

    def layouts(self, a):
        """(name, view) of a's values in other layouts: strides with gaps, reversed, transposed
        (the last dim strided), negative, and data not aligned to the dtype."""
        out = []
        if a.ndim:
            axis = a.ndim - 1 if a.shape[-1] > 1 else 0
            wide = list(a.shape)
            wide[axis] *= 2
            gapped = np.zeros(wide, a.dtype)
            index = [slice(None)] * a.ndim
            index[axis] = slice(None, None, 2)
            gapped[tuple(index)] = a
            out.append(("gapped", gapped[tuple(index)]))
            out.append(("fortran", np.asfortranarray(a)))
            out.append(("reversed", a[::-1].copy()[::-1]))
            out.append(("transposed", np.ascontiguousarray(np.swapaxes(a, 0, -1)).swapaxes(0, -1)))
        if a.size and a.itemsize > 1:
            data = bytearray(a.nbytes + 1)
            unaligned = np.frombuffer(data, np.uint8, a.nbytes, 1).view(a.dtype)
            unaligned = unaligned.reshape(a.shape)
            unaligned[...] = a
            out.append(("unaligned", unaligned))
        return out

    def read_only(self, a):
        """Read-only arrays of a's values: a flagged copy, and one over an immutable bytes."""
        flagged = a.copy()
        flagged.setflags(write=False)
        out = [("read-only", flagged)]
        if a.size:
            out.append(("bytes", np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape)))
        return out

    def reshaped(self, a, shape):
        return np.zeros(shape, a.dtype)


class Case:
    """A valid call: entry(**arguments) (merge_partials' outs and lses are lists of arrays);
    `written` the arguments the call writes in place; `integers` and `floats` the scalar
    arguments the fuzz may change; `aliases` (output, input) pairs that may share memory."""

    def __init__(self, entry, arguments, written=(), integers=(), floats=(), aliases=()):
        self.entry = entry
        self.arguments = arguments  # name -> value, in the order entry takes them
        self.written = set(written)
        self.integers = list(integers)
        self.floats = list(floats)
        self.aliases = list(aliases)

    def call(self, arguments):
        return self.entry(**arguments)

    def call_self(self):
        return self.entry(**self.arguments)


# --- the valid calls ---------------------------------------------------------------------------

def _values(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _cu(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def _table_vectors(rng, args, struct, call, batch, heads):
    """Each VECTOR row of the description the call reads (hfa/options.def), given by its caller
    name half the time: an array of its dtype and one of its shapes, small positive values. So
    a new row is fuzzed (and its rejections checked) with no edit here."""
    shapes = {1: (heads,), 2: (batch,), 4: (batch, heads)}  # hfa_option_shape
    for info in _lib.vector_rows(struct):
        if not info.calls & call or not rng.integers(2):
            continue
        shape = shapes[int(rng.choice([bit for bit in shapes if int(info.high) & bit]))]
        dtype = np.float32 if int(info.low) == _lib.F32 else np.int32
        args[info.caller.decode()] = (rng.uniform(0, 0.5, shape)).astype(dtype)


def _block_mask(rng, batch, heads, seqlen_q, seqlen_k):
    """block_mask= as a mapping of its rows (hfa/options.def): one query block of 64 rows, key
    blocks of 1-3 keys, each listed once, full or partial, -1 past each count; the batch and
    head dims broadcast at times; a partial block's bits random."""
    block_kv = int(rng.integers(1, 4))
    kv_blocks = -(-seqlen_k // block_kv)
    mask_batch = batch if rng.integers(2) else 1
    mask_heads = heads if rng.integers(2) else 1
    counts = np.zeros((mask_batch, mask_heads, 1), np.int32)
    full_counts = np.zeros_like(counts)
    lists = np.full((mask_batch, mask_heads, 1, kv_blocks), -1, np.int32)
    full_lists = np.full_like(lists, -1)
    for b in range(mask_batch):
        for h in range(mask_heads):
            blocks = rng.permutation(kv_blocks)[:int(rng.integers(0, kv_blocks + 1))]
            full = int(rng.integers(0, len(blocks) + 1))
            full_counts[b, h, 0], counts[b, h, 0] = full, len(blocks) - full
            full_lists[b, h, 0, :full] = blocks[:full]
            lists[b, h, 0, :len(blocks) - full] = blocks[full:]
    bits = rng.integers(-2**31, 2**31, (mask_batch, mask_heads, 1, kv_blocks * 64), np.int64)
    rows = {"kv_num_blocks": counts, "kv_indices": lists, "kv_mask_bits": bits.astype(np.int32),
            "sparse_block_q": 64, "sparse_block_kv": block_kv}
    if rng.integers(2):
        rows.update(full_kv_num_blocks=full_counts, full_kv_indices=full_lists)
    return rows


def forward_case(rng):
    dtype = rng.choice([np.float32, np.float16])
    b, sq, sk = 2, int(rng.integers(1, 7)), int(rng.integers(1, 9))
    args = {"q": _values(rng, (b, sq, 4, 64), dtype), "k": _values(rng, (b, sk, 2, 64), dtype),
            "v": _values(rng, (b, sk, 2, 64), dtype), "causal": bool(rng.integers(2)),
            "window_size": (int(rng.integers(-1, 4)), int(rng.integers(-1, 4))),
            "softcap": float(rng.choice([0.0, 5.0])), "softmax_scale": 0.125,
            "return_attn_probs": True}
    if rng.integers(2):
        args["learnable_sink"] = _values(rng, (4,))
    if rng.integers(2):
        args["out"] = np.zeros((b, sq, 4, 64), dtype)
    if rng.integers(4) == 0:
        args["block_mask"] = _block_mask(rng, b, 4, sq, sk)
    _table_vectors(rng, args, _lib.Options, _lib.CALL_FORWARD, b, 4)
    return Case(hfa.flash_attn_func, args, written=["out"],
                integers=["window_size", "sm_margin", "descale_block_q", "descale_block_kv"],
                floats=["softmax_scale", "softcap"], aliases=[("out", "q"), ("out", "v")])


def varlen_case(rng):
    dtype = rng.choice([np.float32, np.float16])
    lq, lk = rng.integers(0, 6, 3), rng.integers(1, 8, 3)
    tq, tk = int(lq.sum()), int(lk.sum())
    args = {"q": _values(rng, (tq, 4, 64), dtype), "k": _values(rng, (tk, 2, 64), dtype),
            "v": _values(rng, (tk, 2, 64), dtype), "cu_seqlens_q": _cu(lq),
            "cu_seqlens_k": _cu(lk), "max_seqlen_q": max(1, int(lq.max())),
            "max_seqlen_k": int(lk.max()), "causal": bool(rng.integers(2)),
            "return_attn_probs": True}
    if rng.integers(2):
        args["seqused_q"] = np.minimum(lq, 2).astype(np.int32)
        args["seqused_k"] = np.minimum(lk, 3).astype(np.int32)
    if rng.integers(2):
        args["out"] = np.zeros((tq, 4, 64), dtype)
    _table_vectors(rng, args, _lib.Options, _lib.CALL_FORWARD, 3, 4)
    return Case(hfa.flash_attn_varlen_func, args, written=["out"],
                integers=["max_seqlen_q", "max_seqlen_k", "window_size", "num_splits",
                          "sm_margin"],
                floats=["softmax_scale"], aliases=[("out", "q")])


def backward_case(rng):
    dtype = rng.choice([np.float32, np.float16])
    q, k, v = (_values(rng, (2, 5, 2, 64), dtype) for _ in range(3))
    sink = _values(rng, (2,)) if rng.integers(2) else None
    out, lse = hfa.flash_attn_func(q, k, v, causal=True, learnable_sink=sink,
                                   return_attn_probs=True)
    args = {"dout": _values(rng, out.shape, dtype), "q": q, "k": k, "v": v, "out": out,
            "lse": lse, "causal": True, "learnable_sink": sink}
    if rng.integers(2):
        args["softmax_d"] = np.sum(args["dout"].astype(np.float32) * out, -1).transpose(0, 2, 1)
        args["softmax_d"] = np.ascontiguousarray(args["softmax_d"])
    _table_vectors(rng, args, _lib.Options, _lib.CALL_BACKWARD, 2, 2)
    return Case(hfa.flash_attn_backward, args, integers=["window_size", "sm_margin"],
                floats=["softcap"])


def accumulate_case(rng):
    dtype = rng.choice([np.float32, np.float16])
    q, k, v = (_values(rng, (2, 4, 2, 64), dtype) for _ in range(3))
    out, lse = hfa.flash_attn_func(q, k, v, return_attn_probs=True)
    args = {"q": q, "k": _values(rng, (2, 3, 2, 64), dtype),
            "v": _values(rng, (2, 3, 2, 64), dtype), "out": out.astype(np.float32),
            "lse": lse, "causal": bool(rng.integers(2))}
    _table_vectors(rng, args, _lib.Options, _lib.CALL_FORWARD, 2, 2)
    return Case(hfa.flash_attn_accumulate, args, written=["out", "lse"],
                integers=["window_size", "sm_margin"], floats=["softmax_scale"],
                aliases=[("out", "q"), ("lse", "q"), ("out", "k")])


def kvcache_case(rng):
    dtype = rng.choice([np.float32, np.float16])
    b, cap, hkv, d = 2, 16, 2, 64
    seqlens = rng.integers(0, 12, b).astype(np.int32)
    fmt = rng.choice(["plain", "fp8_per_head", "fp8_per_token", "nvfp4", "mxfp4"])
    values = _values(rng, (b, cap, hkv, d))
    args = {"q": _values(rng, (b, int(rng.integers(1, 3)), 4, d), dtype),
            "cache_seqlens": seqlens, "causal": bool(rng.integers(2)),
            "return_softmax_lse": True}
    if fmt == "plain":
        args["k_cache"], args["v_cache"] = values.astype(dtype), values[::-1].astype(dtype)
    else:
        extra = {}
        if fmt == "fp8_per_head":
            extra["scale"] = np.full(hkv, 0.05, np.float32)
        if fmt == "nvfp4":
            extra["global_scale"] = np.full(1, 0.01, np.float32)
            args["k_global_scale"] = args["v_global_scale"] = extra["global_scale"]
        args["k_cache"], args["k_scale"] = hfa.quantize_kv(values, fmt, **extra)
        args["v_cache"], args["v_scale"] = hfa.quantize_kv(values[::-1].copy(), fmt, **extra)
    if rng.integers(2):  # append a token or two
        new = int(rng.integers(1, 3))
        args["k"], args["v"] = (_values(rng, (b, new, hkv, d), dtype) for _ in range(2))
        if rng.integers(2):
            angles = rng.uniform(0, 3, (cap, 16)).astype(dtype)
            args["rotary_cos"], args["rotary_sin"] = np.cos(angles), np.sin(angles)
    _table_vectors(rng, args, _lib.KVCacheOptions, _lib.CALL_KVCACHE, b, 4)
    if rng.integers(3) == 0:
        args["num_splits"] = int(rng.integers(0, 4))
    elif rng.integers(2) == 0:
        args["split_size"] = 8
    # An append writes the caches, and the scales of a format with a scale per token.
    written = ([] if "k" not in args else ["k_cache", "v_cache"] if fmt in ("plain", "fp8_per_head")
               else ["k_cache", "v_cache", "k_scale", "v_scale"])
    return Case(hfa.flash_attn_with_kvcache, args, written=written,
                integers=["cache_seqlens", "num_splits", "split_size", "window_size",
                          "max_seqlen_q", "sm_margin"],
                floats=["softmax_scale", "softcap"],
                aliases=[("k_cache", "q"), ("v_cache", "k_cache"), ("k", "k_cache"),
                         ("k_cache", "k_scale")])


def mla_case(rng):
    """flash_mla_with_kvcache: dense (paged) or sparse, a float cache of q's dtype or FlashMLA's
    FP8 records (random bytes: any value, NaN included, is a record's to hold)."""
    dtype = rng.choice([np.float32, np.float16])
    b, s_q, pages = 2, int(rng.integers(1, 3)), 3
    fp8 = bool(rng.integers(2))
    cache = (rng.integers(0, 256, (pages, 64, 1, 656), dtype=np.uint8) if fp8
             else _values(rng, (pages, 64, 1, 576), dtype))
    args = {"q": _values(rng, (b, s_q, 16, 576), dtype), "k_cache": cache,
            "block_table": None, "cache_seqlens": None, "head_dim_v": 512,
            "tile_scheduler_metadata": hfa.get_mla_metadata()[0], "is_fp8_kvcache": fp8}
    if rng.integers(2):
        args["block_table"] = rng.permutation(pages).astype(np.int32)[:2].reshape(b, 1)
        args["cache_seqlens"] = rng.integers(0, 65, b).astype(np.int32)
        args["causal"] = bool(rng.integers(2))
    else:
        args["indices"] = rng.integers(-1, pages * 64, (b, s_q, 64)).astype(np.int32)
        if rng.integers(2):
            args["topk_length"] = rng.integers(0, 65, b).astype(np.int32)
        if rng.integers(2):
            args["attn_sink"] = _values(rng, (16,))
    return Case(hfa.flash_mla_with_kvcache, args, integers=["head_dim_v"],
                floats=["softmax_scale"])


def merge_case(rng):
    n = int(rng.integers(1, 4))
    shape = (2, 5, 3, 40)
    outs = [_values(rng, shape, rng.choice([np.float32, np.float16])) for _ in range(n)]
    lses = [_values(rng, (2, 3, 5)) for _ in range(n)]
    args = {"outs": outs, "lses": lses}
    if rng.integers(2):
        args["out"] = np.zeros(shape, np.float32)
        args["lse"] = np.zeros((2, 3, 5), np.float32)
    return Case(hfa.merge_partials, args, written=["out", "lse"],
                aliases=[("out", "outs"), ("lse", "lses"), ("out", "lses")])


def quantize_case(rng):
    fmt = str(rng.choice(["fp8_per_head", "fp8_per_token", "nvfp4", "mxfp4"]))
    args = {"x": _values(rng, (3, 2, 64), rng.choice([np.float32, np.float16])), "format": fmt}
    if fmt == "fp8_per_head":
        args["scale"] = np.full(2, 0.05, np.float32)
    if fmt == "nvfp4":
        args["global_scale"] = np.full(1, 0.01, np.float32)
    return Case(hfa.quantize_kv, args)


def dequantize_case(rng):
    quantize = quantize_case(rng).arguments
    fmt = quantize["format"]
    extra = {n: quantize[n] for n in ("scale", "global_scale") if n in quantize}
    codes, scale = hfa.quantize_kv(quantize["x"], fmt, **extra)
    args = {"codes": codes, "scale": scale, "format": fmt}
    if "global_scale" in extra:
        args["global_scale"] = extra["global_scale"]
    return Case(hfa.dequantize_kv, args)


NUMPY_CASES = {"flash_attn_func": forward_case, "flash_attn_varlen_func": varlen_case,
               "flash_attn_backward": backward_case, "flash_attn_accumulate": accumulate_case,
               "flash_attn_with_kvcache": kvcache_case, "merge_partials": merge_case,
               "quantize_kv": quantize_case, "dequantize_kv": dequantize_case,
               "flash_mla_with_kvcache": mla_case}


# --- one fuzzed call ----------------------------------------------------------------------------

def _leading_names(message):
    """The argument names a message starts with ("k: ...", "cu_seqlens_q, cu_seqlens_k: ...")."""
    head, colon, _ = message.partition(":")
    return [n.strip() for n in head.split(",")] if colon else []


def _argument_names(case):
    """The caller's names: the entry point's parameters and the options' rows it takes as
    keywords (given here), and the partials of merge_partials."""
    names = set(inspect.signature(case.entry).parameters) | set(case.arguments)
    for name in ("outs", "lses"):
        names |= {f"{name}[{i}]" for i in range(len(case.arguments.get(name, [])))}
    for value in case.arguments.values():
        if isinstance(value, dict):  # block_mask's rows
            names |= set(value)
    return names


def _is_array(value):
    return isinstance(value, np.ndarray) or type(value).__module__.startswith("torch")


def _arrays(value):
    """(path, array) for every array in an argument (lists of arrays and mappings of them, as
    block_mask's rows, included)."""
    if isinstance(value, (list, tuple)):
        return [(i, v) for i, v in enumerate(value) if _is_array(v)]
    if isinstance(value, dict):
        return [(key, v) for key, v in value.items() if _is_array(v)]
    return [(None, value)] if _is_array(value) else []


class Mutation:
    """One change to a valid call: argument `changed` (or its element) becomes `value`.
    own_fault: an error must name exactly it; same_result: the call gives the valid call's result
    (a change of layout alone), unless may_refuse lets the library refuse it, naming it (a layout
    an output cannot have, data not aligned); must_fail: it must be rejected (a read-only
    output)."""

    def __init__(self, kind, changed, value, own_fault=False, same_result=False,
                 must_fail=False, may_refuse=True, argument=None):
        self.kind, self.changed, self.value = kind, changed, value
        self.argument = argument or changed  # the argument `value` replaces
        self.own_fault, self.same_result, self.must_fail = own_fault, same_result, must_fail
        self.may_refuse = may_refuse

    def __repr__(self):
        return f"{self.kind} of {self.changed}"


def mutations(case, fe, rng):
    """Every change the fuzz may make to this call."""
    out = []
    for name, value in case.arguments.items():
        for index, a in _arrays(value):
            # A mapping's array by its key, the option row the library names.
            label = (name if index is None else index if isinstance(index, str)
                     else f"{name}[{index}]")

            def put(new, name=name, index=index):
                if index is None:
                    return new
                if isinstance(index, str):
                    return {**case.arguments[name], index: new}
                items = list(case.arguments[name])
                items[index] = new
                return items

            written = name in case.written
            for dtype in fe.dtypes:
                changed = fe.astype(a, dtype)
                if changed.dtype != a.dtype:
                    out.append(Mutation("dtype", label, put(changed), argument=name,
                                        own_fault=fe.dtype_is_unlabelled(changed)))
            for kind, view in fe.layouts(a):
                # An input the library cannot take as it is is copied; an output never is.
                out.append(Mutation(kind, label, put(view), argument=name, same_result=True,
                                    may_refuse=written or kind == "unaligned", own_fault=True))
            if fe.has_read_only:
                for kind, view in fe.read_only(a):
                    out.append(Mutation(kind, label, put(view), argument=name, own_fault=True,
                                        same_result=not written, must_fail=written,
                                        may_refuse=written))
            shape = list(a.shape)
            for changed in (shape[1:], [1] + shape, shape[:-1] + [shape[-1] + 1] if shape else [2],
                            [0] + shape[1:] if shape else [0], [2] * 5):
                out.append(Mutation("shape", label, put(fe.reshaped(a, changed)), argument=name,
                                    own_fault=len(changed) > 4))
            for thing in ([1.0, 2.0], 3.0, "q", object()):
                out.append(Mutation("type", label, put(thing), argument=name, own_fault=True))
    for name in case.integers:
        for value in HUGE_INTEGERS + NOT_INTEGERS:
            if name == "window_size":
                value = (value, -1) if rng.integers(2) else (0, value)
            out.append(Mutation("integer", name, value, own_fault=True))
    for name in case.floats:
        for value in ODD_FLOATS:
            out.append(Mutation("float", name, value))
    for output, source in case.aliases:
        if output in case.arguments and source in case.arguments:
            target = case.arguments[source]
            target = target[0] if isinstance(target, list) else target
            out.append(Mutation("alias", output, target))
    return out


def valid_case(make_case, fe, seed):
    """The valid call of `seed`, its arrays the front end's."""
    case = make_case(np.random.default_rng(seed))
    case.arguments = {n: _convert(fe, v) for n, v in case.arguments.items()}
    return case


def run_one(make_case, fe, seed):
    """Builds the valid call for `seed`, applies one random change, checks the outcome."""
    rng = np.random.default_rng(seed + 1_000_003)
    case = valid_case(make_case, fe, seed)
    choices = mutations(case, fe, rng)
    mutation = choices[int(rng.integers(len(choices)))]
    # The valid call's result, from arrays of its own (a call may write into its arrays).
    baseline = valid_case(make_case, fe, seed).call_self() if mutation.same_result else None
    arguments = dict(case.arguments)
    arguments[mutation.argument] = mutation.value
    before = {(n, i): fe.snapshot(a) for n, v in arguments.items() for i, a in _arrays(v)}
    context = f"{case.entry.__name__} seed {seed}: {mutation!r}"
    try:
        result = case.call(arguments)
    except CLEAN_ERRORS as error:
        _check_rejection(case, mutation, error, context)
        changed = [key for key, snap in before.items()
                   if fe.snapshot(_array_at(arguments, key)) != snap]
        assert not changed, f"{context}: rejected, but changed {changed}"
        return "rejected"
    assert not mutation.must_fail, f"{context}: accepted, but the call writes it"
    # An output aliasing an input writes that input: no array is the call's alone then.
    changed = [key for key, snap in before.items()
               if key[0] not in case.written and mutation.kind != "alias"
               and fe.snapshot(_array_at(arguments, key)) != snap]
    assert not changed, f"{context}: changed {changed}, which the call does not write"
    if baseline is not None:
        _check_same(fe, result, baseline, context)
    return "accepted"


def _convert(fe, value):
    if isinstance(value, list):
        return [fe.array(v) if isinstance(v, np.ndarray) else v for v in value]
    if isinstance(value, dict):
        return {k: fe.array(v) if isinstance(v, np.ndarray) else v for k, v in value.items()}
    return fe.array(value) if isinstance(value, np.ndarray) else value


def _array_at(arguments, key):
    name, index = key
    return arguments[name] if index is None else arguments[name][index]


def _check_rejection(case, mutation, error, context):
    message = str(error)
    names = _leading_names(message)
    allowed = _argument_names(case)
    if isinstance(error, NotImplementedError) and not names:
        return  # "not supported on this device / build": no one argument at fault
    if isinstance(error, NotImplementedError) and names == [case.entry.__name__]:
        return
    assert names and all(n in allowed for n in names), \
        f"{context}: {type(error).__name__} names no argument of the call: {message!r}"
    if mutation.own_fault:
        assert mutation.changed in names, \
            f"{context}: the error should name {mutation.changed}: {message!r}"
    if mutation.same_result and not mutation.may_refuse:
        raise AssertionError(f"{context}: a change of layout alone was rejected: {message!r}")


def _check_same(fe, result, baseline, context):
    results = result if isinstance(result, tuple) else (result,)
    baselines = baseline if isinstance(baseline, tuple) else (baseline,)
    assert len(results) == len(baselines), context
    for got, want in zip(results, baselines):
        got, want = fe.to_numpy(got), fe.to_numpy(want)
        assert got.shape == want.shape and got.dtype == want.dtype, context
        assert np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-5,
                           atol=1e-6, equal_nan=True), f"{context}: another result"


def fuzz(make_case, fe, iterations=ITERATIONS, first_seed=0):
    """Runs `iterations` fuzzed calls; returns how many were accepted and rejected."""
    outcomes = {"accepted": 0, "rejected": 0}
    for seed in range(first_seed, first_seed + iterations):
        outcomes[run_one(make_case, fe, seed)] += 1
    return outcomes
