"""hfa.__version__, whose one source is project(hfa VERSION ...) in the top-level CMakeLists.txt
(the library's hfa_version() comes from there too). A checkout reads it from that file; setup.py
writes the value in here when it builds the installed package, which has no CMakeLists.txt."""

import os
import re


def version_in(cmakelists: str) -> str:
    with open(cmakelists, encoding="utf-8") as f:
        match = re.search(r"^project\(hfa VERSION ([0-9]+\.[0-9]+\.[0-9]+)", f.read(), re.M)
    if match is None:
        raise RuntimeError(f"{cmakelists}: no project(hfa VERSION x.y.z) line")
    return match.group(1)


__version__ = version_in(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                      "CMakeLists.txt"))
