"""The torch front end: custom ops hfa::fwd / hfa::bwd, autograd, torch.compile.

Runs on the CPU, and on CUDA when torch sees a GPU and this libhfa was built with CUDA. Outputs
and gradients are compared with the float64 reference (reference.py) under docs/design.md §6's rule,
max|ours − oracle| ≤ 2·max|peer − oracle| + floor, on both devices alike. The CUDA-only tests at
the end check the GPU backward further: gradients against float64 autograd of a plain torch
attention (small shapes, every option), a large GQA problem against PyTorch SDPA, bitwise
reproducibility with deterministic=True, no host synchronization, and the backward under
torch.compile.
"""

import zlib

import numpy as np
import pytest

# hfa's ops need torch.library.custom_op (torch >= 2.4); an older torch skips, saying so.
torch = pytest.importorskip(
    "torch", minversion="2.4",
    reason="torch is not installed: the torch front end (custom ops, autograd, torch.compile) "
           "is untested on this machine; the numpy tests still run")

import hfa  # noqa: E402  (after the importorskip on purpose)
from torch_devices import DEVICES, cuda_only  # noqa: E402
from reference import attention, check_s6, lse_floor, max_err, visible  # noqa: E402


# Per device: the dtypes tested (numpy has no bf16, so the torch tests cover it).
DTYPES = {"cpu": [torch.float32, torch.bfloat16], "cuda": [torch.bfloat16, torch.float16]}
LOWP = {torch.float32: None, torch.bfloat16: "bfloat16", torch.float16: "float16"}


def dtype_id(dtype):
    return str(dtype).split(".")[-1]


def rand(rng, shape, dtype, device, grad=False):
    t = torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(device, dtype)
    return t.requires_grad_(grad)


def to_np(t):
    return t.detach().float().cpu().numpy()


def gradients_of(out, q, k, v, sink):
    """(out and the leaves' gradients as numpy, the leaves by name) after out.backward(); with
    sinks, their float32 gradient too."""
    got = {"out": to_np(out), "dq": to_np(q.grad), "dk": to_np(k.grad), "dv": to_np(v.grad)}
    leaves = {"q": q, "k": k, "v": v}
    if sink is not None:
        assert sink.grad is not None and sink.grad.dtype == torch.float32
        got["dsink"] = to_np(sink.grad)
        leaves["sink"] = sink
    return got, leaves


def cu_seqlens(lens, device):
    """int32 (len(lens) + 1,): the offsets of sequences of lengths `lens`."""
    return torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device=device)


def device_dtype_params():
    out = []
    for dev in DEVICES:
        for dt in DTYPES[dev.values[0]]:
            out.append(pytest.param(dev.values[0], dt, marks=dev.marks,
                                    id=f"{dev.values[0]}-{str(dt).split('.')[-1]}"))
    return out


CASES = {
    # (batch, seqlen_q, seqlen_k, heads_q, heads_kv, headdim, options)
    "plain": (2, 33, 33, 2, 2, 64, {}),
    "causal_q_lt_k": (1, 40, 97, 2, 2, 128, {"causal": True}),
    "causal_q_gt_k": (1, 70, 30, 2, 2, 64, {"causal": True}),
    "window": (1, 64, 80, 2, 2, 64, {"window_size": (12, 3)}),
    "softcap_gqa": (2, 45, 45, 6, 2, 128, {"softcap": 20.0, "causal": True}),
}


@pytest.mark.parametrize("device,dtype", device_dtype_params())
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_autograd_against_reference(case, device, dtype):
    b, sq, sk, hq, hk, d, opts = CASES[case]
    rng = np.random.default_rng(zlib.crc32(repr((case, device, str(dtype))).encode()))
    q = rand(rng, (b, sq, hq, d), dtype, device, grad=True)
    k = rand(rng, (b, sk, hk, d), dtype, device, grad=True)
    v = rand(rng, (b, sk, hk, d), dtype, device, grad=True)
    out, lse = hfa.flash_attn_func(q, k, v, return_attn_probs=True, **opts)
    assert out.dtype == dtype and out.device == q.device and lse.dtype == torch.float32
    assert lse.shape == (b, hq, sq) and not lse.requires_grad  # no gradient through the LSE
    dout = rand(rng, out.shape, dtype, device)

    ref_opts = dict(causal=opts.get("causal", False), window=opts.get("window_size", (-1, -1)),
                    softcap=opts.get("softcap", 0.0))
    args = [to_np(x) for x in (q, k, v, dout)]
    oracle = attention(*args, **ref_opts)
    peer = attention(*args, compute=np.float32, lowp=LOWP[dtype], **ref_opts)
    check_s6("out", to_np(out), oracle["out"], peer["out"])
    check_s6("lse", to_np(lse), oracle["lse"], peer["lse"], floor=lse_floor(oracle["lse"]))
    out.backward(dout)
    for name, x in (("dq", q), ("dk", k), ("dv", v)):
        assert x.grad.dtype == dtype and x.grad.shape == x.shape
        check_s6(name, to_np(x.grad), oracle[name], peer[name])


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_autograd(device):
    dtype = DTYPES[device][-1]
    rng = np.random.default_rng(11)
    lq, lk = [1, 30, 0, 17], [9, 30, 4, 40]
    cu_q = cu_seqlens(lq, device)
    cu_k = cu_seqlens(lk, device)
    q = rand(rng, (sum(lq), 4, 64), dtype, device, grad=True)
    k = rand(rng, (sum(lk), 2, 64), dtype, device, grad=True)
    v = rand(rng, (sum(lk), 2, 64), dtype, device, grad=True)
    out, lse = hfa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True,
                                          return_attn_probs=True)
    assert lse.shape == (4, sum(lq))
    dout = rand(rng, out.shape, dtype, device)
    kw = dict(cu_seqlens_q=cu_q.cpu().numpy(), cu_seqlens_k=cu_k.cpu().numpy(), causal=True)
    args = [to_np(x) for x in (q, k, v, dout)]
    oracle = attention(*args, **kw)
    peer = attention(*args, compute=np.float32, lowp=LOWP[dtype], **kw)
    check_s6("out", to_np(out), oracle["out"], peer["out"])
    out.backward(dout)
    for name, x in (("dq", q), ("dk", k), ("dv", v)):
        check_s6(name, to_np(x.grad), oracle[name], peer[name])


