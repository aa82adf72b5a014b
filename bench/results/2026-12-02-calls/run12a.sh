#!/bin/bash
# Session 12, call 1: O through shared memory and a TMA store (new/) against the committed
# kernels (base/): the forward's GPU tests and a memcheck on new/, then the short shapes (graph
# replay) and the grid's shorter cells alternated base new base new, and the FP8 grid at hdim 128.
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device
R=/tmp/r12a; mkdir -p $R
for f in $B/base/*.xz $B/new/*.xz; do xz -d -T8 -f $f & done; wait
chmod +x $B/new/test_* $B/new/hfa
for d in base new; do ln -sf libhfa.so.0.1.0 $B/$d/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/$d/libhfa.so; done
OUT=$R HFA_BIN=$B/new timeout 240 bash bench/device_run.sh \
  "tests:test_sm90_forward test_sm90_forward_features test_sm90_forward_fp8 test_sm90_partials test_sm90_sm_margin"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/new/test_sm90_forward \
  --gtest_filter='*d128_bf16_causal_b2_h4_kv1_q255_k1000:*d64_bf16_full_b2_h4_kv4_q1000_k255' 2>&1 | tail -4 > $R/memcheck.txt
echo "memcheck: $(tail -1 $R/memcheck.txt)"
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1
run() {  # lib bench tag args...
  local lib=$1 bench=$2 tag=$3; shift 3
  export HFA_LIBRARY=$B/$lib/libhfa.so
  timeout 100 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-70)"
}
for round in 1 2; do
  run base bench_fwd_shapes.py shapes-base$round --impls hfa cudnn --timings graph
  run new bench_fwd_shapes.py shapes-new$round --impls hfa cudnn --timings graph
done
SHORT="--hdims 64 128 256 --causal both --seqlens 512 1024 2048 4096 --no-plot"
run base bench_fwd.py grid-base $SHORT --impls hfa cudnn
run new bench_fwd.py grid-new $SHORT --impls hfa cudnn
run base bench_fwd.py grid-base2 $SHORT --impls hfa
run new bench_fwd.py grid-new2 $SHORT --impls hfa
FP8="--hdims 128 --causal both --seqlens 2048 8192 16384 --no-plot --impls hfa"
run base bench_fwd_fp8.py fp8-base $FP8
run new bench_fwd_fp8.py fp8-new $FP8
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md $R/*.log 2>/dev/null
tar -C /tmp -czf $OUT/r12a.tar.gz r12a
