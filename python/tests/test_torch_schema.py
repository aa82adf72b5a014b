"""The torch ops' schemas against the options' one description (include/hfa/options.def, which
the library exports: hfa_describe_options, hfa._lib.OPTION_INFO).

An op's schema is its positional ABI, written out where it is registered (src/torch/ops.cpp,
python/hfa/_torch_ctypes.py) and read by the Python front end and the fake kernels. Its option
arguments are checked here against the rows they set: each is a row, named by the row's field
(window_left and window_right are two ints where the caller writes one window_size), of the
type the row's kind takes, with the row's default where it has one (a number); it is read by
one of the op's calls; and the full ops take every row their calls read but those listed in
NOT_ARGUMENTS. So a row and a schema cannot drift apart
silently: a new row, a renamed field, a kind changed, fails here until the schemas follow.
The fakes' parameters are checked against the schemas, and the ctypes path's schemas against the
native ones.
"""

import ast
import inspect
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip(
    "torch", minversion="2.4",
    reason="torch is not installed: the torch ops' schemas are untested on this machine")

from hfa import _lib, _torch  # noqa: E402  (after the importorskip on purpose)

_lib.library()  # the description (OPTION_INFO) is read when the library loads

# The schema types an option of each kind takes; a TENSOR row may be a required Tensor where an
# op requires it (the plain ops' cu_seqlens, the KV-cache ops' cache_seqlens).
KIND_TYPES = {_lib.FLAG: ("bool",), _lib.INT32: ("int",), _lib.REAL: ("float",),
              _lib.SCALE: ("float?",), _lib.TENSOR: ("Tensor?", "Tensor")}
KIND_NAMES = {_lib.FLAG: "FLAG", _lib.INT32: "INT32", _lib.REAL: "REAL", _lib.SCALE: "SCALE",
              _lib.TENSOR: "TENSOR", _lib.HANDLE: "HANDLE", _lib.BYTES: "BYTES",
              _lib.VECTOR: "VECTOR"}

# The VECTOR rows have no argument of their own: every full op takes them all in one list,
# entry n for the struct's n-th VECTOR row (src/torch/ops.cpp), so a new row needs no schema edit.
VECTORS = ("vectors", "Tensor?[]?")

# What an op takes besides options: the call's tensors, and the KV-cache ops' formats of the
# caches and their scales (resolved by python/hfa/_kvcache.py).
OPERANDS = {"q", "k", "v", "out", "lse", "dout", "k_cache", "v_cache", "cache_code", "scale_code"}

# The rows no op takes, and what gives their value instead.
NOT_ARGUMENTS = {
    "stream": "torch's current stream",
    "workspace": "torch's allocator",
    "workspace_bytes": "torch's allocator",
    "dsinks": "an output of hfa::bwd",
    "accumulate": "hfa.flash_attn_accumulate, through the C ABI (an in-place merge is no op's)",
    "softmax_d": "flash_attn_backward(softmax_d=), through the C ABI",
    "validate": "the environment (HFA_VALIDATE_KVCACHE=1)",
}

F, B, KV = 1, 2, 4  # hfa_option_calls
# Each op: its options struct, the calls whose options it takes (an op with an autograd kernel
# also takes what its backward reads), and whether it takes every row of those calls (the full
# ops; the plain ones take what a plain call gives).
OPS = {
    "fwd": (_lib.Options, F | B, True),
    "fwd_into": (_lib.Options, F, True),
    "bwd": (_lib.Options, B, True),
    "attention": (_lib.Options, F | B, False),
    "varlen_attention": (_lib.Options, F | B, False),
    "fwd_kvcache": (_lib.KVCacheOptions, KV, True),
    "fwd_kvcache_into": (_lib.KVCacheOptions, KV, True),
    "kvcache_attention": (_lib.KVCacheOptions, KV, False),
}


def spelled(t):
    """torch's type as a schema spells it: Optional[float] -> float?,
    Optional[List[Optional[Tensor]]] -> Tensor?[]?"""
    s = str(t)
    if s.startswith("Optional["):
        return spelled(s[len("Optional["):-1]) + "?"
    if s.startswith("List["):
        return spelled(s[len("List["):-1]) + "[]"
    return s


def disagreements(schema, rows, calls, complete):
    """Where an op's schema (torch's FunctionSchema) disagrees with the description's rows
    ({field name: hfa_option_info}) of the calls it makes, as messages naming the argument."""
    problems, taken = [], set()
    for arg in schema.arguments:
        if arg.name in OPERANDS:
            continue
        if arg.name == VECTORS[0]:
            if spelled(arg.type) != VECTORS[1]:
                problems.append(f"vectors: {spelled(arg.type)} in the schema, not {VECTORS[1]}")
            taken.update(name for name, row in rows.items() if row.kind == _lib.VECTOR)
            continue
        taken.add(arg.name)
        row = rows.get(arg.name)
        if row is None:
            problems.append(f"{arg.name}: no row of the description has this name")
            continue
        kind, wanted = KIND_NAMES[row.kind], KIND_TYPES.get(row.kind, ())
        if spelled(arg.type) not in wanted:
            problems.append(f"{arg.name}: {spelled(arg.type)} in the schema, but its row's kind "
                            f"is {kind}, which takes {' or '.join(wanted) or 'no argument'}")
        if not row.calls & calls:
            problems.append(f"{arg.name}: the op's calls do not read it")
        default = arg.default_value
        if isinstance(default, (bool, int, float)) and default != row.default_value:
            problems.append(f"{arg.name}: default {default!r} in the schema, but its row's is "
                            f"{row.default_value:g}")
    if complete:
        problems += [f"{name}: a row the op's calls read, missing from the schema"
                     for name, row in rows.items()
                     if row.calls & calls and name not in taken and name not in NOT_ARGUMENTS]
    return problems


