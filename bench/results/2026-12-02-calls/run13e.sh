#!/bin/bash
# Session 13, call 5: the softmax's row maxima and sums in four independent chains (new/) against
# one chain (base/, 68ffbb5), hfa alone: the short shapes by graph replay twice, alternated, and
# the 16k-token hdim 64 / 128 cells once; then new/'s forward GPU tests. Results go straight to
# $OUT (a cut-short call still brings back what it wrote; little device time was left).
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device
R=$OUT/r13e; mkdir -p $R
for f in $B/new/*.xz $B/base/*.xz; do xz -d -T8 -f $f & done; wait
chmod +x $B/new/test_*
for d in base new; do ln -sf libhfa.so.0.1.0 $B/$d/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/$d/libhfa.so; done
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1
run() {  # lib bench tag args...
  local lib=$1 bench=$2 tag=$3; shift 3
  export HFA_LIBRARY=$B/$lib/libhfa.so
  timeout 60 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-50)"
}
for lib in base new; do run $lib bench_fwd_shapes.py shapes-${lib}1 --impls hfa --timings graph; done
for lib in base new; do
  run $lib bench_fwd.py grid-$lib --hdims 64 128 --causal both --seqlens 16384 --no-plot --impls hfa
done
for lib in base new; do run $lib bench_fwd_shapes.py shapes-${lib}2 --impls hfa --timings graph; done
OUT=$R HFA_BIN=$B/new timeout 150 bash bench/device_run.sh "tests:test_sm90_forward test_sm90_forward_features"
sed -i -e "s#$PWD/#./#g" -e "s#$R/#./#g" $R/*.txt $R/*.json $R/*.md 2>/dev/null
# What came back: the device returns at most 8 files from $OUT, so new/'s two shapes rounds,
# the logs and gpu-tests.log were left out (the tests' summary lines are in the call's output:
# forward 139 and features 13 passed). new/'s shapes were measured once more on the still-warm
# machine, hfa alone, as shapes-new3 (bench_fwd_shapes.py --tag shapes-new3 --impls hfa
# --timings graph over new/'s library).
