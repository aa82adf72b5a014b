#!/bin/bash
# Session 9, call 4: the torch suites that reach the backward, the integrations and the ring on
# the final library (198b0e7's section rule), native ops.
set -u
cd "$(dirname "$0")/.."
B=$PWD/.device
R=/tmp/r9d; mkdir -p $R
xz -d -T8 -f $B/libhfa.so.0.1.0.xz & xz -d -T8 -f $B/libhfa_torch.so.xz & wait
ln -sf libhfa.so.0.1.0 $B/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/libhfa.so
export HFA_LIBRARY=$B/libhfa.so PYTHONPATH=python HFA_TORCH_OPS=native
timeout 170 python3 -m pytest -q -n 8 -p no:cacheprovider python/tests/test_torch.py \
  python/tests/test_integrations.py python/tests/test_distributed.py > $R/pytest.txt 2>&1
echo "pytest rc=$?"; tail -3 $R/pytest.txt
sed -i -e "s#$PWD/#./#g" $R/*.txt
