#!/bin/bash
# Session 30, call r33b (issue 33): the FP8 forward converts P to e4m3 under the running P·V
# (cvt: into a second register array in each arm of the step's softmax, so that ptxas interleaves
# the conversion with the exponentials; copied into the P·V operand after the wait). Against
# main (10a5466's library; its forward kernels are HEAD's), FA3 beside.
# 1. test_sm90_forward_fp8 of cvt, 16 shards
# 2. bench_fwd_fp8 ABBA hdim 128/256, 2k/4k/16k, both masks, rounds main cvt cvt main
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
unpack .device/main .device/cvt
results r33b
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
for shard in $(seq 0 15); do
  GTEST_TOTAL_SHARDS=16 GTEST_SHARD_INDEX=$shard timeout 150 .device/cvt/test_sm90_forward_fp8 \
    --gtest_brief=1 > $R/tests-cvt.$shard.log 2>&1 &
done
wait
echo "cvt test_sm90_forward_fp8: $(grep -h "PASSED" $R/tests-cvt.*.log | awk '{s+=$4} END {print s+0}') passed," \
  "$(cat $R/tests-cvt.*.log | grep -c '^\[  FAILED  \] .*\.') failed" | tee $R/tests.txt
grep -h "FAILED\|Failure" $R/tests-cvt.*.log | head -6 | tee -a $R/tests.txt
pack
export BENCH_TIMEOUT=70
f() { HFA_COMMIT=$2 bench_with $1 bench_fwd_fp8.py fp8-$1-$3 --impls hfa fa3 --hdims 128 256 \
        --seqlens 2048 4096 16384 --causal both --no-plot; }
f main 10a5466 1; f cvt cvt 1; f cvt cvt 2; f main 10a5466 2
j() { ls "$R"/*-"$1".json | head -1; }
python3 bench/compare_runs.py --arms main="$(j fp8-main-1)","$(j fp8-main-2)" cvt="$(j fp8-cvt-1)","$(j fp8-cvt-2)" \
  2>&1 | tee "$R/ab.md" | tail -16
for x in "$R"/fp8-*.txt; do echo "== $(basename "$x")"; grep -E '^hdim' "$x"; done > "$R/summary.txt"
pack
