"""The torch ops' schemas against the options' one description (include/hfa/options.def, which
the library exports: hfa_describe_options, hfa._lib.OPTION_INFO).

An op's schema is its positional ABI, written out where it is registered (src/torch/ops.cpp,
python/hfa/_torch_ctypes.py) and read by the Python front end and the fake kernels. Its option
arguments are checked here against the rows they set: each is a row, named by the row's field
(window_left and window_right are two ints where the caller writes one window_size), of the
type the row's kind takes, with the row's default where it has one (a number); it is read by
one of the op's calls; and the full ops take every row their calls read but those listed in
NOT_ARGUMENTS: every VECTOR row in `vectors`, every scalar row in `scalars` (some also by name,
FlashAttention's parameters) and every TENSOR row as an argument of its name. So a row and a
schema cannot drift apart silently: a new row, a renamed field, a kind changed, fails here
until the schemas follow.
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
# Nor need the scalar rows (FLAG, INT32, REAL, SCALE) one: every full op takes (row, value) pairs
# of any of them in one list too, so a new scalar row needs no schema edit either.
SCALARS = ("scalars", "float[]?")

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
    problems, taken, lists_given = [], set(), set()
    lists = {VECTORS: (_lib.VECTOR,), SCALARS: _lib.SCALARS}
    for arg in schema.arguments:
        if arg.name in OPERANDS:
            continue
        listed = next((lst for lst in lists if lst[0] == arg.name), None)
        if listed is not None:
            if spelled(arg.type) != listed[1]:
                problems.append(f"{listed[0]}: {spelled(arg.type)} in the schema, not "
                                f"{listed[1]}")
            taken.update(name for name, row in rows.items() if row.kind in lists[listed])
            lists_given.add(listed)
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
        # A full op takes each list its calls read a row of, even where arguments of their own
        # name every such row so far: the front end sends a keyword row of those kinds there.
        problems += [f"{lst[0]}: missing from the schema, but the op's calls read rows of its "
                     "kinds" for lst, kinds in lists.items()
                     if lst not in lists_given
                     and any(row.kind in kinds and row.calls & calls for row in rows.values())]
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
    assert problems("int[]? scalars") == ["scalars: int[]? in the schema, not float[]?"]
    assert problems("int sm_margin=1") == [
        "sm_margin: default 1 in the schema, but its row's is 0"]
    missing = problems("float? softmax_scale", complete=True)
    assert "causal: a row the op's calls read, missing from the schema" in missing
    assert "scalars: missing from the schema, but the op's calls read rows of its kinds" in missing
    assert "vectors: missing from the schema, but the op's calls read rows of its kinds" in missing
    assert not any(m.startswith(tuple(NOT_ARGUMENTS)) for m in missing)
    # The lists take every row of their kinds: what is missing then is the tensors alone.
    missing = problems("Tensor?[]? vectors=None, float[]? scalars=None", complete=True)
    assert missing and all(rows[m.split(":")[0]].kind == _lib.TENSOR for m in missing), missing


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


# --- the scalar rows through the ops ------------------------------------------------------------
#
# Every INT32, REAL and SCALE row of a call reaches the library through an op's `scalars`: a value
# outside the row's range is refused by a message naming the row's field, which only the library
# writes (FLAG rows take any value: they ride the same code). Walked from the description, so a
# row added to the table is tested here with no new test code.

def outside(row):
    """A value outside a row's range, or None where its kind has none."""
    if row.kind == _lib.INT32:
        return int(row.low) - 1 if row.low > -2 ** 31 else None
    return float("nan") if row.kind in (_lib.REAL, _lib.SCALE) else None


def refused_rows(struct, calls):
    """(index among the struct's rows, row) of every scalar row `calls` read that has a value
    outside its range."""
    return [(n, row) for n, row in enumerate(_lib.OPTION_INFO[struct].values())
            if row.kind in _lib.SCALARS and row.calls & calls and outside(row) is not None]


def attention_args(grad=False):
    q, k, v = (torch.randn(1, 3, 2, 64, requires_grad=grad) for _ in range(3))
    return q, k, v, (None, None, 0, 0, None, False, -1, -1, 0.0, False)


@pytest.mark.parametrize("op", ["fwd", "bwd"])
def test_every_scalar_row_reaches_the_library(op):
    struct, calls, _ = OPS[op]
    rows = refused_rows(struct, F if op == "fwd" else B)
    assert rows, "no scalar row with a range"
    q, k, v, options = attention_args()
    out, lse = torch.ops.hfa.fwd(q, k, v, *options)
    for n, row in rows:
        scalars = [float(n), float(outside(row))]
        with pytest.raises(ValueError, match=f"^{row.name.decode()}: "):
            if op == "fwd":
                torch.ops.hfa.fwd(q, k, v, *options, scalars=scalars)
            else:
                torch.ops.hfa.bwd(out, q, k, v, out, lse, *options, scalars=scalars)


