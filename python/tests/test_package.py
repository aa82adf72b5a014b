"""The package itself: loading the library, error mapping, imports without numpy/torch."""

import os
import subprocess
import sys

import pytest

import hfa
from hfa import _lib

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_version_and_devices():
    assert hfa.version()
    # The package's version and the library's both come from the CMake project version.
    assert hfa.__version__ == hfa.version()
    assert hfa.cuda_device_count() >= 0
    assert os.path.isfile(hfa.library_path())


@pytest.mark.parametrize("status,cls", [
    (_lib.ERROR_INVALID_ARGUMENT, ValueError),
    (_lib.ERROR_NOT_SUPPORTED, NotImplementedError),
    (_lib.ERROR_CUDA, RuntimeError),
    (_lib.ERROR_INTERNAL, RuntimeError),
])
def test_error_mapping(status, cls):
    err = _lib.error_for(status, "q: something")
    assert isinstance(err, cls) and err.status == status and str(err) == "q: something"


def run_python(code, **env):
    full_env = dict(os.environ, PYTHONPATH=PYTHON_DIR, **env)
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=120)


def test_import_needs_neither_numpy_nor_torch():
    # A None entry in sys.modules makes `import numpy` / `import torch` fail.
    r = run_python("import sys; sys.modules['numpy'] = None; sys.modules['torch'] = None\n"
                   "import hfa; print(hfa.version())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == hfa.version()


FIRST_CALLS = {
    "flash_attn_func": "hfa.flash_attn_func(q, k, v, causal=True)",
    "flash_attn_func with an option row": "hfa.flash_attn_func(q, k, v, alibi_slopes=slopes)",
    "flash_attn_varlen_func": "hfa.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 8, 8)",
    "flash_attn_backward": "hfa.flash_attn_backward(q, q, k, v, q, lse)",
    "flash_attn_with_kvcache": "hfa.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens)",
    "flash_attn_with_kvcache appending": "hfa.flash_attn_with_kvcache(q[:, :1], k, v, k=q[:, :1]"
                                         ".copy(), v=q[:, :1].copy(), cache_seqlens=lens - 1)",
}


@pytest.mark.parametrize("call", FIRST_CALLS)
def test_first_call_of_a_process_loads_the_library(call):
    """Each numpy entry point as the first thing a process does: the options' description is
    the library's, read when the library loads, which this call must do itself."""
    pytest.importorskip("numpy")
    r = run_python(
        "import numpy as np\nimport hfa\n"
        "q, k, v = (np.ones((1, 8, 2, 64), np.float32) for _ in range(3))\n"
        "lse = np.zeros((1, 2, 8), np.float32)\nslopes = np.ones(2, np.float32)\n"
        "cu = np.array([0, 8], np.int32)\nlens = np.array([8], np.int32)\n"
        "from hfa import _lib\nassert _lib._lib is None, 'loaded before the call'\n"
        f"{FIRST_CALLS[call]}\nprint('ran')")
    assert r.returncode == 0 and r.stdout.strip() == "ran", r.stderr


def test_hfa_library_names_the_missing_file(tmp_path):
    missing = str(tmp_path / "no-such-libhfa.so")
    r = run_python("import hfa; hfa.version()", HFA_LIBRARY=missing)
    assert r.returncode != 0 and missing in r.stderr and "HFA_LIBRARY" in r.stderr


def test_library_search_order(monkeypatch):
    monkeypatch.delenv("HFA_LIBRARY", raising=False)
    paths = _lib.candidate_paths()
    assert paths[0] == os.path.join(PYTHON_DIR, "hfa", "libhfa.so")
    root = os.path.dirname(PYTHON_DIR)
    assert os.path.join(root, "build", "release", "src", "libhfa.so") in paths
    monkeypatch.setenv("HFA_LIBRARY", "/x/libhfa.so")
    assert _lib.candidate_paths() == ["/x/libhfa.so"]
