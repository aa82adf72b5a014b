"""scripts/skip-reasons, which scripts/test runs after ctest: the reason of every skip, from the
JUnit file's outputs of gtest and pytest."""

import os
import runpy
from xml.sax.saxutils import escape

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
script = runpy.run_path(os.path.join(ROOT, "scripts", "skip-reasons"), run_name="skip_reasons")

GTEST_OUTPUT = """[ RUN      ] Sm90.Forward
/src/tests/sm90/test_forward.cpp:12: Skipped
no Hopper GPU
(CUDA: no device)
[  SKIPPED ] Sm90.Forward (0 ms)
"""
PYTEST_OUTPUT = """==== short test summary info ====
SKIPPED [1] ../../python/tests/test_torch.py:18: torch is not installed
SKIPPED [3] ../../python/tests/test_x.py:5: no GPU
1 skipped in 0.18s
"""


def case(name, output, skipped):
    mark = '<skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/>' if skipped else ""
    return (f'<testcase name="{escape(name)}">{mark}'
            f'<system-out>{escape(output)}</system-out></testcase>')


TRACED_SKIPS = """[ RUN      ] Sm90/Decode.Append/hdim64
/src/tests/sm90/decode/test_decode.cpp:510: Skipped
needs a Hopper GPU
Google Test trace:
/src/tests/sm90/decode/test_decode.cpp:558: fixed-length q
/src/tests/sm90/decode/test_decode.cpp:510: Skipped
needs a Hopper GPU
Google Test trace:
/src/tests/sm90/decode/test_decode.cpp:558: varlen q
[  SKIPPED ] Sm90/Decode.Append/hdim64 (0 ms)
"""


def test_reasons_of_gtest_and_pytest():
    assert script["reasons"](GTEST_OUTPUT) == ["no Hopper GPU (CUDA: no device)"]
    assert script["reasons"](TRACED_SKIPS) == ["needs a Hopper GPU"]  # once, without the traces
    assert script["reasons"](PYTEST_OUTPUT) == ["python/tests/test_torch.py:18: torch is not installed",
                                                "python/tests/test_x.py:5: no GPU"]
    assert script["reasons"]("[ RUN ] A.B\n[       OK ] A.B\n") == []


def test_summary_groups_tests_by_reason_and_flags_silent_skips():
    junit = "<testsuite>" + "".join([
        case("Sm90.Forward", GTEST_OUTPUT, True),
        case("Sm90/Grid.Backward/d64  # GetParam() = 36-byte object <40-00>",
             GTEST_OUTPUT.replace("Forward", "Backward"), True),
        case("python", PYTEST_OUTPUT, False),
        case("Quiet.Skip", "[  SKIPPED ] Quiet.Skip\n", True),
        case("Plain.Pass", "[       OK ] Plain.Pass\n", False),
    ]) + "</testsuite>"
    lines, silent = script["summary"](junit)
    text = "\n".join(lines)
    assert "no Hopper GPU (CUDA: no device)\n      2 skipped: Sm90.Forward, Sm90/Grid.Backward/d64\n" in text
    assert "torch is not installed\n      1 skipped: python (passed; inside)" in text
    assert silent == ["Quiet.Skip"] and "Quiet.Skip: skipped without saying why" in text
    assert "Plain.Pass" not in text
