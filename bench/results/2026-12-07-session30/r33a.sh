#!/bin/bash
# Session 30, call r33a (issue 32, decision 046): the backward's proxy fences. Builds here:
#   main   10a5466's library
#   fence  046 steps 1-2: the lagged step's dSᵀ fence left to the lagged dQ's; the shared step's
#          fence after dV's issue (library + test_sm90_backward)
#   fence2 fence + the lagged step's dQ tile handed to the writer after the next step's first
#          GEMM, step_done released before the dQ tile's stores (library + test_sm90_backward)
# 1. test_sm90_backward (8 shards), _workspace and _block_sparse (4) of fence and fence2 at once
# 2. bench_bwd ABBA hdim 64/128, 1k/4k/16k, both masks, FA3 beside, rounds
#    main fence fence2 fence2 fence main (accuracy in the first three)
# 3. ncu: FP8 forward hdim 128 2k causal, hfa (main) beside FA3 (issue 33)
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
unpack .device/main .device/fence .device/fence2
results r33a
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
# test_sm90_backward 8 shards a variant, then the workspace and block-sparse suites 4 each.
run_tests() {  # SHARDS BINARY...
  local shards=$1 v t shard
  shift
  for v in fence fence2; do
    for t in "$@"; do
      for shard in $(seq 0 $((shards - 1))); do
        GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard timeout 200 .device/$v/$t \
          --gtest_brief=1 > $R/tests-$v-$t.$shard.log 2>&1 &
      done
    done
  done
  wait
}
run_tests 8 test_sm90_backward
run_tests 4 test_sm90_backward_workspace test_sm90_backward_block_sparse
for v in fence fence2; do
  for t in test_sm90_backward test_sm90_backward_workspace test_sm90_backward_block_sparse; do
    echo "$v $t: $(grep -h "PASSED" $R/tests-$v-$t.*.log | awk '{s+=$4} END {print s+0}') passed," \
      "$(cat $R/tests-$v-$t.*.log | grep -c '^\[  FAILED  \] .*\.') failed"
    grep -h "FAILED\|Failure\|rror" $R/tests-$v-$t.*.log | head -6
  done
done | tee $R/tests.txt
pack
GRID="--impls hfa fa3 --modes bwd --hdims 64 128 --seqlens 1024 4096 16384 --causal both --no-plot"
export BENCH_TIMEOUT=100
b() { HFA_COMMIT=$2 bench_with $1 bench_bwd.py $1-$3 $GRID "${@:4}"; }
b main 10a5466 1; b fence fence 1; b fence2 fence2 1
pack
b fence2 fence2 2 --acc-max-seqlen 0; b fence fence 2 --acc-max-seqlen 0; b main 10a5466 2 --acc-max-seqlen 0
j() { ls "$R"/*-"$1".json | head -1; }
python3 bench/compare_runs.py --arms main="$(j main-1)","$(j main-2)" fence="$(j fence-1)","$(j fence-2)" \
  fence2="$(j fence2-1)","$(j fence2-2)" 2>&1 | tee "$R/ab.md" | tail -22
for f in "$R"/main-*.txt "$R"/fence*.txt; do echo "== $(basename "$f")"; grep -E '^hdim' "$f"; done > "$R/summary.txt"
pack
export PYTHONPATH=python:$HFA_FA3_DIR
for impl in hfa_fp8 fa3_fp8; do
  HFA_LIBRARY=$PWD/.device/main/libhfa.so timeout 60 ncu --profile-from-start off --set full \
    -o $R/ncu-$impl python3 bench/profile_fwd_shape.py $impl 8 2048 16 16 128 causal > $R/ncu-$impl.log 2>&1
  ncu --import $R/ncu-$impl.ncu-rep --page raw --csv | gzip > $R/$impl-raw.csv.gz
  ncu --import $R/ncu-$impl.ncu-rep --page source --csv --print-source sass | gzip > $R/$impl-sass.csv.gz
  rm -f $R/ncu-$impl.ncu-rep
done
python3 bench/ncu_pipes.py $R/hfa_fp8-raw.csv.gz $R/fa3_fp8-raw.csv.gz > $R/pipes.md 2>&1
pack
