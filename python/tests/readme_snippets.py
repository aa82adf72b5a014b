"""The code blocks of the repository's README.md, for the tests that run them: every ```python
block as a script of its own in a fresh interpreter (test_readme.py the numpy ones,
test_torch_readme.py those that import torch), and the ```c and ```cpp blocks compiled against
include/ and run against libhfa (test_readme.py)."""

import ast
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
SNIPPET_TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    language: str
    line: int  # of the opening fence in README.md, counted from 1
    code: str

    @property
    def id(self):
        return f"README.md:{self.line}"

    def modules(self):
        """The top-level names of the modules the block imports."""
        names = set()
        for node in ast.walk(ast.parse(self.code, self.id)):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module.split(".")[0])
        return names

    def needs_cuda(self):
        """Whether the block asks for a CUDA device outright (device="cuda", .cuda()); blocks
        that pick "cuda" only when there is one do not."""
        for node in ast.walk(ast.parse(self.code, self.id)):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Attribute) and node.func.attr == "cuda" and not node.args:
                return True
            for keyword in node.keywords:
                value = keyword.value
                if (keyword.arg == "device" and isinstance(value, ast.Constant)
                        and str(value.value).startswith("cuda")):
                    return True
        return False


def blocks(language):
    """Every ```<language> block of README.md, in order."""
    found, code, start = [], None, 0
    with open(README, encoding="utf-8") as readme:
        for number, line in enumerate(readme, 1):
            if code is None:
                if re.fullmatch(r"```" + re.escape(language) + r"\s*", line):
                    code, start = [], number
            elif line.startswith("```"):
                found.append(Block(language, start, "".join(code)))
                code = None
            else:
                code.append(line)
    if code is not None:
        raise AssertionError(f"README.md:{start}: a ```{language} block is never closed")
    return found


def check_run(command, block, cwd, what):
    """Runs `command`; fails with the README line and the output unless it exits 0."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    try:
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                                timeout=SNIPPET_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{block.id}: the {block.language} snippet's {what} took more "
                             f"than {SNIPPET_TIMEOUT_S} s") from None
    if result.returncode != 0:
        raise AssertionError(f"{block.id}: the {block.language} snippet's {what} failed (exit "
                             f"{result.returncode}):\n{result.stdout}{result.stderr}")
    return result


def run_python(block, cwd):
    """Runs a ```python block as a script of its own, with the checkout's package importable."""
    path = os.path.join(cwd, "snippet.py")
    with open(path, "w", encoding="utf-8") as script:
        script.write(block.code)
    check_run([sys.executable, path], block, cwd, "run")


def compiler(language):
    """The C or C++ compiler: $CC / $CXX, else cc / c++ on the PATH."""
    variable, default = ("CC", "cc") if language == "c" else ("CXX", "c++")
    name = os.environ.get(variable) or default
    path = shutil.which(name)
    if path is None:
        raise AssertionError(f"no {language} compiler: {variable} or {default} on the PATH "
                             f"(Debian: apt-get install g++)")
    return path


def build_and_run(block, library, cwd):
    """Compiles a ```c or ```cpp block as a program against include/ and `library` (a
    libhfa.so), then runs it."""
    source = os.path.join(cwd, "snippet.c" if block.language == "c" else "snippet.cpp")
    with open(source, "w", encoding="utf-8") as file:
        file.write(block.code)
    program = os.path.join(cwd, "snippet")
    standard = "-std=c11" if block.language == "c" else "-std=c++20"
    check_run([compiler(block.language), standard, "-Wall", "-Werror", "-I",
               os.path.join(ROOT, "include"), source, "-o", program, library,
               "-Wl,-rpath," + os.path.dirname(library)], block, cwd, "build")
    check_run([program], block, cwd, "run")
