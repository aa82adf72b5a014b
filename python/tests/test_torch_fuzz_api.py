"""The fuzz of the torch front end on CPU tensors (fuzz_api.py says what it checks): the numpy
fuzz's calls with torch tensors, torch's own dtypes among the changes (bfloat16, float8), and
the torch-only FP8 helpers. torch has no read-only tensors, so that change is numpy's alone.
Skips without torch; on a machine whose libhfa has the C++ torch ops they are what runs."""

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", minversion="2.4",
    reason="torch is not installed: the torch front end's fuzz is untested on this machine; "
           "the numpy fuzz (test_fuzz_api.py) still runs")

import hfa  # noqa: E402
from fuzz_api import ITERATIONS, NUMPY_CASES, Case, fuzz, valid_case  # noqa: E402


class TorchArrays:
    """What the fuzz does to an array, on torch CPU tensors."""

    dtypes = [torch.float64, torch.float16, torch.bfloat16, torch.float32, torch.int32,
              torch.int64, torch.uint8, torch.int8, torch.bool] + [
        getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)]
    unlabelled = {torch.float64, torch.int64, torch.int8, torch.bool}
    has_read_only = False

    def array(self, a):
        return torch.from_numpy(a.copy())

    def to_numpy(self, t):
        t = t.detach().cpu()
        return t.float().numpy() if t.dtype not in (torch.float32, torch.float16) else t.numpy()

    def snapshot(self, t):
        packed = torch.empty(t.shape, dtype=t.dtype).copy_(t.detach())
        return packed.reshape(-1).view(torch.uint8).numpy().tobytes(), t.dtype, tuple(t.shape)

    def astype(self, t, dtype):
        return t.to(dtype)

    def dtype_is_unlabelled(self, t):
        return t.dtype in self.unlabelled

    def layouts(self, t):
        out = []
        if t.dim():
            axis = t.dim() - 1 if t.shape[-1] > 1 else 0
            wide = list(t.shape)
            wide[axis] *= 2
            index = [slice(None)] * t.dim()
            index[axis] = slice(None, None, 2)
            gapped = torch.zeros(wide, dtype=t.dtype)
            gapped[tuple(index)] = t
            out.append(("gapped", gapped[tuple(index)]))
            order = list(reversed(range(t.dim())))
            out.append(("fortran", t.permute(order).contiguous().permute(order)))
            out.append(("transposed", t.transpose(0, -1).contiguous().transpose(0, -1)))
            if 1 in t.shape:  # a stride of 0 where the extent is 1: the same elements
                strides = [0 if n == 1 else s for n, s in zip(t.shape, t.stride())]
                out.append(("broadcast", t.as_strided(t.shape, strides)))
        return out

    def reshaped(self, t, shape):
        return torch.zeros(shape, dtype=t.dtype)


def quantize_fp8_case(rng):
    granularity = str(rng.choice(["tensor", "head", "block"]))
    varlen = bool(rng.integers(2))
    x = rng.standard_normal((7, 2, 64) if varlen else (2, 5, 2, 64)).astype(np.float32)
    args = {"x": x, "granularity": granularity, "block": int(rng.choice([1, 4, 128])),
            "hadamard": bool(rng.integers(2)), "seed": int(rng.integers(0, 9))}
    if varlen:
        args["cu_seqlens"] = np.array([0, 3, 7], np.int32)
    return Case(hfa.quantize_fp8, args, integers=["block", "seed"])


def hadamard_signs_case(rng):
    return Case(hfa.hadamard_signs, {"d": int(rng.choice([64, 128, 7])),
                                     "seed": int(rng.integers(0, 2 ** 63))},
                integers=["d", "seed"])


TORCH_CASES = {**NUMPY_CASES, "quantize_fp8": quantize_fp8_case,
               "hadamard_signs": hadamard_signs_case}


def test_every_entry_point_is_fuzzed():
    not_arrays = {"HfaError", "HfaInvalidArgument", "HfaNotSupported", "version",
                  "cuda_device_count", "library_path", "candidate_paths", "get_mla_metadata"}
    assert set(hfa.__all__) - not_arrays == set(TORCH_CASES)


@pytest.mark.parametrize("entry", sorted(TORCH_CASES))
def test_the_valid_calls_run(entry):
    for seed in range(8):
        valid_case(TORCH_CASES[entry], TorchArrays(), seed).call_self()


@pytest.mark.parametrize("entry", sorted(TORCH_CASES))
def test_fuzz(entry):
    outcomes = fuzz(TORCH_CASES[entry], TorchArrays())
    # Not a fuzz that rejects everything (a broken valid call) or nothing (no change bites).
    assert outcomes["rejected"] and (outcomes["accepted"] or ITERATIONS < 100), outcomes


# Issue 31's dtype cases on torch tensors: each array labelled with its own dtype, so the library
# names the one that does not fit (before, the new tokens, v_cache, the rotary tables and
# v_scale took q's, k_cache's and k_scale's labels: a write past the cache, or garbage).
def _kvcache_tensors(**dtypes):
    shapes = {"q": (2, 1, 4, 64), "k_cache": (2, 64, 2, 64), "v_cache": (2, 64, 2, 64),
              "k": (2, 1, 2, 64), "v": (2, 1, 2, 64)}
    return {n: torch.full(s, 0.5, dtype=dtypes.get(n, torch.float32)) for n, s in shapes.items()}


@pytest.mark.parametrize("name", ["v_cache", "k", "v"])
def test_kvcache_append_of_another_dtype(name):
    a = _kvcache_tensors(**{name: torch.float16})
    before = {n: t.clone() for n, t in a.items()}
    with pytest.raises(ValueError, match=f"^{name}: "):
        hfa.flash_attn_with_kvcache(a["q"], a["k_cache"], a["v_cache"], k=a["k"], v=a["v"],
                                    cache_seqlens=torch.tensor([62, 62], dtype=torch.int32))
    assert all(torch.equal(a[n], before[n]) for n in a)


def test_kvcache_rotary_and_scales_of_another_dtype():
    a = _kvcache_tensors()
    table = torch.ones(64, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="^rotary_cos: "):
        hfa.flash_attn_with_kvcache(a["q"], a["k_cache"], a["v_cache"], k=a["k"], v=a["v"],
                                    cache_seqlens=torch.tensor([62, 62], dtype=torch.int32),
                                    rotary_cos=table, rotary_sin=table)
    codes = torch.zeros(2, 64, 2, 64, dtype=torch.uint8)
    with pytest.raises((TypeError, ValueError), match="^v_scale: "):
        hfa.flash_attn_with_kvcache(a["q"], codes, codes.clone(), cache_seqlens=4,
                                    k_scale=torch.ones(2), v_scale=torch.ones(2, dtype=torch.uint8))
