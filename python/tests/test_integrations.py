"""The ways in (issue 11): out= buffers, serving engines' call shapes (vLLM's cache views, FA3's
paged varlen call, broadcast descales), no copies of transformers' strided views, no host
synchronization, PyTorch SDPA running hfa, and hfa as a transformers attention.

CUDA-only tests skip with their reason where torch sees no GPU (CI); the transformers tests
also where transformers is not installed. References are float32 attention in torch (small
shapes), or hfa's own dense path where the claim is "the same call in another shape".
"""

import math

import pytest

torch = pytest.importorskip("torch", minversion="2.4", reason="torch is not installed")

import hfa  # noqa: E402
from torch_devices import cuda_only  # noqa: E402
from hfa import _torch  # noqa: E402




def rand(*shape, dtype=torch.bfloat16, device="cuda", seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, dtype=torch.float32, device=device, generator=g).to(dtype)


def reference(q, k, v, causal, scale=None):
    """float32 attention of one sequence: q (sq, hq, d), k / v (sk, hkv, d); bottom-right causal."""
    sq, hq, d = q.shape
    sk, hkv = k.shape[0], k.shape[1]
    scale = scale or 1.0 / math.sqrt(d)
    k = k.float().repeat_interleave(hq // hkv, dim=1)
    v = v.float().repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), k) * scale
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v)


def test_torch_ops_mode_is_what_was_asked():
    """HFA_TORCH_OPS=native makes the import fail unless the C++ ops loaded, so on the GPU
    machine (which runs this suite with it) the native path is what the other tests exercise."""
    import os
    wanted = os.environ.get("HFA_TORCH_OPS", "auto")
    assert _torch.OPS in ("native", "ctypes")
    if wanted != "auto":
        assert _torch.OPS == wanted


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda_only)])
def test_out_buffer_is_written_and_returned(device):
    dtype = torch.bfloat16
    q, k, v = (rand(300, 4, 64, dtype=dtype, device=device, seed=s) for s in (1, 2, 3))
    cu = torch.tensor([0, 100, 300], dtype=torch.int32, device=device)
    want = hfa.flash_attn_varlen_func(q, k, v, cu, cu, 200, 200, causal=True)
    buf = torch.full_like(want, float("nan"))
    got = hfa.flash_attn_varlen_func(q, k, v, cu, cu, 200, 200, causal=True, out=buf)
    assert got is buf and torch.equal(buf, want)
    q4 = q.view(1, 300, 4, 64)
    buf4 = torch.full_like(q4, float("nan"))
    assert hfa.flash_attn_func(q4, q4, q4, out=buf4) is buf4
    assert torch.equal(buf4, hfa.flash_attn_func(q4, q4, q4))
    with pytest.raises(ValueError, match=r"\bout\b"):
        hfa.flash_attn_func(q4.clone().requires_grad_(), q4, q4, out=buf4)


def _paged(k, v, lens, page, layout):
    """A vLLM-style cache holding the sequences of k / v (total, hkv, d): kv_cache[0], [1] of a
    (2, num_blocks, block_size, hkv, d) tensor, or the same through an (..., hkv, block, d)
    allocation (a non-contiguous view); pages handed out in a shuffled order."""
    hkv, d = k.shape[1], k.shape[2]
    pages = [math.ceil(n / page) for n in lens]
    num_blocks = sum(pages) + 3
    if layout == "nhd":
        kv = torch.zeros(2, num_blocks, page, hkv, d, dtype=k.dtype, device=k.device)
    else:
        kv = torch.zeros(2, num_blocks, hkv, page, d, dtype=k.dtype,
                         device=k.device).transpose(2, 3)
    order = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(7)).tolist()
    table = torch.zeros(len(lens), max(pages), dtype=torch.int32)
    start, used = 0, 0
    for b, n in enumerate(lens):
        for p in range(pages[b]):
            block = order[used]
            used += 1
            table[b, p] = block
            rows = slice(start + p * page, start + min(n, (p + 1) * page))
            count = rows.stop - rows.start
            kv[0, block, :count] = k[rows]
            kv[1, block, :count] = v[rows]
        start += n
    return kv[0], kv[1], table.to(k.device)


