#!/bin/bash
# Session 10, call 4: the committed tree's GPU tests and its grids beside cuDNN (FP8 forward,
# bf16 forward, backward), one run each.
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device/final
R=/tmp/r10d; mkdir -p $R
for f in $B/*.xz; do xz -d -T8 -f $f & done; wait
chmod +x $B/test_* $B/hfa 2>/dev/null
ln -sf libhfa.so.0.1.0 $B/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/libhfa.so
OUT=$R HFA_BIN=$B timeout 300 bench/device_run.sh "tests:test_sm90_ptx test_sm90_forward_fp8 test_sm90_forward test_sm90_forward_features test_sm90_backward test_sm90_partials test_sm90_sm_margin" 2>&1 | tee $R/tests-summary.txt
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1 HFA_LIBRARY=$B/libhfa.so
timeout 70 python3 bench/bench_fwd_fp8.py --out $R --tag e4m3 --hdims 128 256 --causal both --impls hfa hfa_bf16 cudnn > $R/fp8.txt 2>&1; echo "fp8 rc=$?"
timeout 80 python3 bench/bench_fwd.py --out $R --hdims 64 128 256 --causal both --impls hfa cudnn > $R/fwd.txt 2>&1; echo "fwd rc=$?"
timeout 100 python3 bench/bench_bwd.py --out $R --hdims 64 128 256 --causal both --modes bwd --impls hfa cudnn > $R/bwd.txt 2>&1; echo "bwd rc=$?"
grep -h "target" $R/fp8.txt $R/fwd.txt $R/bwd.txt | cut -c1-200
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md $R/*.log 2>/dev/null