def test_the_scalars_ride_autograd_into_the_backward():
    """hfa::fwd's autograd hands its scalars to hfa::bwd: a row the backward alone checks
    fails there."""
    q, k, v, options = attention_args(grad=True)
    rows = {row.name.decode(): n for n, row in enumerate(_lib.OPTION_INFO[_lib.Options].values())}
    out, _ = torch.ops.hfa.fwd(q, k, v, *options, scalars=[rows["deterministic"], 1.0])
    out.sum().backward()  # a flag: any value is taken
    assert q.grad is not None
    out, _ = torch.ops.hfa.fwd(q, k, v, *options, scalars=[rows["sm_margin"], 2.0])
    out.sum().backward()
    with pytest.raises(ValueError, match="^sm_margin: must be >= 0"):
        torch.ops.hfa.fwd(q, k, v, *options, scalars=[rows["sm_margin"], -1.0])


def test_a_scalar_pair_that_names_no_scalar_row_is_refused():
    q, k, v, options = attention_args()
    rows = list(_lib.OPTION_INFO[_lib.Options])
    for scalars, message in (([float(rows.index("sinks")), 1.0], "is no scalar row"),
                             ([1000.0, 1.0], "is no scalar row"), ([0.0], "pairs"),
                             ([float(rows.index("sm_margin")), 0.5], "sm_margin: 0.5 is not an int32")):
        with pytest.raises(ValueError, match=message):
            torch.ops.hfa.fwd(q, k, v, *options, scalars=scalars)


def test_the_front_end_sends_a_scalar_row_by_its_callers_name(monkeypatch):
    """A scalar row no entry point names (hfa._lib.caller_rows) is a keyword of the torch front
    end, as of the numpy one: it reaches hfa::fwd as its pair in `scalars` (the test above
    follows the pair into the library)."""
    import hfa
    rows = list(_lib.OPTION_INFO[_lib.Options])
    callers = {name: row for name, row in _lib.caller_rows(_lib.Options, _lib.CALL_FORWARD).items()
               if row.kind in _lib.SCALARS}
    assert callers
    sent = []

    def recording_fwd(*args, **kwargs):
        sent.append(kwargs.get("scalars"))
        return real_fwd(*args, **kwargs)

    real_fwd = _torch._fwd
    monkeypatch.setattr(_torch, "_fwd", recording_fwd)
    q, k, v, _ = attention_args()
    for name, row in callers.items():
        value = int(row.low) if row.kind == _lib.INT32 else 1.0
        hfa.flash_attn_func(q, k, v, **{name: value})
        assert sent.pop() == [float(rows.index(row.name.decode())), float(value)], name


def test_the_front_end_sends_each_row_one_way(monkeypatch):
    """Keyword rows of every kind the ops take (hfa._lib.op_arguments) reach hfa::fwd and
    hfa::bwd each one way: the VECTOR row in `vectors`, the block-sparse TENSOR rows by their
    names and their block sizes (INT32 rows) in `scalars`. The library reads them all: block
    sizes other than the defaults fit the mask's extents, and a mask of no bit leaves every row
    without a key (O = 0)."""
    import hfa
    rows = list(_lib.OPTION_INFO[_lib.Options])
    sent = {}

    def recording(name, real):
        def op(*args, **kwargs):
            sent[name] = (args[-1], kwargs)
            return real(*args, **kwargs)
        monkeypatch.setattr(_torch, name, op)

    recording("_fwd", _torch._fwd)
    recording("_bwd", _torch._bwd)
    q, k, v, _ = attention_args()
    int32 = dict(dtype=torch.int32)
    block_mask = {"kv_num_blocks": torch.ones(1, 1, 1, **int32),
                  "kv_indices": torch.zeros(1, 1, 1, 1, **int32),
                  "kv_mask_bits": torch.zeros(1, 1, 1, 64, **int32),  # 64 rows of one word
                  "sparse_block_q": 64, "sparse_block_kv": 32}
    slopes = torch.ones(2)
    out, lse = hfa.flash_attn_func(q, k, v, alibi_slopes=slopes, block_mask=block_mask,
                                   return_attn_probs=True)
    assert torch.equal(out, torch.zeros_like(out)) and bool(lse.isneginf().all())
    hfa.flash_attn_backward(out, q, k, v, out, lse, alibi_slopes=slopes, block_mask=block_mask)
    sizes = [float(rows.index("sparse_block_q")), 64.0, float(rows.index("sparse_block_kv")),
             32.0]
    for op in ("_fwd", "_bwd"):
        vectors, named = sent[op]
        assert vectors == [slopes if info.name == b"alibi_slopes" else None
                           for info in _lib.vector_rows(_lib.Options)], op
        assert sorted(named) == ["kv_indices", "kv_mask_bits", "kv_num_blocks", "scalars"], op
        assert named["scalars"] == sizes, op
