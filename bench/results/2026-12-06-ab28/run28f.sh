#!/bin/bash
# r28f (issue 33, forward vs FA3): branch issue33-fwd-lever's build (.device/fwd28: each step's
# softmax without a branch, masked and unmasked step bodies apart; O's rescale moved between the
# step's Q·Kᵀ and P·V issues; the wait for the running P·V ordered after the first row's
# exponentials; docs/decisions/043) against main's (.device/mla28), FA3 beside.
#   .device/run28f.sh 1   the forward GPU suites of fwd28 (~150 s)
#   .device/run28f.sh 2   ABBA bench_fwd (bf16 hdim 64/128/256, 2k/8k, both masks) and
#                         bench_fwd_fp8 (hdim 128/256, 2k/4k/16k, both masks), rounds in the order
#                         mla28, fwd28, fwd28, mla28 (~220 s)
#   .device/run28f.sh all both (~370 s)
#   run (from a checkout of issue33-fwd-lever, or main: the bench scripts are the same):
#     carry [".device/mla28", ".device/fwd28", ".device/fa3", ".device/run28f.sh"]
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
export HFA_COMMIT=fwd28
unpack .device/mla28 .device/fwd28
results r28f
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee "$R/gpu.txt"
mode=${1:-all}

if [ "$mode" = 1 ] || [ "$mode" = all ]; then
  # device_run.sh shards each binary over 8 processes (the float64 oracle runs on the host).
  OUT=$R HFA_BIN=$PWD/.device/fwd28 timeout 240 bash bench/device_run.sh \
    "tests:test_sm90_sm_margin test_sm90_partials test_sm90_forward_fp8 test_sm90_forward_features test_sm90_forward" \
    2>&1 | grep -v "^Running main" | tee "$R/tests.txt" | tail -30
  pack
fi

if [ "$mode" = 2 ] || [ "$mode" = all ]; then
  export HFA_FA3_DIR=$PWD/.device/fa3 BENCH_TIMEOUT=90
  BF16="--impls hfa fa3 --hdims 128 256 --seqlens 2048 8192 --causal both --no-plot"
  FP8="--impls hfa fa3 --hdims 128 --seqlens 2048 16384 --causal both --no-plot"
  round() {  # round LIB N: one bf16 and one FP8 grid over LIB's library
    bench_with "$1" bench_fwd.py "$1-bf16-$2" $BF16 --tag "bf16-$1-$2"
    bench_with "$1" bench_fwd_fp8.py "$1-fp8-$2" $FP8 --tag "e4m3-$1-$2"
  }
  round mla28 1
  round fwd28 1
  pack
  round fwd28 2
  round mla28 2
  j() { ls "$R"/*"$1".json | head -1; }
  for dtype in bf16 e4m3; do
    echo "== $dtype"
    python3 bench/compare_runs.py \
      --arms mla28="$(j $dtype-mla28-1)","$(j $dtype-mla28-2)" \
             fwd28="$(j $dtype-fwd28-1)","$(j $dtype-fwd28-2)" 2>&1
  done | tee "$R/ab.md" | tail -40
  # hfa ÷ FA3 per cell and round, from the rounds' own lines.
  for f in "$R"/*-bf16-*.txt "$R"/*-fp8-*.txt; do echo "== $(basename "$f")"; grep -E '^hdim' "$f"; done \
    > "$R/summary.txt"
  pack
fi