@cuda_only
@pytest.mark.parametrize("layout", ["nhd", "hnd"])
def test_vllm_paged_varlen_call(layout):
    """FA3's paged varlen call as vLLM makes it (cu_seqlens_q, seqused_k, block_table, views of
    one kv_cache tensor) against float32 attention over each sequence's own keys."""
    lens_q, lens_k, hq, hkv, d, page = [1, 7, 33], [50, 200, 129], 16, 4, 128, 16
    q = rand(sum(lens_q), hq, d, seed=1)
    k, v = rand(sum(lens_k), hkv, d, seed=2), rand(sum(lens_k), hkv, d, seed=3)
    k_cache, v_cache, table = _paged(k, v, lens_k, page, layout)
    cu_q = torch.tensor([0, 1, 8, 41], dtype=torch.int32, device="cuda")
    used_k = torch.tensor(lens_k, dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    got = hfa.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, None, max(lens_q), max(lens_k),
                                     causal=True, seqused_k=used_k, block_table=table, out=out)
    assert got is out
    qs, ks = 0, 0
    for nq, nk in zip(lens_q, lens_k):
        want = reference(q[qs:qs + nq], k[ks:ks + nk], v[ks:ks + nk], causal=True)
        err = (got[qs:qs + nq].float() - want).abs().max().item()
        assert err < 2e-2, f"sequence of {nq} queries over {nk} keys: max error {err}"
        qs, ks = qs + nq, ks + nk


@cuda_only
def test_broadcast_descales_are_per_kv_head_scales():
    e4m3 = getattr(torch, "float8_e4m3fn", None)
    if e4m3 is None:
        pytest.skip("this torch has no float8_e4m3fn")
    batch, hkv, hq, d, n = 3, 2, 8, 128, 256
    q = rand(batch, 1, hq, d, seed=4)
    k_cache = rand(batch, n, hkv, d, dtype=torch.float32, seed=5).to(e4m3)
    v_cache = rand(batch, n, hkv, d, dtype=torch.float32, seed=6).to(e4m3)
    scale_k = torch.tensor([0.5, 2.0], device="cuda")
    scale_v = torch.tensor([1.5, 0.25], device="cuda")
    lens = torch.tensor([256, 17, 100], dtype=torch.int32, device="cuda")
    want = hfa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, k_scale=scale_k,
                                       v_scale=scale_v)
    got = hfa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens,
                                      k_descale=scale_k.expand(batch, hkv),
                                      v_descale=scale_v.expand(batch, hkv),
                                      q_descale=torch.ones(batch, hkv, device="cuda"))
    assert torch.equal(got, want)
    with pytest.raises(NotImplementedError, match="k_descale"):
        hfa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens,
                                    k_descale=torch.ones(batch, hkv, device="cuda"),
                                    v_descale=scale_v.expand(batch, hkv))


@cuda_only
def test_transformers_layout_takes_no_copy():
    """(b, h, s, d) tensors viewed as (b, s, h, d), forward and backward: no copy kernel."""
    if not _torch.NATIVE:
        pytest.skip("the ctypes ops copy nothing either, but their profile is Python's; this "
                    "checks the native path")
    q, k, v = (rand(2, 8, 256, 128, seed=s).requires_grad_() for s in (1, 2, 3))
    hfa.flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), causal=True).sum().backward()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = hfa.flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), causal=True)
        out.backward(torch.ones_like(out))
    names = {e.name for e in prof.events()}
    copies = sorted(n for n in names if n in ("aten::copy_", "aten::clone", "aten::contiguous"))
    assert not copies, f"copies in hfa's path: {copies}"


@cuda_only
def test_kvcache_and_paged_varlen_do_not_synchronize():
    lens_k = [40, 90]  # and 1, 3 queries: cu_q below
    q = rand(4, 8, 128, seed=1)
    k, v = rand(130, 2, 128, seed=2), rand(130, 2, 128, seed=3)
    k_cache, v_cache, table = _paged(k, v, lens_k, 16, "nhd")
    cu_q = torch.tensor([0, 1, 4], dtype=torch.int32, device="cuda")
    used = torch.tensor(lens_k, dtype=torch.int32, device="cuda")
    qd = rand(2, 1, 8, 128, seed=4)

    def calls():
        hfa.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, None, 3, 90, causal=True,
                                   seqused_k=used, block_table=table)
        hfa.flash_attn_with_kvcache(qd, k_cache, v_cache, cache_seqlens=used, page_table=table)

    calls()
    torch.cuda.synchronize()
    prev = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        calls()
    finally:
        torch.cuda.set_sync_debug_mode(prev)


# --- PyTorch SDPA ------------------------------------------------------------------------------

def _hfa_kernels(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if "hfa" in e.name]


