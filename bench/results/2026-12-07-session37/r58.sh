#!/bin/bash
# Prepared in session 37 for the next device session's first call: every GPU suite and the
# Python suite on the GPU over HEAD's release build (.device/head: libhfa.so.0.1.0.xz and the
# test binaries as suites.tar.xz), the first since decision 051's tile order (2ad44c3), the dQ
# writer's read wait (decision 026) and the MLA schedule's whole-sequence share (decision 052).
# Carry .device/head (28 MB). Rebuild it if gone: `ninja -C build/release` (CCACHE_BASEDIR at the
# checkout's parent), `xz -T2 -6` the library, `tar -cf - --transform 's#.*/##' <the test_sm90_*
# and test_quant_gpu binaries> | xz -T2 --lzma2=preset=5,dict=192MiB > suites.tar.xz`.
set -u
cd "$(dirname "$0")/../../.."
SUITES_TIMEOUT=400 PYTEST_TIMEOUT=180 bash bench/device_suites.sh .device/head r58 | tail -30
