#!/bin/bash
# Every GPU suite over binaries built here and carried xz-packed in one folder (default
# .device/suites: libhfa.so.0.1.0 and the test_sm90_* / test_quant_gpu binaries of a release
# build, the binaries best as one tar.xz: see unpack in device_call.sh), then the Python suite
# on the GPU; one tarball back in $OUT. The first call of a session whose tree changed GPU host
# code:
#
#   bench/device_suites.sh [FOLDER [CALL_NAME]]      (run: carry [".device"])
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
bin=$PWD/${1:-.device/suites}  # absolute: some Python tests run in another folder
unpack "$bin"
results "${2:-suites}"
# SUITES (the binaries' names, in order; default GPU_SUITES, device_call.sh) runs others: a
# branch's new suites, or a call's share of them.
suites=${SUITES:-$GPU_SUITES}
OUT=$R HFA_BIN=$bin timeout "${SUITES_TIMEOUT:-380}" bash bench/device_run.sh \
  "tests:$(echo $suites)" 2>&1 | grep -v "^Running main" | tee "$R/tests.txt" | tail -40
pack
# PYTEST_TIMEOUT=0: the C++ suites alone (a call's first share).
[ "${PYTEST_TIMEOUT:-240}" = 0 ] && exit 0
OUT=$R HFA_BIN=$bin timeout "${PYTEST_TIMEOUT:-240}" bash bench/device_run.sh pytest
pack
