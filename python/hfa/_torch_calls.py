"""Calls of the C ABI on torch tensors through ctypes, with no op registered: what
python/hfa/_torch_ctypes.py registers its ops over, and the calls no op takes (an accumulating
forward, a backward with a given softmax_d: hfa.flash_attn_accumulate and flash_attn_backward's
softmax_d), reached from either set of ops. CUDA tensors run on torch's current stream of their
device; workspaces are allocated with torch.
"""

import contextlib

import torch

from . import _args, _lib

Tensor = torch.Tensor

# torch's dtypes as hfa._args' element kinds (uint8: the bytes of FP8 / FP4 codes and scales
# where torch has no dtype for them). The fp8 dtypes exist from torch 2.1, e8m0 from 2.7.
KINDS = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
         torch.int32: "i32", torch.uint8: "u8"}
for _name, _kind in (("float8_e4m3fn", "e4m3"), ("float8_e5m2", "e5m2"),
                     ("float8_e8m0fnu", "e8m0")):
    if hasattr(torch, _name):
        KINDS[getattr(torch, _name)] = _kind


def kind_of(t, name: str):
    """t's element kind (KINDS'; the dtype's name for a dtype hfa has no kind for), or TypeError
    naming argument `name` when t is no tensor."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    kind = KINDS.get(t.dtype)
    return kind if kind is not None else str(t.dtype)


def full_lengths(like: Tensor, batch: int, length: int) -> Tensor:
    """int32 (batch,) of `length` on like's device: one length for every sequence."""
    return torch.full((batch,), length, dtype=torch.int32, device=like.device)


def longest_sequence(cu_seqlens: Tensor) -> int:
    """The most rows of a sequence of varlen offsets (a host read: a sync for CUDA tensors)."""
    return int((cu_seqlens[1:] - cu_seqlens[:-1]).max().item())


def view(t: Tensor, name: str, bytes_as=None):
    """(tensor kept alive, hfa Tensor) of an input. A tensor whose last dim is not unit-stride is
    copied, and so is a broadcast (a stride of 0 over several elements, e.g. the expanded
    gradient of a sum: a GPU's TMA cannot read one); other strides go to the library unchanged."""
    if isinstance(t, torch.Tensor) and t.dim() and (
            (t.shape[-1] > 1 and t.stride(-1) != 1)
            or any(n > 1 and s == 0 for n, s in zip(t.shape, t.stride()))):
        t = t.contiguous()
    return t, view_as_is(t, name, bytes_as)


def view_as_is(t: Tensor, name: str, bytes_as=None):
    """The hfa Tensor of t with all its strides (outputs, and descales, which may be broadcast
    views), labelled with t's own dtype (uint8 as the byte format bytes_as: hfa._args). torch
    has no read-only tensors: what the library writes is the caller's to keep unshared."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    code = _args.array_code(name, KINDS.get(t.dtype), t.dtype, bytes_as)
    _args.check_array(name, t.dim(), True, False)
    if t.device.type == "cuda":
        device, index = _lib.CUDA, t.device.index if t.device.index is not None else 0
    elif t.device.type == "cpu":
        device, index = _lib.CPU, 0
    else:
        raise ValueError(f"{name}: device {t.device} is not supported (cpu or cuda)")
    return _lib.make_tensor(t.data_ptr(), code, t.shape, t.stride(), device, index)


@contextlib.contextmanager
def on_device(t: Tensor):
    """Make t's GPU current for the call (the library launches on the current device)."""
    if t.device.type == "cuda":
        with torch.cuda.device(t.device):
            yield
    else:
        yield


def workspace(nbytes: int, device):
    """(tensor, address) of nbytes on device: a prepared call's workspace (hfa._lib.run). Freed
    after the launch, torch's allocator reuses it in stream order."""
    scratch = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return scratch, scratch.data_ptr()


