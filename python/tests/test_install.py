"""`pip install .` of the checkout into a throwaway venv, offline, then hfa used from outside
the checkout with nothing pointing at it (no PYTHONPATH, no HFA_LIBRARY): the package must load
the libhfa.so it carries. Run by ctest as `python_install`, with HFA_LIBRARY naming the library
just built (setup.py bundles that one instead of running its own CMake build)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hfa

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(command, **kwargs):
    r = subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)
    assert r.returncode == 0, f"{command} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, a folder outside the checkout, the environment to run it in)."""
    library = os.environ.get("HFA_LIBRARY")
    assert library and os.path.isfile(library), \
        "set HFA_LIBRARY to a built libhfa.so (ctest does), for setup.py to bundle"
    work = tmp_path_factory.mktemp("install")
    venv = work / "venv"
    # The system's pip, setuptools and wheel (Debian packages) serve the venv: nothing to fetch.
    run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python")
    if sys.prefix != sys.base_prefix:
        # Run from a venv itself (the GPU machine's torch venv): --system-site-packages reaches
        # the base interpreter's packages only, so point the new venv at this one's (numpy).
        site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        parents = [p for p in sys.path if p.endswith("site-packages")]
        (Path(site.strip()) / "parent-venv.pth").write_text("\n".join(parents) + "\n")
    run([python, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
         "--no-cache-dir", "--quiet", ROOT], env=dict(os.environ, HFA_LIBRARY=library))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HFA_LIBRARY")}
    return python, str(work), env


def test_the_installed_package_loads_its_own_library(installed):
    python, outside, env = installed
    facts = json.loads(run([python, "-c", """if True:
        import importlib.metadata, json, hfa, hfa.integrations, hfa.distributed
        print(json.dumps({"package": hfa.__file__, "library": hfa.library_path(),
                          "version": hfa.__version__, "library_version": hfa.version(),
                          "metadata_version": importlib.metadata.version("hfa")}))"""],
        cwd=outside, env=env))
    package_dir = os.path.dirname(facts["package"])
    assert package_dir.startswith(outside), facts
    assert facts["library"] == os.path.join(package_dir, "libhfa.so")
    # One version everywhere: the CMake project's, as the checkout's package reads it.
    assert facts["version"] == facts["library_version"] == facts["metadata_version"] \
        == hfa.__version__, facts


def test_a_numpy_forward_from_the_installed_package(installed):
    python, outside, env = installed
    error = float(run([python, "-c", """if True:
        import numpy as np, hfa
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal((1, n, 2, 64), dtype=np.float32) for n in (3, 5, 5))
        out = hfa.flash_attn_func(q, k, v)
        s = np.einsum("bihd,bjhd->bhij", q, k) / 8.0
        p = np.exp(s - s.max(-1, keepdims=True))
        want = np.einsum("bhij,bjhd->bihd", p / p.sum(-1, keepdims=True), v)
        print(np.abs(out - want).max())"""], cwd=outside, env=env))
    assert error < 1e-5


def test_the_numpy_example_runs_on_the_installed_package(installed):
    python, outside, env = installed
    out = run([python, os.path.join(ROOT, "examples", "python", "numpy_attention.py")],
              cwd=outside, env=env)
    assert "backward dv" in out and outside in out, out  # the library inside the venv ran
