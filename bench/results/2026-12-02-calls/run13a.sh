#!/bin/bash
# Session 13, call 1: the forward's GPU tests on new/ (the committed tree with three K/V stages at
# hdim 64, HFA_SM90_D64_STAGES=3), then two key-block variants of it (.device/variants):
# d256n64 (64 keys a block at hdim 256, which frees room for one slab of O) and d128n128 (128 keys
# at hdim 128 non-causal, which frees room for the whole of O), hfa alone, alternated
# new d256n64 d128n128 twice: the short shapes by graph replay and the affected grid cells.
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device
R=/tmp/r13a; mkdir -p $R
for f in $B/new/*.xz $B/variants/*/*.xz; do xz -d -T8 -f $f & done; wait
chmod +x $B/new/test_* $B/new/hfa
ln -sf libhfa.so.0.1.0 $B/new/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/new/libhfa.so
OUT=$R HFA_BIN=$B/new timeout 240 bash bench/device_run.sh info \
  "tests:test_sm90_forward test_sm90_forward_features test_sm90_partials test_sm90_sm_margin"
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1
run() {  # lib bench tag args...
  local lib=$1 bench=$2 tag=$3; shift 3
  export HFA_LIBRARY=$B/$lib/libhfa.so
  timeout 90 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-70)"
}
run new bench_fwd_shapes.py shapes-cudnn --impls hfa cudnn --timings graph
for round in 1 2; do
  for lib in new variants/d256n64 variants/d128n128; do
    name=$(basename $lib)
    run $lib bench_fwd_shapes.py shapes-$name$round --impls hfa --timings graph
    [ $name = d128n128 ] || run $lib bench_fwd.py grid256-$name$round --hdims 256 --causal both --seqlens 1024 4096 16384 --no-plot --impls hfa
    [ $name = d256n64 ] || run $lib bench_fwd.py grid128-$name$round --hdims 128 --causal false --seqlens 1024 4096 16384 --no-plot --impls hfa
  done
done
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md 2>/dev/null
tar -C /tmp -czf $OUT/r13a.tar.gz r13a
