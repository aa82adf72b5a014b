#!/bin/bash
# Session 11, call 3: the final library (final/: double-buffered Q, no experiment knob).
#   1. the forward's GPU tests again (its kernels are call 1's; the host dispatch is the
#      session start's again);
#   2. the bf16 forward grid and the FP8 grid beside cuDNN with the GPU's clock and power
#      recorded for every timing, twice: as the cells come (sustained: at long sequences the
#      700 W limit sets the clock) and after 1 s of idle before each timing (--cool 1, a 50 ms
#      timing: the full clock);
#   3. the short shapes (CUDA-graph replay);
#   4. the Llama model at 8k, hfa and SDPA alternated over 8 rounds (native torch ops).
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device/final
R=/tmp/r11c; mkdir -p $R
for f in $B/*.xz; do xz -d -T8 -f $f & done; wait
chmod +x $B/test_*
ln -sf libhfa.so.0.1.0 $B/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/libhfa.so
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv > $R/info.txt
cat $R/info.txt
{ cmake -S src/torch -B /tmp/hfa-torch -DHFA_LIBRARY=$B/libhfa.so -DCMAKE_BUILD_TYPE=Release \
    && cmake --build /tmp/hfa-torch -j8 && cp /tmp/hfa-torch/libhfa_torch.so $B/; } > $R/torch-ops-build.log 2>&1 &
ops=$!
# 1. tests
for test in test_sm90_forward test_sm90_forward_features test_sm90_forward_fp8 test_sm90_sm_margin; do
  shards=()
  for shard in 0 1 2 3 4 5 6 7; do
    GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=$shard timeout 150 $B/$test --gtest_brief=1 > $R/$test.$shard.txt 2>&1 &
    shards+=($!)
  done
  wait "${shards[@]}"
  cat $R/$test.*.txt > $R/$test.txt; rm $R/$test.*.txt
  echo "$test: $(grep -h PASSED $R/$test.txt | awk '{s+=$4} END {print s+0}') passed, $(grep -c '^\[  FAILED  \] .*\.' $R/$test.txt) failed"
  grep -h "^\[  FAILED  \] .*\." $R/$test.txt | head -5
done
wait $ops; echo "torch ops rc=$?"
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1 HFA_LIBRARY=$B/libhfa.so
run() {  # bench tag args...
  local bench=$1 tag=$2; shift 2
  timeout 200 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-70)"
}
# 2. grids, sustained then cool
run bench_fwd.py bf16 --impls hfa cudnn
run bench_fwd.py bf16-cool --impls hfa cudnn --cool 1 --rep 50 --no-plot
run bench_fwd_fp8.py e4m3 --impls hfa hfa_bf16 cudnn --seqlens 1024 2048 4096 8192 16384
run bench_fwd_fp8.py e4m3-cool --impls hfa hfa_bf16 cudnn --seqlens 2048 4096 8192 16384 --cool 1 --rep 50 --no-plot
# 3. short shapes
run bench_fwd_shapes.py bf16 --impls hfa cudnn
# 4. the model
HFA_TORCH_LIBRARY=$B/libhfa_torch.so HFA_TORCH_OPS=native timeout 200 python3 bench/bench_model.py \
  --out $R --rounds 8 --impls hfa sdpa > $R/model.txt 2>&1; echo "model rc=$?"
grep "bench:" $R/model.txt | tail -3
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md 2>/dev/null
tar -C /tmp -czf $OUT/r11c.tar.gz r11c
