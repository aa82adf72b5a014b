"""README.md's torch snippets run as written (issue 31): every ```python block that imports
torch runs as a script of its own; a block that asks for a CUDA device outright skips without
one, a block importing a package that is not installed (transformers) skips, saying which, and
the SDPA block skips with a torch older than 2.11."""

import importlib.util

import pytest

torch = pytest.importorskip("torch", minversion="2.4", reason="torch is not installed")

from readme_snippets import blocks, run_python  # noqa: E402
from torch_devices import CUDA_SKIP  # noqa: E402

TORCH_BLOCKS = [b for b in blocks("python") if "torch" in b.modules()]


def sdpa_override_missing():
    """Why SDPA's flash backend cannot be routed to hfa with this torch, or None."""
    attention = getattr(torch.nn, "attention", None)
    if attention is None or not hasattr(attention, "register_flash_attention_impl"):
        return (f"torch {torch.__version__} has no "
                f"torch.nn.attention.register_flash_attention_impl (2.11+)")
    return None


def test_the_readme_has_torch_snippets():
    assert TORCH_BLOCKS, "README.md has no ```python block that imports torch"


@pytest.mark.parametrize("block", TORCH_BLOCKS, ids=lambda b: b.id)
def test_torch_snippet_runs(block, tmp_path):
    for module in sorted(block.modules()):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    if block.needs_cuda() and CUDA_SKIP:
        pytest.skip(CUDA_SKIP)
    if "hfa.integrations.torch" in block.code and sdpa_override_missing():
        pytest.skip(sdpa_override_missing())
    run_python(block, str(tmp_path))
