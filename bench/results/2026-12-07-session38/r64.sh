#!/bin/bash
# Prepared in session 38 (issue 32; its device time went to refused starts): a next session's
# first call (r62.sh after it where a candidate wins). The backward's consumers as one copy of
# code for both warpgroups (branch issue32-shared-consumer-code, 41f31ff), and on top of it
# every 4th exponential of P on the FMA pipes in hdim 128's turns kernels (decision 042's
# reopening: the turns are its ping-pong; ncu
# r56 had the turns kernel's consumers stalled `wait` on MUFU 5 372 samples against FA3's 457).
#   headlib (.device/headlib) ffd4499's library (HEAD's kernels)
#   rtwg    (.device/rtwg)    41f31ff's library and its three backward suites
#   fma4    (.device/fma4)    rtwg's library and test_sm90_backward with hdim 128 bf16's turns
#           kernels taking every 4th exponential on the FMA pipes (branch issue32-turns-fma, 7fb5844)
# 1. gate: fma4's test_sm90_backward, rtwg's workspace and block-sparse suites (rtwg's
#    test_sm90_backward too where fma4's fails); 2. bench_bwd hdim 128/256 (hdim 64's dense
#    kernels are HEAD's), 4k/16k, both masks, rounds headlib rtwg fma4 fma4 rtwg headlib, FA3
#    beside. Carry .device/headlib .device/rtwg .device/fma4 .device/fa3 (44 MB).
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/headlib .device/rtwg .device/fma4
results r64
export HFA_FA3_DIR=$PWD/.device/fa3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
suite() {  # suite BIN_DIR TAG SUITES
  OUT=$R HFA_BIN=$PWD/.device/$1 timeout 150 bash bench/device_run.sh "tests:$3" 2>&1 |
    grep -v "^Running main" > $R/tests-$2.txt; tail -4 $R/tests-$2.txt
}
suite fma4 fma4 test_sm90_backward
arms="headlib rtwg fma4"
if ! grep -q "test_sm90_backward: [0-9]* passed, 0 skipped, 0 failed" $R/tests-fma4.txt; then
  echo "fma4: test_sm90_backward failed, no timing of it"; arms="headlib rtwg"
  suite rtwg rtwg-main test_sm90_backward
fi
suite rtwg rtwg "test_sm90_backward_workspace test_sm90_backward_block_sparse"
pack
j() { ls "$R"/*-"$1".json | head -1; }
b() { HFA_COMMIT=$1 BENCH_TIMEOUT=60 bench_with $1 bench_bwd.py bwd-$1-$2 --impls hfa fa3 --modes bwd \
        --hdims 128 256 --seqlens 4096 16384 --causal both --no-plot --acc-max-seqlen 0; }
for a in $arms; do b $a 1; done; pack
for a in $(echo $arms | tr ' ' '\n' | tac); do b $a 2; done
python3 bench/compare_runs.py --arms $(for a in $arms; do echo "$a=$(j bwd-$a-1),$(j bwd-$a-2)"; done) 2>&1 | tee "$R/ab-bwd.md" | tail -30
pack
