"""The devices the torch tests run on, for test files that have imported torch already (after
their pytest.importorskip): one rule for when the CUDA cases skip, and why."""

import pytest
import torch

import hfa


def _cuda_skip_reason():
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    try:
        if hfa.cuda_device_count() == 0:
            return "this libhfa was built without CUDA or sees no GPU"
    except OSError as e:
        return f"libhfa did not load: {e}"
    return None


CUDA_SKIP = _cuda_skip_reason()
cuda_only = pytest.mark.skipif(CUDA_SKIP is not None, reason=CUDA_SKIP or "")
DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=cuda_only)]
