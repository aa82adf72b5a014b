"""The torch front end: custom ops hfa::fwd / hfa::bwd, autograd, torch.compile.

Runs on the CPU, and on CUDA when torch sees a GPU and this libhfa was built with CUDA.
Gradients are compared with the float64 reference (reference.py) under design §6's rule. The
GPU has no backward kernel yet: on CUDA the forward is checked as on the CPU and every backward
must raise NotImplementedError saying so (backward_runs below).
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
from reference import attention, check_s6, lse_floor, max_err  # noqa: E402


def _cuda_skip_reason():
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    try:
        if hfa.cuda_device_count() == 0:
            return "this libhfa was built without CUDA or sees no GPU"
    except OSError as e:
        return f"libhfa did not load: {e}"
    return None


_CUDA_SKIP = _cuda_skip_reason()
DEVICES = [pytest.param("cpu", id="cpu"),
           pytest.param("cuda", id="cuda",
                        marks=pytest.mark.skipif(_CUDA_SKIP is not None, reason=_CUDA_SKIP or ""))]
# Per device: the dtypes tested (numpy has no bf16, so the torch tests cover it).
DTYPES = {"cpu": [torch.float32, torch.bfloat16], "cuda": [torch.bfloat16, torch.float16]}
LOWP = {torch.float32: None, torch.bfloat16: "bfloat16", torch.float16: "float16"}


def backward_runs(device, backward):
    """Runs backward() and returns True; on CUDA, where hfa has no backward kernel yet, asserts
    that it raises NotImplementedError saying "not supported" and returns False."""
    if device != "cuda":
        backward()
        return True
    with pytest.raises(NotImplementedError, match="not supported"):
        backward()
    return False


def rand(rng, shape, dtype, device, grad=False):
    t = torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(device, dtype)
    return t.requires_grad_(grad)


def to_np(t):
    return t.detach().float().cpu().numpy()


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
    if not backward_runs(device, lambda: out.backward(dout)):
        return
    for name, x in (("dq", q), ("dk", k), ("dv", v)):
        assert x.grad.dtype == dtype and x.grad.shape == x.shape
        check_s6(name, to_np(x.grad), oracle[name], peer[name])


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_autograd(device):
    dtype = DTYPES[device][-1]
    rng = np.random.default_rng(11)
    lq, lk = [1, 30, 0, 17], [9, 30, 4, 40]
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lq)]), dtype=torch.int32, device=device)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lk)]), dtype=torch.int32, device=device)
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
    if not backward_runs(device, lambda: out.backward(dout)):
        return
    for name, x in (("dq", q), ("dk", k), ("dv", v)):
        check_s6(name, to_np(x.grad), oracle[name], peer[name])


@pytest.mark.parametrize("dtype", DTYPES["cpu"], ids=lambda d: str(d).split(".")[-1])
def test_sinks_and_seqused_autograd_cpu(dtype):
    """learnable_sink gets its gradient through autograd; seqused_q/k limit each sequence
    (CPU only: the gradients need a backward, which the GPU does not have yet)."""
    rng = np.random.default_rng(21)
    lq, lk, uq, uk = [20, 0, 33], [25, 9, 40], [13, 0, 30], [25, 3, 17]
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lq)]), dtype=torch.int32)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lk)]), dtype=torch.int32)
    used_q = torch.tensor(uq, dtype=torch.int32)
    used_k = torch.tensor(uk, dtype=torch.int32)
    q = rand(rng, (sum(lq), 4, 64), dtype, "cpu", grad=True)
    k = rand(rng, (sum(lk), 2, 64), dtype, "cpu", grad=True)
    v = rand(rng, (sum(lk), 2, 64), dtype, "cpu", grad=True)
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.1], dtype=torch.float32, requires_grad=True)
    out, lse = hfa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True,
                                          return_attn_probs=True, seqused_q=used_q,
                                          seqused_k=used_k, learnable_sink=sinks)
    dout = rand(rng, out.shape, dtype, "cpu")
    out.backward(dout)
    kw = dict(cu_seqlens_q=cu_q.numpy(), cu_seqlens_k=cu_k.numpy(), causal=True,
              sinks=sinks.detach().numpy(), seqused_q=uq, seqused_k=uk)
    args = [to_np(x) for x in (q, k, v, dout)]
    oracle = attention(*args, **kw)
    peer = attention(*args, compute=np.float32, lowp=LOWP[dtype], **kw)
    check_s6("out", to_np(out), oracle["out"], peer["out"])
    check_s6("lse", to_np(lse), oracle["lse"], peer["lse"], floor=lse_floor(oracle["lse"]))
    for name, x in (("dq", q), ("dk", k), ("dv", v)):
        check_s6(name, to_np(x.grad), oracle[name], peer[name])
    assert sinks.grad is not None and sinks.grad.dtype == torch.float32
    check_s6("dsink", to_np(sinks.grad), oracle["dsink"], peer["dsink"])
    # The explicit backward gives the same four gradients.
    grads = hfa.flash_attn_backward(dout, q.detach(), k.detach(), v.detach(), out.detach(), lse,
                                    causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                    max_seqlen_q=max(lq), max_seqlen_k=max(lk),
                                    learnable_sink=sinks.detach(), seqused_q=used_q,
                                    seqused_k=used_k)
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
    explicit = []
    if not backward_runs(device, lambda: explicit.extend(hfa.flash_attn_backward(
            dout, q.detach(), k.detach(), v.detach(), out.detach(), lse, causal=True,
            window_size=(9, -1), deterministic=True))):
        return
    out.backward(dout)
    dq, dk, dv = explicit
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
    if not backward_runs(device, lambda: out.float().sum().backward()):
        return
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
    fwd_args = (q, k, v, None, None, 0, 0, None, True, -1, -1, 0.0, False)
    if device == "cuda":  # opcheck runs the backward of inputs that require grad
        fwd_args = tuple(x.detach() if torch.is_tensor(x) else x for x in fwd_args)
    torch.library.opcheck(torch.ops.hfa.fwd.default, fwd_args)
    out, lse = torch.ops.hfa.fwd(*(x.detach() if torch.is_tensor(x) else x for x in fwd_args))
    dout = torch.randn_like(out)
    bwd_args = (dout, q.detach(), k.detach(), v.detach(), out, lse, None, None, 0, 0, None,
                True, -1, -1, 0.0, False)
    if device == "cuda":  # no GPU backward yet: opcheck wraps the op's own "not supported"
        with pytest.raises(Exception, match="not supported"):
            torch.library.opcheck(torch.ops.hfa.bwd.default, bwd_args)
    else:
        torch.library.opcheck(torch.ops.hfa.bwd.default, bwd_args)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    """torch.compile(fullgraph=True) traces flash_attn_func (fixed and varlen) with no graph
    break, forward and backward (forward only on CUDA, which has no backward yet), and matches
    eager bit for bit."""
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
        return hfa.flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=True)

    torch._dynamo.reset()
    with_backward = device != "cuda"
    if not with_backward:
        q, k, v = (x.detach() for x in (q, k, v))
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    results = []
    for fn in (f, compiled):
        for x in (q, k, v):
            x.grad = None
        loss, out = fn(q, k, v)
        if with_backward:
            loss.backward()
        results.append([out.detach()] + ([x.grad.clone() for x in (q, k, v)]
                                         if with_backward else []))
    for a, b in zip(*results):
        assert torch.equal(a, b)

    cu = torch.tensor([0, 20, 48 * 2], dtype=torch.int32, device=device)
    flat = [x.detach().reshape(96, x.shape[2], 64) for x in (q, k, v)]
    eager = g(*flat, cu, 76)
    assert torch.equal(torch.compile(g, fullgraph=True, backend=backend)(*flat, cu, 76), eager)


@pytest.mark.parametrize("device", DEVICES)
def test_errors_name_the_argument(device):
    dtype = DTYPES[device][-1]
    q = torch.zeros(1, 8, 2, 64, dtype=dtype, device=device)
    k = torch.zeros(1, 8, 2, 128, dtype=dtype, device=device)
    with pytest.raises(ValueError, match=r"\bk\b"):
        hfa.flash_attn_func(q, k, q)
    with pytest.raises(TypeError, match=r"\bq\b"):
        hfa.flash_attn_func(q.double(), q, q)
    with pytest.raises(ValueError, match=r"\bwindow_left\b"):
        hfa.flash_attn_func(q, q, q, window_size=(-5, 0))


def test_fp8_forward_is_supported_or_says_not_implemented():
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    q = torch.zeros(1, 8, 2, 64).to(torch.float8_e4m3fn)
    try:
        out = hfa.flash_attn_func(q, q, q)
    except NotImplementedError as e:
        assert "fp8" in str(e).lower() or "e4m3" in str(e).lower()
    else:
        assert out.dtype == torch.bfloat16


@pytest.mark.skipif(_CUDA_SKIP is not None, reason=_CUDA_SKIP or "")
def test_cuda_runs_on_the_current_stream():
    rng = np.random.default_rng(15)
    q, k, v = (rand(rng, (2, 256, 4, 128), torch.bfloat16, "cuda") for _ in range(3))
    ref = hfa.flash_attn_func(q, k, v, causal=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = hfa.flash_attn_func(q, k, v, causal=True)
    side.synchronize()
    assert torch.equal(out, ref)


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
        with_backward = backward_runs(device, lambda: out.backward(torch.ones_like(out)))
    finally:
        torch.use_deterministic_algorithms(prev[0], warn_only=prev[1])
    for t in (out, lse) + ((q.grad, k.grad, v.grad) if with_backward else ()):
        assert torch.isfinite(t).all()
