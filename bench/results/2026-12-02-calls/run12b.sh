#!/bin/bash
# Session 12, call 2: O staged one slab at a time where the whole of it does not fit (new/:
# hdim 128 non-causal, 192/128, FP8 hdim 256) against call 1's kernels (s1/, O staged whole or
# not at all): the forward's GPU tests and a memcheck on new/, then the short shapes (graph
# replay) alternated s1 new s1 new, the affected grid cells, and two tile variants of new/
# (.device/variants: 64-row tiles at hdim 128 and at hdim 64 for short causal problems) on the
# shapes.
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device
R=/tmp/r12b; mkdir -p $R
for f in $B/s1/*.xz $B/new/*.xz $B/variants/*/*.xz; do xz -d -T8 -f $f & done; wait
chmod +x $B/new/test_*
for d in s1 new; do ln -sf libhfa.so.0.1.0 $B/$d/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/$d/libhfa.so; done
OUT=$R HFA_BIN=$B/new timeout 240 bash bench/device_run.sh \
  "tests:test_sm90_forward test_sm90_forward_features test_sm90_forward_fp8 test_sm90_partials"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/new/test_sm90_forward \
  --gtest_filter='*d128_bf16_full_b2_h4_kv1_q255_k1000:*d128_bf16_full_b2_h4_kv2_q300_k300_outpad4' 2>&1 | tail -4 > $R/memcheck.txt
echo "memcheck: $(tail -1 $R/memcheck.txt)"
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1
run() {  # lib bench tag args...
  local lib=$1 bench=$2 tag=$3; shift 3
  export HFA_LIBRARY=$B/$lib/libhfa.so
  timeout 100 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-70)"
}
for round in 1 2; do
  run s1 bench_fwd_shapes.py shapes-s1-$round --impls hfa cudnn --timings graph
  run new bench_fwd_shapes.py shapes-new$round --impls hfa --timings graph
  for v in $B/variants/*/; do
    run variants/$(basename $v) bench_fwd_shapes.py shapes-$(basename $v)$round --impls hfa --timings graph
  done
done
CELLS="--hdims 128 --causal false --seqlens 2048 4096 8192 16384 --no-plot --impls hfa"
for round in 1 2; do
  run s1 bench_fwd.py grid-s1-$round $CELLS
  run new bench_fwd.py grid-new$round $CELLS
done
FP8="--hdims 256 --causal both --seqlens 2048 8192 16384 --no-plot --impls hfa"
run s1 bench_fwd_fp8.py fp8-s1 $FP8
run new bench_fwd_fp8.py fp8-new $FP8
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md $R/*.log 2>/dev/null
tar -C /tmp -czf $OUT/r12b.tar.gz r12b
