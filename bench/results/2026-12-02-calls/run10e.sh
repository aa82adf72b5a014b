#!/bin/bash
# Session 10, call 5: the FP8 tests on the final tree, whose peers (C++ and Python) now sum the
# rounded probabilities as the FP8 forward's P·1 does.
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device/final
R=/tmp/r10e; mkdir -p $R
for f in $B/*.xz; do xz -d -T8 -f $f & done; wait
chmod +x $B/test_*
ln -sf libhfa.so.0.1.0 $B/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/libhfa.so
OUT=$R HFA_BIN=$B timeout 150 bench/device_run.sh "tests:test_sm90_forward_fp8" 2>&1 | tee $R/tests-summary.txt
HFA_LIBRARY=$B/libhfa.so PYTHONPATH=python timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider \
  python/tests/test_torch_fp8.py > $R/pytest-fp8.txt 2>&1; echo "pytest rc=$?"; tail -3 $R/pytest-fp8.txt
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.log 2>/dev/null
