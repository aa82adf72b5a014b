#!/bin/bash
# Session 9, call 1: the short-rows variant (64-row tiles at hdim 64 and 128) tested and timed
# against the shipped library; where issue 10's fwd+bwd cells lose time; a model's kernels.
set -u
cd "$(dirname "$0")/.."
B=$PWD/.device
R=/tmp/r9a; mkdir -p $R
for f in $B/*.xz $B/var/*.xz; do xz -d -T8 -f $f & done; wait
ln -sf libhfa.so.0.1.0 $B/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/libhfa.so
ln -sf libhfa.so.0.1.0 $B/var/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/var/libhfa.so
chmod +x $B/var/test_* $B/var/hfa 2>/dev/null
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1 HFA_TORCH_OPS=native
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv > $R/smi.txt
# 1. the variant's forward tests
( OUT=$R/vtests HFA_BIN=$B/var timeout 300 bench/device_run.sh "tests:test_sm90_forward test_sm90_forward_features" ) > $R/vtests.txt 2>&1
cat $R/vtests.txt | tail -8
# 2. the short shapes, shipped (A) and variant (B), A B A B; the second round on the shapes it changes
set -f  # the shape patterns below are fnmatch patterns, not globs
STD="HFA_LIBRARY=$B/libhfa.so"
VAR="HFA_LIBRARY=$B/var/libhfa.so HFA_TORCH_LIBRARY=$B/libhfa_torch.so"
SH="--timings graph"
CH="--shapes *-d128-causal *-d64-causal"
env $STD timeout 200 python3 bench/bench_fwd_shapes.py --out $R --tag A1 $SH > $R/shapes-A1.txt 2>&1; echo "A1 rc=$?"
env $VAR timeout 200 python3 bench/bench_fwd_shapes.py --out $R --tag B1 $SH > $R/shapes-B1.txt 2>&1; echo "B1 rc=$?"
env $STD timeout 150 python3 bench/bench_fwd_shapes.py --out $R --tag A2 $SH $CH > $R/shapes-A2.txt 2>&1; echo "A2 rc=$?"
env $VAR timeout 150 python3 bench/bench_fwd_shapes.py --out $R --tag B2 $SH $CH > $R/shapes-B2.txt 2>&1; echo "B2 rc=$?"
set +f
grep -h "^| b" $R/fwd-shapes*-A1.md $R/*-B1.md 2>/dev/null | cut -d'|' -f2,7,8,10 | head -40
# 3. issue 10: the fwd+bwd cells' kernels
export HFA_LIBRARY=$B/libhfa.so
for args in "hfa 1 16384 64" "hfa 1 16384 256" "cudnn 1 16384 64" "hfa 2 8192 64" "hfa 1 16384 128"; do
  set -- $args
  timeout 90 python3 bench/profile_fwdbwd.py $args --json $R/fwdbwd-$1-b$2-d$4.json >> $R/fwdbwd.txt 2>&1
done
grep -E "step|^ " $R/fwdbwd.txt | head -80
# 4. issue 11: the model's kernels, hfa vs SDPA
timeout 200 python3 bench/bench_model.py --out $R --reps 5 --profile > $R/model.txt 2>&1; echo "model rc=$?"
grep -E "bench:|profile|µs" $R/model.txt | head -80
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md $R/vtests/* 2>/dev/null
: # the caller tars /tmp/r9a