@cuda_only
def test_sdpa_runs_hfa_when_activated():
    attention = getattr(torch.nn, "attention", None)
    if attention is None or not hasattr(attention, "register_flash_attention_impl"):
        pytest.skip(f"torch {torch.__version__} has no register_flash_attention_impl")
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import hfa.integrations.torch as hfa_sdpa
    q, k, v = (rand(2, 8, 300, 128, seed=s).requires_grad_() for s in (1, 2, 3))
    dout = rand(2, 8, 300, 128, seed=4)

    def sdpa():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        grads = torch.autograd.grad(out, (q, k, v), dout)
        return out, grads

    hfa_sdpa.activate()
    try:
        assert torch.nn.attention.current_flash_attention_impl() == "HFA"
        out, grads = sdpa()
        kernels = _hfa_kernels(sdpa)
    finally:
        hfa_sdpa.deactivate()
    assert kernels, "SDPA's flash backend ran no hfa kernel while HFA was active"
    bshd = [t.transpose(1, 2) for t in (q, k, v)]
    want = hfa.flash_attn_func(*bshd, causal=True)
    want_grads = torch.autograd.grad(want, bshd, dout.transpose(1, 2))
    assert torch.equal(out.transpose(1, 2), want)
    for name, g, w in zip("qkv", grads, want_grads):
        assert torch.equal(g.transpose(1, 2), w), f"d{name}: SDPA through hfa != hfa"
    assert not _hfa_kernels(sdpa), "hfa kernels still run after deactivate()"


# --- transformers ------------------------------------------------------------------------------

def _transformers():
    try:
        import transformers
    except ImportError:
        pytest.skip("transformers is not installed")
    import hfa.integrations.transformers as hfa_hf
    hfa_hf.register()
    return transformers


def _close(a, b, what, tol=4e-2):
    err = ((a.float() - b.float()).norm() / b.float().norm()).item()
    assert err < tol, f"{what}: relative error {err:.3g} >= {tol}"


def _llama(transformers, impl):
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=512, intermediate_size=512,
                                      num_hidden_layers=2, num_attention_heads=8,
                                      num_key_value_heads=2, max_position_embeddings=1024)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to("cuda", torch.bfloat16)
    model.set_attn_implementation(impl)
    return model


@cuda_only
def test_transformers_llama_matches_sdpa():
    transformers = _transformers()
    hfa_model, sdpa_model = _llama(transformers, "hfa"), _llama(transformers, "sdpa")
    ids = torch.randint(0, 512, (2, 77), device="cuda", generator=torch.Generator(
        device="cuda").manual_seed(3))
    with torch.no_grad():
        _close(hfa_model(ids).logits, sdpa_model(ids).logits, "logits, no padding")
        mask = torch.ones_like(ids)
        mask[0, :20] = 0  # left padding
        a = hfa_model(ids, attention_mask=mask).logits
        b = sdpa_model(ids, attention_mask=mask).logits
        _close(a[0, 20:], b[0, 20:], "logits, left padding")
        _close(a[1], b[1], "logits, the unpadded row")
        # Packed: two sequences in one row, positions restarting; as each alone.
        packed = torch.cat([ids[0, :40], ids[1, :37]])[None]
        positions = torch.cat([torch.arange(40), torch.arange(37)])[None].cuda()
        together = hfa_model(packed, position_ids=positions).logits[0]
        _close(together[:40], hfa_model(ids[:1, :40]).logits[0], "packed, first sequence")
        _close(together[40:], hfa_model(ids[1:, :37]).logits[0], "packed, second sequence")
        gen_h = hfa_model.generate(ids[:, :30], attention_mask=mask[:, :30], max_new_tokens=6,
                                   do_sample=False, output_logits=True,
                                   return_dict_in_generate=True)
        gen_s = sdpa_model.generate(ids[:, :30], attention_mask=mask[:, :30], max_new_tokens=6,
                                    do_sample=False, output_logits=True,
                                    return_dict_in_generate=True)
    _close(gen_h.logits[0], gen_s.logits[0], "generate, first step")
    # A training step: every parameter's gradient within 5e-2 of SDPA's.
    for model in (hfa_model, sdpa_model):
        model.train()
        model(ids, labels=ids).loss.backward()
    for (name, p), q in zip(hfa_model.named_parameters(), sdpa_model.parameters()):
        _close(p.grad, q.grad, f"grad of {name}", tol=5e-2)


@cuda_only
def test_transformers_gemma2_softcap_and_window_match_eager():
    transformers = _transformers()
    config = transformers.Gemma2Config(vocab_size=512, hidden_size=256, intermediate_size=512,
                                       num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=64, sliding_window=16,
                                       attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                                       max_position_embeddings=512)
    models = {}
    for impl in ("hfa", "eager"):
        torch.manual_seed(0)
        models[impl] = transformers.Gemma2ForCausalLM(config).to("cuda", torch.bfloat16)
        models[impl].set_attn_implementation(impl)
    ids = torch.randint(0, 512, (2, 70), device="cuda")
    with torch.no_grad():
        _close(models["hfa"](ids).logits, models["eager"](ids).logits, "Gemma-2 logits")