class CallArguments:
    """The options of one library call plus everything they point at, kept alive together."""

    def __init__(self, ref: Tensor, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                 softmax_scale, causal, window_left, window_right, softcap, deterministic,
                 sinks=None, seqused_q=None, seqused_k=None, dsinks=None, q_descale=None,
                 k_descale=None, v_descale=None, descale_block_q=0, descale_block_kv=0,
                 sm_margin=0, accumulate=False, softmax_d=None, table_vectors=None,
                 table_tensors=None, table_scalars=None):
        self.keep = []
        fields = {}  # the options' fields given, by name
        # The ops' `vectors`: entry n sets the n-th VECTOR row (hfa._lib.vector_rows); their
        # TENSOR rows come by field (hfa._lib.op_arguments).
        tensors = dict(zip((info.name.decode() for info in _lib.vector_rows(_lib.Options)),
                           table_vectors or ()))
        tensors.update(table_tensors or {})
        rows = _lib.option_rows(_lib.Options)
        for field, t in tensors.items():
            if t is not None:
                t, fields[field] = view(t, rows[field].caller.decode())
                self.keep += [t, fields[field]]
        # The options' field, and the caller's name of what is given there. cu_seqlens_q without
        # cu_seqlens_k, or the other way round, is the library's to name.
        for field, name, t in (("cu_seqlens_q", "cu_seqlens_q", cu_seqlens_q),
                               ("cu_seqlens_k", "cu_seqlens_k", cu_seqlens_k),
                               ("sinks", "learnable_sink", sinks),
                               ("seqused_q", "seqused_q", seqused_q),
                               ("seqused_k", "seqused_k", seqused_k),
                               ("dsinks", "dsinks", dsinks)):
            if t is not None:
                t, fields[field] = view(t, name)
                self.keep += [t, fields[field]]
        for name, t in (("q_descale", q_descale), ("k_descale", k_descale),
                        ("v_descale", v_descale)):
            if t is not None:
                fields[name] = view_as_is(t, name)
                self.keep += [t, fields[name]]
        if softmax_d is not None:
            softmax_d, fields["softmax_d"] = view(softmax_d, "softmax_d")
            self.keep += [softmax_d, fields["softmax_d"]]
        stream = None
        if ref.device.type == "cuda":
            stream = torch.cuda.current_stream(ref.device).cuda_stream
        self.options = _lib.make_options(
            softmax_scale=softmax_scale, causal=causal, window_size=(window_left, window_right),
            softcap=softcap, deterministic=deterministic, max_seqlen_q=max_seqlen_q,
            max_seqlen_k=max_seqlen_k, stream=stream, descale_block_q=descale_block_q,
            descale_block_kv=descale_block_kv, sm_margin=sm_margin, accumulate=accumulate,
            **fields)
        # The ops' `scalars`: (row, value) pairs, set after the named arguments (hfa._lib).
        if table_scalars:
            _lib.set_scalars(self.options, table_scalars)


def forward_into(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
             softmax_scale, causal, window_left, window_right, softcap, sinks, seqused_q,
             seqused_k, q_descale=None, k_descale=None, v_descale=None, descale_block_q=0,
             descale_block_kv=0, sm_margin=0, accumulate=False, vectors=None, tensors=None,
             scalars=None) -> None:
    """The library's forward into out and lse, taken as they are (with accumulate: merged
    into them). vectors, tensors and scalars: the ops' option arguments
    (hfa._lib.op_arguments)."""
    q, qt = view(q, "q")
    k, kt = view(k, "k")
    v, vt = view(v, "v")
    ot, lt = view_as_is(out, "out"), view_as_is(lse, "lse")
    args = CallArguments(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         softmax_scale, causal, window_left, window_right, softcap, False, sinks,
                         seqused_q, seqused_k, None, q_descale, k_descale, v_descale,
                         descale_block_q, descale_block_kv, sm_margin, accumulate,
                         table_vectors=vectors, table_tensors=tensors, table_scalars=scalars)
    with on_device(q):
        _lib.run(_lib.prepare_forward(qt, kt, vt, ot, lt, args.options),
                 lambda nbytes: workspace(nbytes, q.device))


def backward_into(dout, q, k, v, out, lse, dq, dk, dv, dsinks, cu_seqlens_q, cu_seqlens_k,
                  max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right,
                  softcap, deterministic, sinks, seqused_q, seqused_k, sm_margin=0,
                  softmax_d=None, vectors=None, tensors=None, scalars=None) -> None:
    """The library's backward into dq, dk, dv (and dsinks with sinks), taken as they are.
    softmax_d: the given D = rowsum(dout * out), float32 laid out as lse (out is then not
    read)."""
    dout, dot = view(dout, "dout")
    q, qt = view(q, "q")
    k, kt = view(k, "k")
    v, vt = view(v, "v")
    out, ot = view(out, "out")
    lse, lt = view(lse, "lse")
    dqt, dkt, dvt = view_as_is(dq, "dq"), view_as_is(dk, "dk"), view_as_is(dv, "dv")
    args = CallArguments(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         softmax_scale, causal, window_left, window_right, softcap, deterministic,
                         sinks, seqused_q, seqused_k, dsinks if sinks is not None else None,
                         sm_margin=sm_margin, softmax_d=softmax_d, table_vectors=vectors,
                         table_tensors=tensors, table_scalars=scalars)
    with on_device(q):
        _lib.run(_lib.prepare_backward(dot, qt, kt, vt, ot, lt, dqt, dkt, dvt, args.options),
                 lambda nbytes: workspace(nbytes, q.device))
