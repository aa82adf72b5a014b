#!/bin/bash
# r29f (issue 33, forward vs FA3): branch issue33-fwd-lever's build (.device/fwd29: the step of
# decision 043, masked and unmasked step bodies apart, O's rescale between the step's issues, the
# P·V wait after the first row's exponentials, now only where TileConfig::kBranchFreeStep holds:
# the 16-bit kernels but the softcapped hdim 128 non-causal one; FP8 back to main's step, its SASS
# main's) against main's forward (.device/mla28, r28f's base), FA3 beside.
#   .device/run29f.sh 1   the forward GPU suites of fwd29 (~130 s)
#   .device/run29f.sh 2   ABBA bench_fwd (bf16 hdim 64/128/256, 2k/8k, both masks) and
#                         bench_fwd_fp8 (hdim 128/256, 2k/16k, both masks), rounds in the order
#                         mla28, fwd29, fwd29, mla28 (~150 s)
#   .device/run29f.sh all both (~300 s)
#   run (from a checkout of issue33-fwd-lever, or main: the bench scripts are the same):
#     carry [".device/mla28", ".device/fwd29", ".device/fa3", ".device/run29f.sh"]
#     command: .device/run29f.sh all
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
export HFA_COMMIT=fwd29
unpack .device/mla28 .device/fwd29
results r29f
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee "$R/gpu.txt"
mode=${1:-all}

if [ "$mode" = 1 ] || [ "$mode" = all ]; then
  # device_run.sh shards each binary over 8 processes (the float64 oracle runs on the host).
  OUT=$R HFA_BIN=$PWD/.device/fwd29 timeout 200 bash bench/device_run.sh \
    "tests:test_sm90_forward_fp8 test_sm90_forward_features test_sm90_forward" \
    2>&1 | grep -v "^Running main" | tee "$R/tests.txt" | tail -30
  pack
fi

if [ "$mode" = 2 ] || [ "$mode" = all ]; then
  export HFA_FA3_DIR=$PWD/.device/fa3 BENCH_TIMEOUT=90
  BF16="--impls hfa fa3 --hdims 64 128 256 --seqlens 2048 8192 --causal both --no-plot"
  FP8="--impls hfa fa3 --hdims 128 256 --seqlens 2048 16384 --causal both --no-plot"
  round() {  # round LIB N: one bf16 and one FP8 grid over LIB's library
    bench_with "$1" bench_fwd.py "$1-bf16-$2" $BF16 --tag "bf16-$1-$2"
    bench_with "$1" bench_fwd_fp8.py "$1-fp8-$2" $FP8 --tag "e4m3-$1-$2"
  }
  round mla28 1
  round fwd29 1
  pack
  round fwd29 2
  round mla28 2
  j() { ls "$R"/*"$1".json | head -1; }
  for dtype in bf16 e4m3; do
    echo "== $dtype"
    python3 bench/compare_runs.py \
      --arms mla28="$(j $dtype-mla28-1)","$(j $dtype-mla28-2)" \
             fwd29="$(j $dtype-fwd29-1)","$(j $dtype-fwd29-2)" 2>&1
  done | tee "$R/ab.md" | tail -50
  # hfa ÷ FA3 per cell and round, from the rounds' own lines.
  for f in "$R"/*-bf16-*.txt "$R"/*-fp8-*.txt; do echo "== $(basename "$f")"; grep -E '^hdim' "$f"; done \
    > "$R/summary.txt"
  pack
fi
