"""README.md's snippets run as written (issue 31): every ```python block that needs no torch
runs as a script of its own on the CPU backend, and the ```c and ```cpp blocks compile against
include/ and run against libhfa. The torch blocks run in test_torch_readme.py."""

import pytest

import hfa
from readme_snippets import blocks, build_and_run, run_python

PYTHON_BLOCKS = blocks("python")
NUMPY_BLOCKS = [b for b in PYTHON_BLOCKS if "torch" not in b.modules()]
NATIVE_BLOCKS = blocks("c") + blocks("cpp")


def test_the_readme_has_snippets_of_each_kind():
    # A change of fence (```py, ```C++) would take a block out of these tests silently.
    assert len(NUMPY_BLOCKS) >= 4, [b.id for b in NUMPY_BLOCKS]
    assert len(PYTHON_BLOCKS) > len(NUMPY_BLOCKS), "no torch block: test_torch_readme.py tests none"
    assert [b.language for b in NATIVE_BLOCKS] == ["c", "cpp"], [b.id for b in NATIVE_BLOCKS]


@pytest.mark.parametrize("block", NUMPY_BLOCKS, ids=lambda b: b.id)
def test_python_snippet_runs(block, tmp_path):
    run_python(block, str(tmp_path))


@pytest.mark.parametrize("block", NATIVE_BLOCKS, ids=lambda b: b.id)
def test_native_snippet_builds_and_runs(block, tmp_path):
    build_and_run(block, hfa.library_path(), str(tmp_path))
