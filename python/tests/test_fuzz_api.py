"""The fuzz of the numpy front end (fuzz_api.py says what it checks): every entry point of
hfa.__all__ that takes arrays, with one argument changed at random per call. CI's sanitizer job
runs this file under AddressSanitizer; HFA_FUZZ_ITERATIONS=1000 runs longer."""

import numpy as np
import pytest

import hfa
from fuzz_api import ITERATIONS, NUMPY_CASES, NumpyArrays, fuzz, valid_case

# What hfa exports that takes no numpy array: the errors, the library's facts, the torch-only
# FP8 helpers (their torch fuzz is test_torch_fuzz_api.py), and get_mla_metadata (it takes
# anything and reads nothing).
NO_NUMPY_ARRAYS = {"HfaError", "HfaInvalidArgument", "HfaNotSupported", "version",
                   "cuda_device_count", "library_path", "candidate_paths", "quantize_fp8",
                   "hadamard_signs", "get_mla_metadata"}


def test_every_entry_point_is_fuzzed():
    assert set(hfa.__all__) - NO_NUMPY_ARRAYS == set(NUMPY_CASES)


@pytest.mark.parametrize("entry", sorted(NUMPY_CASES))
def test_the_valid_calls_run(entry):
    """The calls the fuzz changes are valid: a rejection is the change's doing."""
    for seed in range(8):
        valid_case(NUMPY_CASES[entry], NumpyArrays(), seed).call_self()


@pytest.mark.parametrize("entry", sorted(NUMPY_CASES))
def test_fuzz(entry):
    outcomes = fuzz(NUMPY_CASES[entry], NumpyArrays())
    # Not a fuzz that rejects everything (a broken valid call) or nothing (no change bites).
    assert outcomes["rejected"] and (outcomes["accepted"] or ITERATIONS < 100), outcomes


def test_numpy_rejects_the_torch_only_helpers():
    x = np.zeros((1, 4, 2, 64), np.float32)
    with pytest.raises(TypeError, match="^x: quantize_fp8 takes a torch tensor"):
        hfa.quantize_fp8(x)
