"""Make the checkout's package (python/hfa) and the test helpers importable, and report which
libhfa the tests use (CMake sets HFA_LIBRARY to the one it built)."""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.dirname(_HERE))


def pytest_report_header(config):
    import hfa
    try:
        return f"hfa {hfa.version()} from {hfa.library_path()}"
    except OSError as e:  # the tests will fail and say why; the header just notes it
        return f"hfa: library not loaded ({e})"
