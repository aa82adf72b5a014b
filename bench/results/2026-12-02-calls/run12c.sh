#!/bin/bash
# Session 12, call 3: the committed kernels (9a93cd5, call 2's new/): the backward's and the
# primitives' GPU tests (the forward's passed in call 2 on this library), the forward grids
# beside cuDNN (bf16 sustained and cool, fp16 sustained), the FP8 grid, the short shapes (graph
# replay and do_bench), and ncu's full set on the shortest shape (64 × 128 tokens, d128, causal).
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device/new
R=/tmp/r12c; mkdir -p $R
for f in $B/*.xz; do xz -d -T8 -f $f & done; wait
chmod +x $B/test_* $B/hfa
ln -sf libhfa.so.0.1.0 $B/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/libhfa.so
OUT=$R HFA_BIN=$B timeout 200 bash bench/device_run.sh info "tests:test_sm90_backward test_sm90_ptx"
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1 HFA_LIBRARY=$B/libhfa.so
run() {  # bench tag args...
  local bench=$1 tag=$2; shift 2
  timeout 150 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-70)"
}
C=${HFA_COMMIT}
run bench_fwd.py bf16-$C --impls hfa cudnn
run bench_fwd.py bf16-cool-$C --impls hfa cudnn --cool 1 --rep 50 --no-plot
run bench_fwd.py fp16-$C --impls hfa cudnn --dtype fp16 --no-plot
run bench_fwd_fp8.py e4m3-$C
run bench_fwd_shapes.py bf16-$C --impls hfa cudnn
run bench_fwd_shapes.py fp16-$C --impls hfa cudnn --dtype fp16 --timings graph
tag=hfa-b64-s128
timeout 120 ncu --clock-control none --profile-from-start off --set full --import-source no \
  -f --export $R/$tag python3 bench/profile_fwd_shape.py hfa 64 128 16 4 128 causal > $R/$tag.log 2>&1
echo "ncu rc=$?"
ncu --import $R/$tag.ncu-rep --page details > $R/$tag-details.txt 2>&1
ncu --import $R/$tag.ncu-rep --page source --csv --print-source sass > $R/$tag-sass.csv 2>&1
grep -E "Duration|Warp Cycles Per Issued|Eligible Warps|Issued Warp" $R/$tag-details.txt | head -8
rm -f $R/*.ncu-rep; gzip $R/*-sass.csv
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md $R/*.log 2>/dev/null
tar -C /tmp -czf $OUT/r12c.tar.gz r12c