def registered(name):
    """hfa::<name>'s schema, or a skip where this path does not register it."""
    if not hasattr(torch.ops.hfa, name):
        pytest.skip(f"hfa::{name} is the native ops' alone; these run through {_torch.OPS}")
    return getattr(torch.ops.hfa, name).default._schema


@pytest.mark.parametrize("op", OPS)
def test_option_arguments_are_rows_of_the_description(op):
    struct, calls, complete = OPS[op]
    assert disagreements(registered(op), _lib.OPTION_INFO[struct], calls, complete) == []


def test_a_schema_that_drifted_from_its_row_is_named():
    """The check above, on schemas that disagree with the description each in one way."""
    rows, fb = _lib.OPTION_INFO[_lib.Options], F | B

    def problems(arguments, calls=fb, complete=False):
        schema = torch._C.parse_schema(f"hfa::drifted(Tensor q, {arguments}) -> Tensor")
        return disagreements(schema, rows, calls, complete)

    assert problems("float? softmax_scale, bool causal, int window_left, Tensor? sinks") == []
    assert problems("int causal") == [
        "causal: int in the schema, but its row's kind is FLAG, which takes bool"]
    assert problems("float softmax_scale") == [
        "softmax_scale: float in the schema, but its row's kind is SCALE, which takes float?"]
    assert problems("float window_left, int softcap") == [
        "window_left: float in the schema, but its row's kind is INT32, which takes int",
        "softcap: int in the schema, but its row's kind is REAL, which takes float"]
    assert problems("int sinks") == [
        "sinks: int in the schema, but its row's kind is TENSOR, which takes Tensor? or Tensor"]
    # Named by the caller's word, not the row's field: no row has that name.
    assert problems("Tensor? learnable_sink, int window_size") == [
        "learnable_sink: no row of the description has this name",
        "window_size: no row of the description has this name"]
    assert problems("int stream") == [
        "stream: int in the schema, but its row's kind is HANDLE, which takes no argument"]
    assert problems("Tensor? q_descale", calls=B) == ["q_descale: the op's calls do not read it"]
    assert problems("Tensor[] vectors") == ["vectors: Tensor[] in the schema, not Tensor?[]?"]
    assert problems("int sparse_block_q=64") == [
        "sparse_block_q: default 64 in the schema, but its row's is 128"]
    missing = problems("float? softmax_scale", complete=True)
    assert "causal: a row the op's calls read, missing from the schema" in missing
    assert not any(m.startswith(tuple(NOT_ARGUMENTS)) for m in missing)


# The fake kernels that name their parameters (the others take *args: python/hfa/_torch.py).
FAKES = {"fwd": "_fwd_fake", "bwd": "_bwd_fake", "fwd_into": "_fwd_into_fake"}


@pytest.mark.parametrize("op", FAKES)
def test_fake_kernels_take_the_schemas_arguments(op):
    schema = registered(op)
    parameters = inspect.signature(getattr(_torch, FAKES[op])).parameters.values()
    assert [(p.name, p.kind == p.KEYWORD_ONLY) for p in parameters] == [
        (a.name, a.kwarg_only) for a in schema.arguments]


def signature(schema):
    """An op's signature as its callers see it: each argument's name, type (custom_op infers
    SymInt where ops.cpp says int: both take a Python int), default and whether it is
    keyword-only, and the types it returns."""
    return ([(a.name, str(a.type), repr(a.default_value), a.kwarg_only) for a in schema.arguments],
            [str(r.type) for r in schema.returns])


def signatures_through(mode):
    """The signatures of hfa::fwd and hfa::bwd as HFA_TORCH_OPS=mode registers them, from a
    process of its own (a process holds one registration of each); None where that mode does
    not load."""
    script = ("import torch, test_torch_schema as t\n"
              "print([t.signature(op.default._schema) "
              "for op in (torch.ops.hfa.fwd, torch.ops.hfa.bwd)])\n")
    env = dict(os.environ, HFA_TORCH_OPS=mode, PYTHONPATH=os.pathsep.join(filter(None, sys.path)))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        assert "HFA_TORCH_OPS=native" in done.stderr, done.stderr
        return None
    return ast.literal_eval(done.stdout)


def test_the_ctypes_ops_have_the_native_signatures():
    """python/hfa/_torch_ctypes.py registers hfa::fwd and hfa::bwd with the arguments of
    src/torch/ops.cpp's: the front end calls either positionally."""
    here = [signature(registered(op)) for op in ("fwd", "bwd")]
    other = signatures_through("ctypes" if _torch.NATIVE else "native")
    if other is None:
        pytest.skip("the native torch ops are not built here: nothing to compare with")
    assert other == here


def test_the_spelled_schemas_are_the_inferred_ones():
    """The schemas the ctypes ops spell out for a torch that cannot infer `vectors` (2.11) are
    the ones a torch that can infers: checked wherever inference takes it."""
    if _torch.NATIVE:
        pytest.skip("the native ops are loaded: the ctypes ops are not registered")
    from hfa import _torch_ctypes as ctypes_ops
    for op in (ctypes_ops.fwd, ctypes_ops.bwd):
        fn = op._init_fn
        try:
            inferred = torch.library.infer_schema(fn, mutates_args=())
        except ValueError:
            pytest.skip("this torch infers no Optional[List[Optional[Tensor]]]")
        assert ctypes_ops.spelled_schema(fn) == inferred
