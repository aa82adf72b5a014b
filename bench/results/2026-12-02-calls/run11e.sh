#!/bin/bash
# Session 11, call 5: the forward's epilogue with every output pair in a register of its own
# before the first store (epi/) against call 3's library (final/): the forward's GPU tests on
# epi/ (the partial f32 out included), the SASS of its stores, the short shapes and the short
# grid cells (512 and 1k) alternated final epi final epi.
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device
R=/tmp/r11e; mkdir -p $R
for f in $B/final/*.xz $B/epi/*.xz; do xz -d -T8 -f $f & done; wait
chmod +x $B/epi/test_*
for d in final epi; do ln -sf libhfa.so.0.1.0 $B/$d/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/$d/libhfa.so; done
for test in test_sm90_forward test_sm90_forward_features test_sm90_forward_fp8 test_sm90_partials; do
  shards=()
  for shard in 0 1 2 3 4 5 6 7; do
    GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=$shard timeout 150 $B/epi/$test --gtest_brief=1 > $R/$test.$shard.txt 2>&1 &
    shards+=($!)
  done
  wait "${shards[@]}"
  cat $R/$test.*.txt > $R/$test.txt; rm $R/$test.*.txt
  echo "$test: $(grep -h PASSED $R/$test.txt | awk '{s+=$4} END {print s+0}') passed, $(grep -c '^\[  FAILED  \] .*\.' $R/$test.txt) failed"
  grep -h "^\[  FAILED  \] .*\." $R/$test.txt | head -5
done
cuobjdump -sass $B/epi/libhfa.so | awk '/Function :/ {keep = ($3 ~ /forward_kernel/ && $3 ~ /TileConfigILi128ELi128ELb1ELb0E13__nv_bfloat16S4_Lb0E/)} keep' > $R/epi-d128-causal.sass
grep -n "STG\|F2FP" $R/epi-d128-causal.sass | tail -70 > $R/epi-stores.txt; gzip $R/epi-d128-causal.sass
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1
run() {  # lib bench tag args...
  local lib=$1 bench=$2 tag=$3; shift 3
  export HFA_LIBRARY=$B/$lib/libhfa.so
  timeout 100 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-70)"
}
for round in 1 2; do
  run final bench_fwd_shapes.py shapes-final$round --impls hfa cudnn --timings graph
  run epi bench_fwd_shapes.py shapes-epi$round --impls hfa cudnn --timings graph
done
SHORT="--hdims 64 128 256 --causal both --seqlens 512 1024 --no-plot"
run final bench_fwd.py grid-final $SHORT --impls hfa cudnn
run epi bench_fwd.py grid-epi $SHORT --impls hfa cudnn
run final bench_fwd.py grid-final2 $SHORT --impls hfa
run epi bench_fwd.py grid-epi2 $SHORT --impls hfa
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md 2>/dev/null
tar -C /tmp -czf $OUT/r11e.tar.gz r11e
