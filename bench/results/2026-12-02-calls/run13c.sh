#!/bin/bash
# Session 13, call 3: the kernels to commit (new/, as in call 2): the forward grids bf16 and fp16
# and the short shapes beside cuDNN, then ncu (speed of light, compute pipes, warp states) of hfa
# and cuDNN on the two problems that stand for the remaining misses: 32 × 512 tokens hdim 64
# causal (the weakest short shape) and 16k tokens hdim 128 non-causal (a long cell short of 1.15).
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device/new
R=/tmp/r13c; mkdir -p $R
for f in $B/*.xz; do xz -d -T8 -f $f & done; wait
ln -sf libhfa.so.0.1.0 $B/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/libhfa.so
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1 HFA_LIBRARY=$B/libhfa.so
run() {  # bench tag args...
  local bench=$1 tag=$2; shift 2
  timeout 150 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-70)"
}
C=${HFA_COMMIT}
run bench_fwd.py bf16-$C --impls hfa cudnn
run bench_fwd.py fp16-$C --impls hfa cudnn --dtype fp16 --no-plot
run bench_fwd_shapes.py bf16-$C --impls hfa cudnn
run bench_fwd_shapes.py fp16-$C --impls hfa cudnn --dtype fp16 --timings graph
for impl in hfa cudnn; do
  for shape in "32 512 32 32 64 causal" "1 16384 16 16 128"; do
    tag=ncu-$impl-$(echo $shape | tr ' ' '-')
    timeout 100 ncu --clock-control none --profile-from-start off --section SpeedOfLight \
      --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats \
      --section SchedulerStats -f --export $R/$tag python3 bench/profile_fwd_shape.py $impl $shape > $R/$tag.log 2>&1
    echo "$tag rc=$?"
    ncu --import $R/$tag.ncu-rep --page details > $R/$tag-details.txt 2>&1
    ncu --import $R/$tag.ncu-rep --page raw --csv > $R/$tag-raw.csv 2>&1
    grep -E "Duration|Issued Warp|Highest-utilized|highest-utilized" $R/$tag-details.txt | head -4
  done
done
rm -f $R/*.ncu-rep; gzip $R/*-raw.csv
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md $R/*.log 2>/dev/null
tar -C /tmp -czf $OUT/r13c.tar.gz r13c