@pytest.mark.parametrize("device,dtype", device_dtype_params())
def test_sinks_and_seqused_autograd(device, dtype):
    """learnable_sink gets its gradient through autograd; seqused_q/k limit each sequence. The
    explicit backward gives the same four gradients, bit for bit: on CUDA both run with
    deterministic=True, as the default GPU backward may add partial sums in any order."""
    det = device == "cuda"
    rng = np.random.default_rng(21)
    lq, lk, uq, uk = [20, 0, 33], [25, 9, 40], [13, 0, 30], [25, 3, 17]
    cu_q = cu_seqlens(lq, device)
    cu_k = cu_seqlens(lk, device)
    used_q = torch.tensor(uq, dtype=torch.int32, device=device)
    used_k = torch.tensor(uk, dtype=torch.int32, device=device)
    q = rand(rng, (sum(lq), 4, 64), dtype, device, grad=True)
    k = rand(rng, (sum(lk), 2, 64), dtype, device, grad=True)
    v = rand(rng, (sum(lk), 2, 64), dtype, device, grad=True)
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.1], dtype=torch.float32, device=device,
                         requires_grad=True)
    out, lse = hfa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True,
                                          deterministic=det, return_attn_probs=True,
                                          seqused_q=used_q, seqused_k=used_k,
                                          learnable_sink=sinks)
    dout = rand(rng, out.shape, dtype, device)
    out.backward(dout)
    kw = dict(cu_seqlens_q=cu_q.cpu().numpy(), cu_seqlens_k=cu_k.cpu().numpy(), causal=True,
              sinks=to_np(sinks), seqused_q=uq, seqused_k=uk)
    args = [to_np(x) for x in (q, k, v, dout)]
    oracle = attention(*args, **kw)
    peer = attention(*args, compute=np.float32, lowp=LOWP[dtype], **kw)
    check_s6("out", to_np(out), oracle["out"], peer["out"])
    check_s6("lse", to_np(lse), oracle["lse"], peer["lse"], floor=lse_floor(oracle["lse"]))
    for name, x in (("dq", q), ("dk", k), ("dv", v)):
        check_s6(name, to_np(x.grad), oracle[name], peer[name])
    assert sinks.grad is not None and sinks.grad.dtype == torch.float32
    if device == "cpu":
        check_s6("dsink", to_np(sinks.grad), oracle["dsink"], peer["dsink"])
    else:  # the GPU's out differs from the peer's by rounding: see check_dsink
        check_dsink(to_np(sinks.grad), to_np(sinks), to_np(out), to_np(lse), args[3], oracle,
                    peer)
    # The explicit backward gives the same four gradients.
    grads = hfa.flash_attn_backward(dout, q.detach(), k.detach(), v.detach(), out.detach(), lse,
                                    causal=True, deterministic=det, cu_seqlens_q=cu_q,
                                    cu_seqlens_k=cu_k, max_seqlen_q=max(lq),
                                    max_seqlen_k=max(lk), learnable_sink=sinks.detach(),
                                    seqused_q=used_q, seqused_k=used_k)
    assert len(grads) == 4
    for g, x in zip(grads, (q, k, v, sinks)):
        assert torch.equal(g, x.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_explicit_backward_matches_autograd(device):
    dtype = DTYPES[device][-1]
    rng = np.random.default_rng(16)
    q = rand(rng, (2, 40, 4, 64), dtype, device, grad=True)
    k = rand(rng, (2, 56, 2, 64), dtype, device, grad=True)
    v = rand(rng, (2, 56, 2, 64), dtype, device, grad=True)
    # deterministic on both sides, so that a GPU backward with atomics compares bit for bit.
    out, lse = hfa.flash_attn_func(q, k, v, causal=True, window_size=(9, -1),
                                   deterministic=True, return_attn_probs=True)
    dout = rand(rng, out.shape, dtype, device)
    dq, dk, dv = hfa.flash_attn_backward(dout, q.detach(), k.detach(), v.detach(), out.detach(),
                                         lse, causal=True, window_size=(9, -1), deterministic=True)
    out.backward(dout)
    assert torch.equal(dq, q.grad) and torch.equal(dk, k.grad) and torch.equal(dv, v.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs_and_grad(device):
    """BHSD tensors transposed to BSHD (non-packed strides) and a broadcast grad from sum()."""
    dtype = DTYPES[device][-1]
    rng = np.random.default_rng(12)
    qb, kb, vb = (rand(rng, (2, 3, 50, 64), dtype, device, grad=True) for _ in range(3))
    out = hfa.flash_attn_func(qb.transpose(1, 2), kb.transpose(1, 2), vb.transpose(1, 2),
                              causal=True, deterministic=True)
    packed = [x.detach().transpose(1, 2).contiguous().requires_grad_() for x in (qb, kb, vb)]
    out2 = hfa.flash_attn_func(*packed, causal=True, deterministic=True)
    assert max_err(to_np(out), to_np(out2)) == 0
    out.float().sum().backward()
    out2.float().sum().backward()
    for a, b in zip((qb, kb, vb), packed):
        assert torch.equal(a.grad.transpose(1, 2), b.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    """torch.library.opcheck: schema, fake (meta) kernels, autograd registration, AOT dispatch."""
    dtype = DTYPES[device][-1]
    rng = np.random.default_rng(13)
    q = rand(rng, (1, 24, 4, 64), dtype, device, grad=True)
    k = rand(rng, (1, 40, 2, 64), dtype, device, grad=True)
    v = rand(rng, (1, 40, 2, 64), dtype, device, grad=True)
    # opcheck runs the backward of the inputs that require grad and compares runs with each
    # other: deterministic on CUDA, where the default backward may add partial sums in any order.
    det = device == "cuda"
    fwd_args = (q, k, v, None, None, 0, 0, None, True, -1, -1, 0.0, det)
    torch.library.opcheck(torch.ops.hfa.fwd.default, fwd_args)
    out, lse = torch.ops.hfa.fwd(*(x.detach() if torch.is_tensor(x) else x for x in fwd_args))
    dout = torch.randn_like(out)
    bwd_args = (dout, q.detach(), k.detach(), v.detach(), out, lse, None, None, 0, 0, None,
                True, -1, -1, 0.0, det)
    torch.library.opcheck(torch.ops.hfa.bwd.default, bwd_args)


def native_only():
    from hfa import _torch
    if not _torch.NATIVE:
        pytest.skip("the plain ops (hfa::attention, ...) exist in the C++ torch ops only; "
                    f"these run through {_torch.OPS}")


@pytest.mark.parametrize("device", DEVICES)
def test_plain_ops_opcheck(device):
    """hfa::attention, hfa::varlen_attention, hfa::kvcache_attention (the plain calls' ops):
    schema, fake kernels, autograd registration, AOT dispatch."""
    native_only()
    dtype = DTYPES[device][-1]
    rng = np.random.default_rng(21)
    det = device == "cuda"
    q = rand(rng, (1, 24, 4, 64), dtype, device, grad=True)
    k = rand(rng, (1, 40, 2, 64), dtype, device, grad=True)
    v = rand(rng, (1, 40, 2, 64), dtype, device, grad=True)
    torch.library.opcheck(torch.ops.hfa.attention.default,
                          (q, k, v, None, True, -1, -1, 0.0, det))
    cu = cu_seqlens([10, 0, 14], device)
    qv, kv, vv = (rand(rng, (24, h, 64), dtype, device, grad=True) for h in (4, 2, 2))
    torch.library.opcheck(torch.ops.hfa.varlen_attention.default,
                          (qv, kv, vv, cu, cu, 14, 14, 0.125, False, 5, 0, 0.0, det))
    qd = rand(rng, (2, 1, 4, 64), dtype, device)
    kc, vc = (rand(rng, (2, 48, 2, 64), dtype, device) for _ in range(2))
    lens = torch.tensor([48, 17], dtype=torch.int32, device=device)
    torch.library.opcheck(torch.ops.hfa.kvcache_attention.default,
                          (qd, kc, vc, lens, None, None, False, -1, -1, 0.0, 0))


@pytest.mark.parametrize("device", DEVICES)
def test_plain_ops_match_full_ops(device):
    """A plain call (no sinks, descales, out= or LSE) runs the plain op; it gives the bytes of
    the full op (hfa::fwd, hfa::fwd_kvcache: reached by asking for the LSE), and the same
    gradients bit for bit (deterministic)."""
    native_only()
    dtype = DTYPES[device][-1]
    rng = np.random.default_rng(22)
    q = rand(rng, (2, 37, 4, 64), dtype, device, grad=True)
    k = rand(rng, (2, 53, 2, 64), dtype, device, grad=True)
    v = rand(rng, (2, 53, 2, 64), dtype, device, grad=True)
    dout = rand(rng, (2, 37, 4, 64), dtype, device)
    grads = []
    for full in (False, True):
        for t in (q, k, v):
            t.grad = None
        result = hfa.flash_attn_func(q, k, v, causal=True, window_size=(20, 3), softcap=9.0,
                                     deterministic=True, return_attn_probs=full)
        out = result[0] if full else result
        out.backward(dout)
        grads.append([out.detach().clone()] + [t.grad.clone() for t in (q, k, v)])
    for plain, full in zip(*grads):
        assert torch.equal(plain, full)

    lens = [19, 0, 33]
    cu = cu_seqlens(lens, device)
    qv, kv, vv = (rand(rng, (52, h, 64), dtype, device) for h in (4, 2, 2))
    with torch.no_grad():
        plain = hfa.flash_attn_varlen_func(qv, kv, vv, cu, cu, 33, 33, causal=True)
        full, _ = hfa.flash_attn_varlen_func(qv, kv, vv, cu, cu, 33, 33, causal=True,
                                             return_attn_probs=True)
    assert torch.equal(plain, full)

    qd = rand(rng, (3, 2, 4, 64), dtype, device)
    kc, vc = (rand(rng, (12, 16, 2, 64), dtype, device) for _ in range(2))
    table = torch.tensor([[3, 1, 7, 0], [2, 5, 4, 6], [8, 9, 10, 11]], dtype=torch.int32,
                         device=device)
    seqlens = torch.tensor([50, 2, 64], dtype=torch.int32, device=device)
    plain = hfa.flash_attn_with_kvcache(qd, kc, vc, cache_seqlens=seqlens, page_table=table,
                                        causal=True)
    full, _ = hfa.flash_attn_with_kvcache(qd, kc, vc, cache_seqlens=seqlens, page_table=table,
                                          causal=True, return_softmax_lse=True)
    assert torch.equal(plain, full)
    with pytest.raises(TypeError, match="k_cache"):
        torch.ops.hfa.kvcache_attention(qd, kc.to(torch.float32), vc, seqlens, table, None,
                                        True, -1, -1, 0.0, 0)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    """torch.compile(fullgraph=True) traces flash_attn_func and flash_attn_varlen_func with no
    graph break, and the backward through them (AOTAutograd compiles the backward graph, which
    calls hfa::bwd) matches eager bit for bit: deterministic=True, so that a GPU backward
    reproduces its own bits."""
    dtype = DTYPES[device][-1]
    # Inductor on the CPU needs a host C++ toolchain; aot_eager still exercises the fake kernels
    # and the autograd formula through AOTAutograd.
    backend = "inductor" if device == "cuda" else "aot_eager"
    rng = np.random.default_rng(14)
    q = rand(rng, (2, 48, 4, 64), dtype, device, grad=True)
    k = rand(rng, (2, 48, 2, 64), dtype, device, grad=True)
    v = rand(rng, (2, 48, 2, 64), dtype, device, grad=True)

    def f(q, k, v):
        out, lse = hfa.flash_attn_func(q, k, v, causal=True, softcap=5.0, deterministic=True,
                                       return_attn_probs=True)
        return (out.float() * 2).sum() + 0 * lse.sum(), out

    def g(q, k, v, cu, max_len):
        return hfa.flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=True,
                                          deterministic=True)

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    results = []
    for fn in (f, compiled):
        for x in (q, k, v):
            x.grad = None
        loss, out = fn(q, k, v)
        loss.backward()
        results.append([out.detach()] + [x.grad.clone() for x in (q, k, v)])
    for name, a, b in zip(("out", "dq", "dk", "dv"), *results):
        assert torch.equal(a, b), f"{name}: compiled != eager"

    cu = torch.tensor([0, 20, 48 * 2], dtype=torch.int32, device=device)
    flat = [x.detach().reshape(96, x.shape[2], 64).clone().requires_grad_() for x in (q, k, v)]
    dout = rand(rng, (96, 4, 64), dtype, device)
    compiled_g = torch.compile(g, fullgraph=True, backend=backend)
    results = []
    for fn in (g, compiled_g):
        for x in flat:
            x.grad = None
        out = fn(*flat, cu, 76)
        out.backward(dout)
        results.append([out.detach()] + [x.grad.clone() for x in flat])
    for name, a, b in zip(("varlen out", "varlen dq", "varlen dk", "varlen dv"), *results):
        assert torch.equal(a, b), f"{name}: compiled != eager"


@pytest.mark.parametrize("device", DEVICES)
def test_errors_name_the_argument(device):
    dtype = DTYPES[device][-1]
    q = torch.zeros(1, 8, 2, 64, dtype=dtype, device=device)
    k = torch.zeros(1, 8, 2, 128, dtype=dtype, device=device)
    with pytest.raises(ValueError, match=r"\bk\b"):
        hfa.flash_attn_func(q, k, q)
    with pytest.raises(TypeError, match=r"\bq\b"):
        hfa.flash_attn_func(q.double(), q, q)
    with pytest.raises(ValueError, match=r"^window_size: -5 is out of range"):
        hfa.flash_attn_func(q, q, q, window_size=(-5, 0))


def _sm_count(device):
    if device == "cpu":
        return 64  # any margin: the CPU ignores it
    return torch.cuda.get_device_properties(0).multi_processor_count


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_sm_margin_changes_no_bit(device, causal):
    """sm_margin (SMs left free for NCCL's kernels) gives the forward's persistent grid fewer
    CTAs and leaves the backward's grid as it is: out, lse and the deterministic gradients
    through autograd are the same bits with any margin below the SM count."""
    dtype = DTYPES[device][-1]
    rng = np.random.default_rng(61)
    seqlen = 700 if device == "cuda" else 150  # enough tiles to fill every SM more than once
    shapes = ((2, seqlen, 8, 128), (2, seqlen, 2, 128), (2, seqlen, 2, 128))
    leaves = [rand(rng, shape, dtype, device, grad=True) for shape in shapes]
    dout = rand(rng, shapes[0], dtype, device)

    def run(margin):
        for x in leaves:
            x.grad = None
        out, lse = hfa.flash_attn_func(*leaves, causal=causal, deterministic=True,
                                       return_attn_probs=True, sm_margin=margin)
        out.backward(dout)
        return [out.detach(), lse] + [x.grad.clone() for x in leaves]

    plain = run(0)
    sms = _sm_count(device)
    for margin in (1, sms // 2, sms - 1):
        for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), plain, run(margin)):
            assert torch.equal(a, b), f"{name}: sm_margin {margin} changed the result"


@pytest.mark.parametrize("device", DEVICES)
def test_sm_margin_in_the_ops(device):
    """The ops take sm_margin last (hfa::fwd's autograd returns one gradient more for it);
    opcheck runs schema, fake kernel and autograd with it given."""
    dtype = DTYPES[device][-1]
    rng = np.random.default_rng(62)
    q = rand(rng, (1, 24, 4, 64), dtype, device, grad=True)
    k = rand(rng, (1, 40, 2, 64), dtype, device, grad=True)
    v = rand(rng, (1, 40, 2, 64), dtype, device, grad=True)
    det = device == "cuda"
    fwd_args = (q, k, v, None, None, 0, 0, None, True, -1, -1, 0.0, det, None, None, None,
                None, None, None, 0, 0, 3)
    torch.library.opcheck(torch.ops.hfa.fwd.default, fwd_args)
    out, lse = torch.ops.hfa.fwd(*(x.detach() if torch.is_tensor(x) else x for x in fwd_args))
    bwd_args = (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out, lse, None,
                None, 0, 0, None, True, -1, -1, 0.0, det, None, None, None, 3)
    torch.library.opcheck(torch.ops.hfa.bwd.default, bwd_args)
    with pytest.raises(ValueError, match="^sm_margin: must be >= 0"):
        torch.ops.hfa.bwd(*bwd_args[:-1], -1)


@pytest.mark.parametrize("device", DEVICES)
def test_sm_margin_errors(device):
    """A negative margin, or on a GPU one that leaves no SM, is the library's error naming
    sm_margin; a margin that is no int32 is rejected before any op."""
    dtype = DTYPES[device][-1]
    q = torch.zeros(1, 8, 2, 64, dtype=dtype, device=device)
    cache = torch.zeros(1, 16, 2, 64, dtype=dtype, device=device)
    calls = {
        "flash_attn_func": lambda m: hfa.flash_attn_func(q, q, q, sm_margin=m),
        "flash_attn_backward": lambda m: hfa.flash_attn_backward(
            q, q, q, q, q, torch.zeros(1, 2, 8, device=device), sm_margin=m),
        "flash_attn_with_kvcache": lambda m: hfa.flash_attn_with_kvcache(
            q[:, :1], cache, cache, sm_margin=m),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match="^sm_margin: must be >= 0"):
            call(-1)
        with pytest.raises(TypeError, match="^sm_margin: expected an integer"):
            call(1.0)
        with pytest.raises(ValueError, match="^sm_margin: .* does not fit"):
            call(2 ** 31)
        if device == "cuda":
            sms = _sm_count(device)
            with pytest.raises(ValueError, match=f"^sm_margin: {sms} leaves no SM of the {sms}"):
                call(sms)


@pytest.mark.parametrize("device", DEVICES)
def test_sm_margin_under_torch_compile(device):
    """The fake kernels take sm_margin: a compiled call with it traces in one graph."""
    dtype = DTYPES[device][-1]
    rng = np.random.default_rng(63)
    q, k, v = (rand(rng, (1, 64, 4, 64), dtype, device, grad=True) for _ in range(3))

    def f(q, k, v):
        return hfa.flash_attn_func(q, k, v, causal=True, deterministic=True, sm_margin=2)

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    eager, traced = f(q, k, v), compiled(q, k, v)
    assert torch.equal(eager, traced)
    traced.float().sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


@cuda_only
def test_cuda_kvcache_sm_margin_plans_fewer_splits():
    """The decode plans its automatic splits for the SMs left: still the same answer as one
    call without a margin, to split-merge rounding."""
    rng = np.random.default_rng(64)
    q = rand(rng, (2, 1, 8, 128), torch.bfloat16, "cuda")
    k_cache, v_cache = (rand(rng, (2, 4096, 2, 128), torch.bfloat16, "cuda") for _ in range(2))
    lengths = torch.tensor([4096, 1500], dtype=torch.int32, device="cuda")
    plain, plain_lse = hfa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths,
                                                   return_softmax_lse=True)
    sms = _sm_count("cuda")
    for margin in (8, sms - 1):
        out, lse = hfa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths,
                                               return_softmax_lse=True, sm_margin=margin)
        assert max_err(to_np(out), to_np(plain)) < 2e-2
        assert max_err(to_np(lse), to_np(plain_lse)) < 1e-3


