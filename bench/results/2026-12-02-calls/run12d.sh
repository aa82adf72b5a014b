#!/bin/bash
# Session 12, call 4: deeper K/V rings at hdim 64 (variants d64s3, d64s4: HFA_SM90_D64_STAGES=3,
# 4) against the committed kernels (new/, 9a93cd5, two stages): the short shapes by graph replay
# and the hdim 64 grid cells, hfa alone, alternated base s3 s4 twice.
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device
R=/tmp/r12d; mkdir -p $R
for f in $B/new/libhfa.so.0.1.0.xz $B/variants/*/*.xz; do xz -d -T8 -f $f & done; wait
ln -sf libhfa.so.0.1.0 $B/new/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/new/libhfa.so
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1
run() {  # lib bench tag args...
  local lib=$1 bench=$2 tag=$3; shift 3
  export HFA_LIBRARY=$B/$lib/libhfa.so
  timeout 60 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-70)"
}
for round in 1 2; do
  for lib in new variants/d64s3 variants/d64s4; do
    name=$(basename $lib)
    run $lib bench_fwd_shapes.py shapes-$name$round --impls hfa --timings graph
    run $lib bench_fwd.py grid-$name$round --hdims 64 --causal both --no-plot --impls hfa
  done
done
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md 2>/dev/null
tar -C /tmp -czf $OUT/r12d.tar.gz r12d
