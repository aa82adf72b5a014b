"""The hfa Python package with the libhfa.so it loads inside it: `pip install --no-build-isolation .`
from the checkout.

The library comes from the CMake build: HFA_LIBRARY names one already built (any preset);
otherwise this runs the release preset (CPU backend, plus the sm_90a kernels when nvcc is found),
which reuses build/release when it is there. The version is the CMake project's.
"""

import os
import runpy
import shutil
import subprocess

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from wheel.bdist_wheel import bdist_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))
VERSION = runpy.run_path(os.path.join(ROOT, "python", "hfa", "_version.py"))["__version__"]


def built_library() -> str:
    given = os.environ.get("HFA_LIBRARY")
    if given:
        if not os.path.isfile(given):
            raise SystemExit(f"setup.py: HFA_LIBRARY={given} is not a file")
        return given
    for step in (["cmake", "--preset", "release"], ["cmake", "--build", "--preset", "release"]):
        print("setup.py:", " ".join(step), flush=True)
        subprocess.run(step, cwd=ROOT, check=True)
    return os.path.join(ROOT, "build", "release", "src", "libhfa.so")


class BuildWithLibrary(build_py):
    """The package's modules, plus libhfa.so beside them (and libhfa_torch.so, the C++ torch
    ops, when the build made them: where it found torch) and the version written in."""

    def run(self):
        super().run()
        package = os.path.join(self.build_lib, "hfa")
        library = built_library()
        shutil.copyfile(library, os.path.join(package, "libhfa.so"))  # the file, not a link
        torch_ops = os.path.join(os.path.dirname(os.path.realpath(library)), "libhfa_torch.so")
        if os.path.isfile(torch_ops):
            shutil.copyfile(torch_ops, os.path.join(package, "libhfa_torch.so"))
        with open(os.path.join(package, "_version.py"), "w", encoding="utf-8") as f:
            f.write('"""hfa.__version__: the CMake project version, written by setup.py."""\n\n'
                    f'__version__ = "{VERSION}"\n')


class PlatformWheel(bdist_wheel):
    """libhfa.so ties the wheel to this platform; ctypes, not an extension module, loads it, so
    any Python 3 will do."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


setup(
    name="hfa",
    version=VERSION,
    description="Exact attention for Hopper GPUs and CPUs (FlashAttention-3's Python API)",
    license="Apache-2.0",
    python_requires=">=3.9",
    package_dir={"": "python"},
    packages=find_packages(where="python", include=["hfa", "hfa.*"]),
    cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel},
    # setuptools' scratch under build/, beside the CMake presets' folders.
    options={"build": {"build_base": "build/python"}, "egg_info": {"egg_base": "build/python"}},
    zip_safe=False,
)
