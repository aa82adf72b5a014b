"""README.md's torch snippets run as written (issue 31): every ```python block that imports
torch runs as a script of its own; a block that asks for a CUDA device outright skips without
one, a block importing a package that is not installed (transformers) skips, saying which."""

import importlib.util

import pytest

torch = pytest.importorskip("torch", minversion="2.4", reason="torch is not installed")

from readme_snippets import blocks, run_python  # noqa: E402
from torch_devices import CUDA_SKIP  # noqa: E402

TORCH_BLOCKS = [b for b in blocks("python") if "torch" in b.modules()]


def test_the_readme_has_torch_snippets():
    assert TORCH_BLOCKS, "README.md has no ```python block that imports torch"


@pytest.mark.parametrize("block", TORCH_BLOCKS, ids=lambda b: b.id)
def test_torch_snippet_runs(block, tmp_path):
    for module in sorted(block.modules()):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    if block.needs_cuda() and CUDA_SKIP:
        pytest.skip(CUDA_SKIP)
    run_python(block, str(tmp_path))