@cuda_only
def test_cuda_runs_on_the_current_stream():
    """Forward and backward launch on torch's current stream: on a side stream they give the
    same bits as on the default one."""
    rng = np.random.default_rng(15)
    q, k, v = (rand(rng, (2, 256, 4, 128), torch.bfloat16, "cuda") for _ in range(3))
    dout = rand(rng, (2, 256, 4, 128), torch.bfloat16, "cuda")

    def run():
        out, lse = hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
        grads = hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=True, deterministic=True)
        return (out,) + tuple(grads)

    ref = run()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = run()
    side.synchronize()
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, ref):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("device", DEVICES)
def test_outputs_all_written(device):
    """Design §6: outputs that start as NaN come back finite. hfa allocates them with
    torch.empty, which deterministic mode fills with NaN."""
    dtype = DTYPES[device][-1]
    rng = np.random.default_rng(17)
    q, k, v = (rand(rng, (2, 77, 4, 64), dtype, device, grad=True) for _ in range(3))
    prev = (torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        if not torch.isnan(torch.empty(8, device=device)).all():
            pytest.skip("this torch does not fill uninitialized memory in deterministic mode")
        out, lse = hfa.flash_attn_func(q, k, v, causal=True, window_size=(11, 2),
                                       return_attn_probs=True)
        out.backward(torch.ones_like(out))
    finally:
        torch.use_deterministic_algorithms(prev[0], warn_only=prev[1])
    for t in (out, lse, q.grad, k.grad, v.grad):
        assert torch.isfinite(t).all()


# --- The GPU backward ---------------------------------------------------------------------------
#
# Gradients through autograd checked against float64 autograd of a plain torch attention
# (torch_attention below: no formula of its own for the backward), with reference.py's float32
# peer (P and dS rounded to the input dtype before their matmuls, as a GPU kernel does) setting
# the §6 tolerance. reference.py's own float64 formulas must agree with autograd to rounding,
# which checks the CPU tests' oracle too.

def torch_attention(q, k, v, causal=False, window=(-1, -1), softcap=0.0, sinks=None,
                    softmax_scale=None):
    """Attention by plain torch ops, for autograd: q (b, sq, hq, d), k/v (b, sk, hk, d|dv) ->
    out (b, sq, hq, dv), in the inputs' dtype. Bottom-right causal/window masks (reference.py's
    visible), softcap, sinks (hq,) in every row's denominator, GQA by repeating k/v per query
    head. A row that sees no key gets out 0."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    if sq == 0 or sk == 0:
        # No query, or no key: out 0 (a sink has no value), so no gradient through this part
        # (a sink's is -sum P_sink·rowsum(dO∘O) = 0 with O = 0).
        return q.new_zeros((b, sq, hq, v.shape[-1]))
    scale = softmax_scale if softmax_scale is not None else d ** -0.5
    k = k.repeat_interleave(hq // hk, dim=2)
    v = v.repeat_interleave(hq // hk, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    mask = torch.from_numpy(visible(sq, sk, causal, window)).to(s.device)
    s = s.masked_fill(~mask, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.to(s.dtype).view(1, hq, 1, 1).expand(b, hq, sq, 1)], dim=-1)
    seen = torch.isfinite(s).any(dim=-1, keepdim=True)
    # Rows that see nothing are softmaxed as zeros and then zeroed: no NaN, no gradient.
    s = torch.where(seen, s, torch.zeros((), dtype=s.dtype, device=s.device))
    p = torch.softmax(s, dim=-1) * seen
    return torch.einsum("bhqk,bkhd->bqhd", p[..., :sk], v)


def torch_varlen_attention(q, k, v, lens_q, lens_k, used_q=None, used_k=None, **kw):
    """torch_attention per sequence of packed (total, heads, dim) tensors, on its first used_q
    rows and used_k keys (seqused); the rows beyond used_q get out 0."""
    outs, q0, k0 = [], 0, 0
    for i, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        uq = lq if used_q is None else used_q[i]
        uk = lk if used_k is None else used_k[i]
        o = torch_attention(q[None, q0:q0 + uq], k[None, k0:k0 + uk], v[None, k0:k0 + uk], **kw)
        outs += [o[0], q.new_zeros((lq - uq,) + tuple(o.shape[2:]))]
        q0, k0 = q0 + lq, k0 + lk
    return torch.cat(outs)


def float64_autograd(fn, leaves, dout):
    """{"out", "d<name>"...}: fn(**leaves)'s output and the gradients for dout of each leaf, by
    float64 autograd on the leaves' exact values (16-bit and float32 values are exact in
    float64), as numpy arrays."""
    x64 = {name: t.detach().double().requires_grad_() for name, t in leaves.items()}
    out = fn(**x64)
    out.backward(dout.double())
    res = {"out": out.detach().cpu().numpy()}
    for name, x in x64.items():
        res["d" + name] = (x.grad if x.grad is not None else torch.zeros_like(x)).cpu().numpy()
    return res


def check_against_references(got, oracle, numpy_oracle, peer, names):
    """§6 for each name against the autograd oracle (dsink: check_dsink instead); first, the two
    float64 references (autograd and reference.py's formulas) must agree to float64 rounding."""
    for name in names:
        scale = max(1.0, float(np.abs(oracle[name]).max(initial=0.0)))
        gap = max_err(numpy_oracle[name], oracle[name])
        assert gap <= 1e-9 * scale, f"{name}: the float64 references differ by {gap:.3g}"
        if name != "dsink":
            check_s6(name, got[name], oracle[name], peer[name])


def sink_terms(sinks, out, lse, dout):
    """Per (row, head), float64: P_sink = exp(sink − lse), D = rowsum(dO∘O) and Σ|dO∘O|, from
    out/dout (b, s, h, dv) with lse (b, h, s), or varlen (total, h, dv) with lse (h, total).
    dL/dsink = −Σ_rows P_sink·D. Rows with lse −inf (past seqused_q) get P_sink 0."""
    heads, dv = out.shape[-2], out.shape[-1]
    o = np.asarray(out, np.float64).reshape(-1, heads, dv)
    g = np.asarray(dout, np.float64).reshape(-1, heads, dv)
    lse = np.asarray(lse, np.float64)
    lse = (lse.transpose(1, 0, 2) if lse.ndim == 3 else lse).reshape(heads, -1).T
    finite = np.isfinite(lse)
    p = np.where(finite, np.exp(np.asarray(sinks, np.float64)[None, :] - np.where(finite, lse, 0)),
                 0.0)
    return p, (g * o).sum(-1), np.abs(g * o).sum(-1)


def check_dsink(dsink, sinks, out, lse, dout, oracle, peer):
    """dsink is a handful of sums over rows, where §6's max over the peer's few values is a poor
    yardstick: a lucky cancellation makes the peer's error tiny. (On the GPU, whose out differs
    from the peer's by rounding, hfa's fp16 dsink error once came out 12x the peer's with a
    kernel exact to its own out.) So: (1) dsink is exactly −Σ P_sink·D of hfa's own out and LSE,
    to fp32 accumulation (1e-5 of Σ P_sink·Σ|dO∘O|); (2) against the float64 oracle, within
    twice the worst case that the peer's out and LSE errors can cause + 1e-5. The caller checks
    out and LSE under §6. oracle, peer: reference.py's dicts (out, lse, dsink)."""
    p, d, absd = sink_terms(sinks, out, lse, dout)
    own = -(p * d).sum(0)
    tol = 1e-5 * (p * absd).sum(0) + 1e-6
    assert (np.abs(dsink - own) <= tol).all(), (
        f"dsink: {dsink} is not -sum P_sink*D of hfa's own out and lse ({own}, tolerance {tol})")
    p_or, d_or, _ = sink_terms(sinks, oracle["out"], oracle["lse"], dout)
    p_pe, _, _ = sink_terms(sinks, peer["out"], peer["lse"], dout)
    o_or = np.asarray(oracle["out"], np.float64).reshape(d_or.shape + (-1,))
    o_pe = np.asarray(peer["out"], np.float64).reshape(d_or.shape + (-1,))
    g = np.asarray(dout, np.float64).reshape(d_or.shape + (-1,))
    peer_worst = (p_or * (np.abs(g) * np.abs(o_pe - o_or)).sum(-1)
                  + np.abs(p_pe - p_or) * np.abs(d_or)).sum(0)
    err = np.abs(np.asarray(dsink, np.float64) - oracle["dsink"])
    bound = 2 * peer_worst + 1e-5
    assert (err <= bound).all(), f"dsink: error {err} > bound {bound} (against float64)"


def check_gradients(got, oracle, lse, sink, args, np_kw, dtype):
    """The CUDA gradient tests' verdict on got (gradients_of): the lse, out and every gradient
    (and dsink with sinks) against float64 autograd (oracle) and the numpy float64 reference,
    within twice the error of a float32 peer that rounds as a 16-bit GPU kernel does. args: q,
    k, v, dout as numpy; np_kw: the numpy reference's options."""
    numpy_oracle = attention(*args, **np_kw)
    peer = attention(*args, compute=np.float32, lowp=LOWP[dtype], **np_kw)
    check_s6("lse", to_np(lse), numpy_oracle["lse"], peer["lse"],
             floor=lse_floor(numpy_oracle["lse"]))
    check_against_references(got, oracle, numpy_oracle, peer,
                             ["out", "dq", "dk", "dv"] + (["dsink"] if sink is not None else []))
    if sink is not None:
        check_dsink(got["dsink"], to_np(sink), got["out"], to_np(lse), args[3], numpy_oracle,
                    peer)


GRAD_CASES = {
    # name: (seqlen_q, seqlen_k, options); batch 2 and heads 4 / 2 (GQA) in every case.
    "plain": (37, 53, {}),
    "causal": (37, 53, {"causal": True}),
    "causal_q_gt_k": (53, 37, {"causal": True}),  # the first 16 rows see no key: out 0
    "window": (37, 53, {"window_size": (10, 3)}),
    "softcap": (37, 53, {"softcap": 10.0}),
    "sinks": (37, 53, {"sinks": True}),
    "sinks_causal_q_gt_k": (53, 37, {"sinks": True, "causal": True}),  # rows with only the sink
    "softcap_sinks_window": (37, 53, {"softcap": 10.0, "sinks": True, "window_size": (20, 0)}),
}


@cuda_only
@pytest.mark.parametrize("dtype", DTYPES["cuda"], ids=dtype_id)
@pytest.mark.parametrize("hdim", [64, 128])
@pytest.mark.parametrize("case", list(GRAD_CASES))
def test_cuda_gradients_against_float64_autograd(case, hdim, dtype):
    sq, sk, opts = GRAD_CASES[case]
    opts = dict(opts)
    with_sinks = opts.pop("sinks", False)
    rng = np.random.default_rng(zlib.crc32(repr((case, hdim, str(dtype))).encode()))
    q = rand(rng, (2, sq, 4, hdim), dtype, "cuda", grad=True)
    k = rand(rng, (2, sk, 2, hdim), dtype, "cuda", grad=True)
    v = rand(rng, (2, sk, 2, hdim), dtype, "cuda", grad=True)
    sink = rand(rng, (4,), torch.float32, "cuda", grad=True) if with_sinks else None
    out, lse = hfa.flash_attn_func(q, k, v, return_attn_probs=True, learnable_sink=sink, **opts)
    dout = rand(rng, out.shape, dtype, "cuda")
    out.backward(dout)

    got, leaves = gradients_of(out, q, k, v, sink)
    ref_kw = dict(causal=opts.get("causal", False), window=opts.get("window_size", (-1, -1)),
                  softcap=opts.get("softcap", 0.0))
    oracle = float64_autograd(
        lambda q, k, v, sink=None: torch_attention(q, k, v, sinks=sink, **ref_kw), leaves, dout)
    args = [to_np(x) for x in (q, k, v, dout)]
    np_kw = dict(ref_kw, sinks=to_np(sink) if with_sinks else None)
    check_gradients(got, oracle, lse, sink, args, np_kw, dtype)


VARLEN_GRAD_CASES = {
    # name: (lens_q, lens_k, seqused_q, seqused_k, sinks)
    # Empty sequences: queries but no keys (out 0), nothing at all, keys but no queries (their
    # dk/dv are 0).
    "empty_sequences": ([37, 0, 20, 0, 3, 5], [53, 12, 31, 0, 7, 0], None, None, False),
    # seqused: no used query in sequence 1, no used key in sequence 2 (out 0, lse -inf or the
    # sink); the rows and keys beyond get zero gradients.
    "seqused": ([37, 8, 20], [53, 12, 31], [30, 0, 11], [40, 5, 0], False),
    "seqused_sinks": ([37, 8, 20], [53, 12, 31], [30, 0, 11], [40, 5, 0], True),
}


@cuda_only
@pytest.mark.parametrize("dtype", DTYPES["cuda"], ids=dtype_id)
@pytest.mark.parametrize("hdim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", list(VARLEN_GRAD_CASES))
def test_cuda_varlen_gradients_against_float64_autograd(case, causal, hdim, dtype):
    lq, lk, uq, uk, with_sinks = VARLEN_GRAD_CASES[case]
    rng = np.random.default_rng(zlib.crc32(repr((case, causal, hdim, str(dtype))).encode()))
    cu_q, cu_k = cu_seqlens(lq, "cuda"), cu_seqlens(lk, "cuda")
    used_q = None if uq is None else torch.tensor(uq, dtype=torch.int32, device="cuda")
    used_k = None if uk is None else torch.tensor(uk, dtype=torch.int32, device="cuda")
    q = rand(rng, (sum(lq), 4, hdim), dtype, "cuda", grad=True)
    k = rand(rng, (sum(lk), 2, hdim), dtype, "cuda", grad=True)
    v = rand(rng, (sum(lk), 2, hdim), dtype, "cuda", grad=True)
    sink = rand(rng, (4,), torch.float32, "cuda", grad=True) if with_sinks else None
    out, lse = hfa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal,
                                          return_attn_probs=True, seqused_q=used_q,
                                          seqused_k=used_k, learnable_sink=sink)
    assert out.shape == q.shape and lse.shape == (4, sum(lq))
    dout = rand(rng, out.shape, dtype, "cuda")
    out.backward(dout)

    got, leaves = gradients_of(out, q, k, v, sink)
    oracle = float64_autograd(
        lambda q, k, v, sink=None: torch_varlen_attention(q, k, v, lq, lk, uq, uk, causal=causal,
                                                          sinks=sink),
        leaves, dout)
    args = [to_np(x) for x in (q, k, v, dout)]
    np_kw = dict(cu_seqlens_q=cu_q.cpu().numpy(), cu_seqlens_k=cu_k.cpu().numpy(), causal=causal,
                 seqused_q=uq, seqused_k=uk, sinks=to_np(sink) if with_sinks else None)
    check_gradients(got, oracle, lse, sink, args, np_kw, dtype)


