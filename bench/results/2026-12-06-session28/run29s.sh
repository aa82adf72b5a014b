#!/bin/bash
# r29s (issue 35): branch issue35-fwd-partial-mask (.device/fpart29, 54ec855: in the forward a
# partial block inside the window and the sequence takes its bits alone, without the positional
# mask) against main (.device/main27): its forward feature suite (the block-sparse forward tests
# among them), then bench_sparse's causal beside causal_all_partial, hfa and its dense kernel,
# rounds main27, fpart29, fpart29, main27 (~3 min).
#   carry [".device/main27", ".device/fpart29", ".device/run29s.sh"]
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
unpack .device/main27 .device/fpart29
results r29s
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee "$R/gpu.txt"
OUT=$R HFA_BIN=$PWD/.device/fpart29 timeout 150 bash bench/device_run.sh "tests:test_sm90_forward_features" \
  2>&1 | grep -v "^Running main" | tee "$R/tests.txt" | tail -12
pack
cells=(--patterns causal causal_all_partial --impls hfa hfa_dense --seqlens 8192 16384 --hdims 64 128
       --acc-heads 1 --acc-max-seqlen 1 --acc-rows 256)
round() {  # round LIB COMMIT N
  HFA_COMMIT=$2 BENCH_TIMEOUT=90 bench_with "$1" bench_sparse.py "$1-$3" "${cells[@]}"
  grep -E "^target: a partial" "$R/$1-$3.txt"
}
round main27 c397a81 1
round fpart29 54ec855 1
pack
round fpart29 54ec855 2
round main27 c397a81 2
pack
