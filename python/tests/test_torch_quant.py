"""hfa.quantize_kv / hfa.dequantize_kv on torch tensors: the CPU path against the numpy one, and
on a GPU the bytes of the GPU append (flash_attn_with_kvcache with k= / v= on CUDA tensors) and
of the CPU quantization, bit for bit. Skips without torch, and the CUDA cases without a GPU."""

import pytest

torch = pytest.importorskip(
    "torch", minversion="2.4",
    reason="torch is not installed: the torch front end (custom ops, autograd, torch.compile) "
           "is untested on this machine; the numpy tests still run")

import hfa  # noqa: E402
from torch_devices import cuda_only  # noqa: E402
from test_quantize import FORMATS, format_args, values  # noqa: E402




def as_bytes(t):
    return t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()


def torch_args(format, x, device):
    return {k: torch.from_numpy(v).to(device) for k, v in format_args(format, x).items()}


@pytest.mark.parametrize("format", FORMATS)
def test_cpu_matches_numpy(format):
    x = values((9, 2, 64), seed=7)
    codes, scale = hfa.quantize_kv(x, format, **format_args(format, x))
    tc, ts = hfa.quantize_kv(torch.from_numpy(x), format, **torch_args(format, x, "cpu"))
    assert as_bytes(tc) == codes.tobytes() and as_bytes(ts) == scale.tobytes()
    g = format_args(format, x).get("global_scale")
    y = hfa.dequantize_kv(tc, ts, format, dtype=torch.bfloat16,
                          global_scale=None if g is None else torch.from_numpy(g))
    ref = torch.from_numpy(hfa.dequantize_kv(codes, scale, format, global_scale=g))
    assert torch.equal(y, ref.to(torch.bfloat16))


@cuda_only
@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("hdim", [64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cuda_matches_cpu(format, hdim, dtype):
    """The GPU kernel writes the CPU's bytes and reads back the CPU's values."""
    x32 = values((3, 5, 4, hdim), seed=8)
    x = torch.from_numpy(x32).to(dtype)
    args = torch_args(format, x32, "cpu")
    cpu = hfa.quantize_kv(x, format, **args)
    gpu = hfa.quantize_kv(x.cuda(), format, **{k: v.cuda() for k, v in args.items()})
    torch.cuda.synchronize()
    assert gpu[0].is_cuda and as_bytes(gpu[0]) == as_bytes(cpu[0])
    assert as_bytes(gpu[1]) == as_bytes(cpu[1])
    g = args.get("global_scale")
    back_cpu = hfa.dequantize_kv(*cpu, format, global_scale=g, dtype=dtype)
    back_gpu = hfa.dequantize_kv(gpu[0], gpu[1], format, dtype=dtype,
                                 global_scale=None if g is None else g.cuda())
    assert torch.equal(back_gpu.cpu(), back_cpu)


@cuda_only
@pytest.mark.parametrize("format", FORMATS)
def test_cuda_matches_the_gpu_append(format):
    """quantize_kv on the GPU writes what the GPU append writes into a paged cache."""
    tokens, heads, d, page_size = 40, 2, 128, 16
    x32 = values((tokens, heads, d), seed=9)
    x = torch.from_numpy(x32).to(torch.bfloat16).cuda()
    args = {k: v.cuda() for k, v in torch_args(format, x.float().cpu().numpy(), "cpu").items()}
    codes, scale = hfa.quantize_kv(x, format, **args)
    pages = tokens // page_size + 2
    table = torch.randperm(pages, dtype=torch.int32).cuda()[None]
    fp4 = format in ("nvfp4", "mxfp4")
    code_dtype = torch.uint8 if fp4 or not hasattr(torch, "float8_e4m3fn") else torch.float8_e4m3fn
    cache = torch.zeros((pages, page_size, heads, d // 2 if fp4 else d), dtype=torch.uint8,
                        device="cuda").view(code_dtype)
    if format == "fp8_per_head":
        cache_scale = args["scale"]
    elif format == "fp8_per_token":
        cache_scale = torch.zeros((pages, page_size, heads), device="cuda")
    else:
        cache_scale = torch.zeros((pages, page_size, heads, d // (16 if format == "nvfp4" else 32)),
                                  dtype=torch.uint8, device="cuda")
    g = args.get("global_scale")
    q = torch.zeros((1, 1, heads, d), dtype=torch.bfloat16, device="cuda")
    hfa.flash_attn_with_kvcache(q, cache, cache.clone(), k=x[None], v=x[None],
                                cache_seqlens=torch.zeros(1, dtype=torch.int32, device="cuda"),
                                page_table=table, k_scale=cache_scale, v_scale=cache_scale.clone(),
                                k_global_scale=g, v_global_scale=g)
    positions = torch.arange(tokens, device="cuda")
    page, slot = table[0, positions // page_size].long(), positions % page_size
    assert as_bytes(cache[page, slot]) == as_bytes(codes)
    if format != "fp8_per_head":
        assert as_bytes(cache_scale[page, slot]) == as_bytes(scale)


@cuda_only
def test_cuda_rejects_what_the_kernel_cannot_take():
    x = torch.zeros((4, 2, 96), device="cuda")
    with pytest.raises(hfa.HfaNotSupported, match=r"^x: headdim 96 on a GPU"):
        hfa.quantize_kv(x, "mxfp4")
    with pytest.raises(hfa.HfaInvalidArgument, match=r"^scale: on cpu, expected cuda:0 \(as x\)"):
        hfa.quantize_kv(x[..., :64], "fp8_per_head", scale=torch.ones(2))
