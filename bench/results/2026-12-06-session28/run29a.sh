#!/bin/bash
# r29a (issue 36): main's final tree of session 27 (c397a81's library: session 26's kernels + the
# MLA decode merged; .device/main27: libhfa + every GPU test binary, test_sm90_mla_decode among
# them): every GPU suite as one build, then (second call) the Python suite on the GPU, from a
# checkout of main.
#   .device/run29a.sh 1   the C++ suites (carry [".device/main27", ".device/run29a.sh"])
#   .device/run29a.sh 2   the Python suite
set -u
cd "$(dirname "$0")/.."
export HFA_COMMIT=c397a81
case "${1:-1}" in
  1) SUITES_TIMEOUT=560 PYTEST_TIMEOUT=0 bench/device_suites.sh .device/main27 r29a1 ;;
  2) SUITES="test_sm90_mla_decode" SUITES_TIMEOUT=90 PYTEST_TIMEOUT=420 \
     bench/device_suites.sh .device/main27 r29a2 ;;
esac
