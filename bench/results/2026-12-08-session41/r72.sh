#!/bin/bash
# Session 41's gate: every GPU suite over .device/snopp (the library and the 17 suites of the
# candidates together: fma4.patch, hint.patch and nopp.patch).
# The Python suite is left out: no Python or host code changed. Carry .device/snopp (28 MB).
set -u
cd "$(dirname "$0")/../../.."
SUITES_TIMEOUT=500 PYTEST_TIMEOUT=0 bash bench/device_suites.sh .device/snopp r72 | tail -40
