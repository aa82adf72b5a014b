#!/bin/bash
# r28 (session 27's last call), stages in the order given:
#   mla_tests  issue 34: branch issue34-mla-speed's MLA GPU tests (.device/mla28), racecheck and
#           synccheck on the split cases
#   mla_bench  bench_mla against the landed kernel (.device/mla27), FlashMLA beside, rounds
#           mla27, mla28, mla28, mla27 (helper-36's run28m.sh, inlined)
#   sparse  issue 35: bench_sparse causal beside causal_all_partial (what a partial block costs
#           over a full one on the same tiles), hfa alone, mla28's library
#   pytest  issue 36: the Python suite on the GPU over mla28's library (main + the MLA lever)
# Run from main's checkout (the libraries are carried).
#   carry [".device/mla27", ".device/mla28", ".device/flashmla", ".device/run28.sh"]
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
export HFA_COMMIT=${HFA_COMMIT:-7e7afda}
unpack .device/mla27 .device/mla28
results r28
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee "$R/gpu.txt"
t() {  # t NAME BINARY [ARGS]: a test binary, its summary and failures
  local name=$1; shift
  timeout "${TEST_TIMEOUT:-200}" "$@" > "$R/tests-$name.txt" 2>&1
  echo "tests $name rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$R/tests-$name.txt" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]|Failure|out\(|lse\(' "$R/tests-$name.txt" | head -30
}
stage_mla_tests() {
  # device_run.sh shards the binary over 8 processes (the float64 oracle runs on the host).
  OUT=$R HFA_BIN=$PWD/.device/mla28 timeout 120 bash bench/device_run.sh "tests:test_sm90_mla_decode" \
    2>&1 | grep -v "^Running main" | tee "$R/tests-mla.txt" | tail -12
  TEST_TIMEOUT=100 t mla-race compute-sanitizer --tool racecheck .device/mla28/test_sm90_mla_decode --gtest_filter='*Splits*'
  TEST_TIMEOUT=100 t mla-sync compute-sanitizer --tool synccheck .device/mla28/test_sm90_mla_decode --gtest_filter='*Splits*'
  pack
}
stage_mla_bench() {
  export HFA_FLASHMLA_DIR=$PWD/.device/flashmla
  local cells=(--batches 64 --seqlens 1024 4096 16384 --kinds fixed ragged --heads 16 64 128 --seqlens-q 1 2)
  BENCH_TIMEOUT=60 bench_with mla27 bench_mla.py mla27-a "${cells[@]}"
  BENCH_TIMEOUT=60 bench_with mla28 bench_mla.py mla28-a "${cells[@]}"
  pack
  BENCH_TIMEOUT=60 bench_with mla28 bench_mla.py mla28-b "${cells[@]}"
  BENCH_TIMEOUT=60 bench_with mla27 bench_mla.py mla27-b "${cells[@]}"
  for f in "$R"/mla2*.txt; do echo "== $(basename "$f")"; grep -E '^b ' "$f"; done > "$R/summary.txt"
  pack
}
stage_mla_one() {  # one round of mla28 beside FlashMLA (no baseline library carried)
  export HFA_FLASHMLA_DIR=$PWD/.device/flashmla
  BENCH_TIMEOUT=60 bench_with mla28 bench_mla.py mla28-one --batches 64 --seqlens 1024 4096 16384 \
    --kinds fixed ragged --heads 16 64 128 --seqlens-q 1 2
  grep -E "^b " "$R/mla28-one.txt" | tail -40
  pack
}
stage_sparse() {
  BENCH_TIMEOUT=150 bench_with mla28 bench_sparse.py partial --patterns causal causal_all_partial \
    --impls hfa hfa_dense --seqlens 8192 16384 --hdims 64 128 --acc-heads 1 --acc-max-seqlen 8192
  grep -E "^target: a partial" "$R/partial.txt"
  pack
}
stage_pytest() {
  OUT=$R HFA_BIN=$PWD/.device/mla28 timeout "${PYTEST_TIMEOUT:-300}" bash bench/device_run.sh pytest
  pack
}
for stage in "$@"; do "stage_$stage"; done
