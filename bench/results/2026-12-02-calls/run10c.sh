#!/bin/bash
# Session 10, call 3: the FP8 row sums on the tensor cores (variant library, rowsum/), against
# the uniform-descriptor library (uni/) and call 1's (old/), each with and without the rescale
# skip knob; the variant's FP8 tests; SASS of its hdim-128 FP8 kernel.
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device
R=/tmp/r10c; mkdir -p $R
for d in old uni rowsum; do xz -d -T8 -f $B/$d/libhfa.so.0.1.0.xz & done
[ -f $B/rowsum/test_sm90_forward_fp8.xz ] && xz -d -T8 -f $B/rowsum/test_sm90_forward_fp8.xz &
wait
for d in old uni rowsum; do ln -sf libhfa.so.0.1.0 $B/$d/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/$d/libhfa.so; done
cuobjdump -sass $B/rowsum/libhfa.so | awk '/Function :/ {keep = ($3 ~ /forward_kernel/ && $3 ~ /TileConfigILi128ELi128ELb0ELb0E13__nv_fp8_e4m313__nv_bfloat16/)} keep' | gzip > $R/rowsum-fp8-d128-sass.txt.gz
if [ -x $B/rowsum/test_sm90_forward_fp8 ]; then
  for shard in 0 1 2 3 4 5 6 7; do
    GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=$shard timeout 150 $B/rowsum/test_sm90_forward_fp8 --gtest_brief=1 > $R/rowsum-fp8-tests.$shard.txt 2>&1 &
  done
  wait
  cat $R/rowsum-fp8-tests.*.txt > $R/rowsum-fp8-tests.txt; rm $R/rowsum-fp8-tests.*.txt
  echo "fp8 tests: $(grep -h PASSED $R/rowsum-fp8-tests.txt | awk '{s+=$4} END {print s+0}') passed, $(grep -c '^\[  FAILED  \] .*\.' $R/rowsum-fp8-tests.txt) failed"
fi
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1
run() {  # lib skip bench tag args...
  local lib=$1 skip=$2 bench=$3 tag=$4; shift 4
  export HFA_LIBRARY=$B/$lib/libhfa.so
  if [ $skip = 1 ]; then export HFA_AB_SKIP_RESCALE=1; else unset HFA_AB_SKIP_RESCALE; fi
  timeout 90 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-60)"
}
F8="--hdims 128 256 --causal both --impls hfa --seqlens 1024 2048 4096 8192 16384 --no-plot"
BF="--hdims 64 128 256 --causal both --impls hfa --seqlens 512 1024 2048 4096 8192 16384 --no-plot"
for round in 1 2; do
  run old 0 bench_fwd_fp8.py fp8-old$round $F8
  run uni 0 bench_fwd_fp8.py fp8-uni$round $F8
  run uni 1 bench_fwd_fp8.py fp8-uniskip$round $F8
  run rowsum 0 bench_fwd_fp8.py fp8-rowsum$round $F8
  run rowsum 1 bench_fwd_fp8.py fp8-rowsumskip$round $F8
done
for round in 1 2; do
  run old 0 bench_fwd.py bf16-old$round $BF
  run uni 0 bench_fwd.py bf16-uni$round $BF
  run uni 1 bench_fwd.py bf16-uniskip$round $BF
done
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md 2>/dev/null