def sdpa_forward_backward(q, k, v, dout, causal):
    """(name, {"out", "dq", "dk", "dv"}) from PyTorch SDPA for BSHD inputs with GQA: cuDNN, else
    FLASH (FlashAttention-2); GQA native (enable_gqa) where the backend takes it, else k/v
    repeated per query head (autograd sums their gradients back over the group, in the input
    dtype: a little more rounding than a native GQA backward). Skips when no backend runs."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    group = q.shape[2] // k.shape[2]
    notes = []
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        for native_gqa in (True, False):
            qs, ks, vs = (x.detach().clone().requires_grad_() for x in (q, k, v))
            if native_gqa:
                kk, vv = ks, vs
            else:
                kk, vv = ks.repeat_interleave(group, dim=2), vs.repeat_interleave(group, dim=2)
            try:
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(qs.transpose(1, 2), kk.transpose(1, 2),
                                                       vv.transpose(1, 2), is_causal=causal,
                                                       enable_gqa=native_gqa)
                    o.backward(dout.transpose(1, 2))
                torch.cuda.synchronize()
            except RuntimeError as e:
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                notes.append(f"{backend.name}{' enable_gqa' if native_gqa else ''}: {first}")
                continue
            name = backend.name.lower() + ("" if native_gqa else " (k/v repeated)")
            return name, {"out": o.detach().transpose(1, 2), "dq": qs.grad, "dk": ks.grad,
                          "dv": vs.grad}
    pytest.skip("no SDPA backend ran: " + "; ".join(notes))


@cuda_only
def test_cuda_large_gqa_gradients_within_twice_sdpa():
    """bf16, batch 2, seqlen 2048, heads 16 / 4, hdim 128, causal: hfa's out, dq, dk and dv are
    within §6's bound of PyTorch SDPA's (cuDNN, else FLASH) max error, both measured against
    float64 attention (torch_attention, autograd) computed on the GPU from the same inputs."""
    b, s, hq, hk, d = 2, 2048, 16, 4, 128
    gen = torch.Generator(device="cuda").manual_seed(31)

    def randn(*shape):
        return torch.randn(shape, generator=gen, device="cuda", dtype=torch.bfloat16)

    q, k, v = randn(b, s, hq, d), randn(b, s, hk, d), randn(b, s, hk, d)
    dout = randn(b, s, hq, d)
    for x in (q, k, v):
        x.requires_grad_()
    out = hfa.flash_attn_func(q, k, v, causal=True)
    out.backward(dout)
    ours = {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}
    peer_name, peer = sdpa_forward_backward(q, k, v, dout, causal=True)

    x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref_out = torch_attention(*x64, causal=True)
    ref_out.backward(dout.double())
    ref = {"out": ref_out.detach(), "dq": x64[0].grad, "dk": x64[1].grad, "dv": x64[2].grad}
    del ref_out

    report, failed = [], False
    for name, r in ref.items():
        err = (ours[name].double() - r).abs().max().item()
        peer_err = (peer[name].double() - r).abs().max().item()
        bound = 2 * peer_err + 1e-5
        failed |= not err <= bound  # NaN fails too
        report.append(f"{name}: hfa {err:.3g}, {peer_name} {peer_err:.3g}, bound {bound:.3g}")
    assert not failed, "max error against float64: " + "; ".join(report)


@cuda_only
@pytest.mark.parametrize("varlen", [False, True], ids=["fixed", "varlen"])
@pytest.mark.parametrize("hdim", [64, 128])
def test_cuda_deterministic_backward_is_bitwise_reproducible(hdim, varlen):
    """deterministic=True: three backward calls give the same bits for dq, dk, dv and dsink, on
    problems where many key blocks add into each dq row (non-causal, 1500 keys) and four query
    heads into each dk/dv head: the sums a backward with atomics adds in any order."""
    dtype = torch.bfloat16
    rng = np.random.default_rng(41 + hdim + varlen)
    if varlen:
        lens = [300, 0, 1500, 129]
        cu = cu_seqlens(lens, "cuda")
        q = rand(rng, (sum(lens), 8, hdim), dtype, "cuda", grad=True)
        k = rand(rng, (sum(lens), 2, hdim), dtype, "cuda", grad=True)
        v = rand(rng, (sum(lens), 2, hdim), dtype, "cuda", grad=True)
    else:
        q = rand(rng, (2, 1000, 8, hdim), dtype, "cuda", grad=True)
        k = rand(rng, (2, 1500, 2, hdim), dtype, "cuda", grad=True)
        v = rand(rng, (2, 1500, 2, hdim), dtype, "cuda", grad=True)
    sink = rand(rng, (8,), torch.float32, "cuda", grad=True)
    dout = rand(rng, q.shape, dtype, "cuda")

    def forward():
        if varlen:
            return hfa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens),
                                              deterministic=True, learnable_sink=sink)
        return hfa.flash_attn_func(q, k, v, deterministic=True, learnable_sink=sink)

    runs = []
    for _ in range(3):
        for x in (q, k, v, sink):
            x.grad = None
        forward().backward(dout)
        runs.append([x.grad.clone() for x in (q, k, v, sink)])
    names = ("dq", "dk", "dv", "dsink")
    for name, g in zip(names, runs[0]):
        assert torch.isfinite(g).all(), f"{name}: not finite"
    for run in runs[1:]:
        for name, a, b in zip(names, runs[0], run):
            assert torch.equal(a, b), f"{name}: two deterministic backward calls differ"


@cuda_only
def test_cuda_forward_backward_do_not_synchronize():
    """After a warm-up, flash_attn_func (with sinks) and flash_attn_varlen_func (Python-int
    max_seqlen, seqused) forward + backward make no synchronizing CUDA call through torch
    (.item(), .cpu(), nonzero, a blocking copy...): torch.cuda.set_sync_debug_mode("error") turns
    one into a RuntimeError. It watches torch's own CUDA calls, so it covers hfa's Python code,
    not libhfa's calls through ctypes."""
    dtype = torch.bfloat16
    rng = np.random.default_rng(51)
    q = rand(rng, (2, 256, 8, 128), dtype, "cuda", grad=True)
    k = rand(rng, (2, 256, 2, 128), dtype, "cuda", grad=True)
    v = rand(rng, (2, 256, 2, 128), dtype, "cuda", grad=True)
    sink = rand(rng, (8,), torch.float32, "cuda", grad=True)
    lens = [100, 0, 156]
    cu = cu_seqlens(lens, "cuda")
    used = torch.tensor([90, 0, 156], dtype=torch.int32, device="cuda")
    qf = rand(rng, (256, 8, 128), dtype, "cuda", grad=True)
    kf = rand(rng, (256, 2, 128), dtype, "cuda", grad=True)
    vf = rand(rng, (256, 2, 128), dtype, "cuda", grad=True)
    dout, doutf = rand(rng, q.shape, dtype, "cuda"), rand(rng, qf.shape, dtype, "cuda")
    leaves = (q, k, v, sink, qf, kf, vf)

    def step():
        for x in leaves:
            x.grad = None
        hfa.flash_attn_func(q, k, v, causal=True, learnable_sink=sink).backward(dout)
        hfa.flash_attn_varlen_func(qf, kf, vf, cu, cu, 156, 156, causal=True, seqused_q=used,
                                   seqused_k=used).backward(doutf)

    step()  # warm-up: the library's first calls, the allocator's first blocks
    torch.cuda.synchronize()
    prev = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    except RuntimeError as e:
        pytest.fail(f"hfa's forward/backward made a synchronizing CUDA call "
                    f"(torch.cuda.set_sync_debug_mode('error')): {e}")
    finally:
        torch.cuda.set_sync_debug_mode(prev)
    torch.cuda.synchronize()
    for x in leaves:
        assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("device", DEVICES)
def test_broadcast_gradient_is_read_as_its_values(device):
    """A gradient broadcast over heads (head stride 0, as a sum over heads hands it on) cannot be
    read by a GPU's TMA: the front end copies it, and the gradients are those of the same values
    materialized."""
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, 70, 4, 64, generator=g).to(device, torch.bfloat16)
               for _ in range(3))
    out, lse = hfa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    dout = torch.randn(1, 70, 1, 64, generator=g).to(device, torch.bfloat16).expand(1, 70, 4, 64)
    assert dout.stride(2) == 0
    broadcast = hfa.flash_attn_backward(dout, q, k, v, out, lse, causal=True)
    materialized = hfa.flash_attn_backward(dout.contiguous(), q, k, v, out, lse, causal=True)
    for a, b in zip(broadcast, materialized):
        assert torch.equal(a, b)
