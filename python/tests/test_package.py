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
