#!/bin/bash
# Session 32, call r34a (issues 32 and 33), prepared in session 31 (its machine never started).
# The tree carries bwd-stage-stats.patch and fp8-fadd-row-sums.patch (c0087f9) applied to main:
#   main  dcb218d's library
#   cand  decision 046's per-query statistics loaded before the GEMM waits (two column pairs,
#         kEarlyStatPairs) + the FP8 forward's row sums as FADDs (decision 047; the P·1 GEMM
#         of decision 016 deleted) + the FP8 tests' references summing unrounded P: library and
#         the GPU suites of the kernels that changed
# 1. round 1: bench_bwd (hdim 64/128, 4k/16k, both masks, FA3 beside, accuracy up to 4k) main
#    then cand, bench_fwd_fp8 (hdim 128/256, 2k/4k/16k, both masks, FA3 beside) main then cand
# 2. round 2 in the opposite order: fp8 cand, main; bwd cand, main
# 3. the backward's GPU suites of cand, then the FP8 forward's, C++ and Python
# (the rounds first: a call cut short by the session's device time still brings an A/B of each)
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/main .device/cand
results r34a
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
GRID="--impls hfa fa3 --modes bwd --hdims 64 128 --seqlens ${BWD_SEQLENS:-4096 16384} --causal both --no-plot"
b() { HFA_COMMIT=$2 BENCH_TIMEOUT=150 bench_with $1 bench_bwd.py bwd-$1-$3 $GRID "${@:4}"; }
f() { HFA_COMMIT=$2 BENCH_TIMEOUT=80 bench_with $1 bench_fwd_fp8.py fp8-$1-$3 --impls hfa fa3 \
        --hdims 128 256 --seqlens 2048 4096 16384 --causal both --no-plot; }
j() { ls "$R"/*-"$1".json | head -1; }
b main dcb218d 1 --acc-max-seqlen 4096; b cand cand 1 --acc-max-seqlen 4096
pack
f main dcb218d 1; f cand cand 1
pack
f cand cand 2; f main dcb218d 2
python3 bench/compare_runs.py --arms main="$(j fp8-main-1)","$(j fp8-main-2)" cand="$(j fp8-cand-1)","$(j fp8-cand-2)" \
  2>&1 | tee "$R/ab-fp8.md" | tail -16
pack
b cand cand 2 --acc-max-seqlen 0; b main dcb218d 2 --acc-max-seqlen 0
python3 bench/compare_runs.py --arms main="$(j bwd-main-1)","$(j bwd-main-2)" cand="$(j bwd-cand-1)","$(j bwd-cand-2)" \
  2>&1 | tee "$R/ab-bwd.md" | tail -24
for x in "$R"/bwd-*.txt "$R"/fp8-*.txt; do echo "== $(basename "$x")"; grep -E '^hdim' "$x"; done > "$R/summary.txt"
pack
SUITES="test_sm90_backward test_sm90_backward_workspace test_sm90_backward_block_sparse test_sm90_forward_fp8" \
  SUITES_TIMEOUT=${SUITES_TIMEOUT:-240} PYTEST_TIMEOUT=0 bash bench/device_suites.sh .device/cand r34a-suites
OUT=$R HFA_BIN=$PWD/.device/cand timeout 100 bash bench/device_run.sh pytest:python/tests/test_torch_fp8.py | tail -4
pack
