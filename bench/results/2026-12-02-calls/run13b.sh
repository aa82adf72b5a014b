#!/bin/bash
# Session 13, call 2: the forward's GPU tests on new/ (three K/V stages at hdim 64, 64-key blocks
# at hdim 256), then three tile variants of it (.device/variants), hfa alone, alternated with
# new/ twice: c64s4 (hdim 128 causal: 64-key blocks, four K/V stages), d64sn64 (hdim 64's
# short-rows tile: 64-key blocks) on the short shapes by graph replay, c64s4 also on the long
# causal hdim 128 cells, d192n64 (hdim 192: 64-key blocks, room for all of O) on the hdim 192 grid.
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device
R=/tmp/r13b; mkdir -p $R
for f in $B/new/*.xz $B/variants/*/*.xz; do xz -d -T8 -f $f & done; wait
chmod +x $B/new/test_* $B/new/hfa
ln -sf libhfa.so.0.1.0 $B/new/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/new/libhfa.so
OUT=$R HFA_BIN=$B/new timeout 240 bash bench/device_run.sh info \
  "tests:test_sm90_forward test_sm90_forward_features test_sm90_partials test_sm90_sm_margin"
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1
run() {  # lib bench tag args...
  local lib=$1 bench=$2 tag=$3; shift 3
  export HFA_LIBRARY=$B/$lib/libhfa.so
  timeout 60 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-70)"
}
for round in 1 2; do
  for lib in new variants/c64s4 variants/d64sn64; do
    run $lib bench_fwd_shapes.py shapes-$(basename $lib)$round --impls hfa --timings graph
  done
  for lib in new variants/c64s4; do
    run $lib bench_fwd.py c128-$(basename $lib)$round --hdims 128 --causal true --seqlens 1024 4096 16384 --no-plot --impls hfa
  done
  for lib in new variants/d192n64; do
    run $lib bench_fwd.py d192-$(basename $lib)$round --hdims 192 --head-budget 1920 --seqlens 512 1024 4096 16384 --no-plot --impls hfa
  done
done
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md 2>/dev/null
tar -C /tmp -czf $OUT/r13b.tar.gz r13b
