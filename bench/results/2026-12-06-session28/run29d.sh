#!/bin/bash
# r29d (issue 34 item 1): the plain decode's speed across the MLA merge, which changed the
# decode's shared parts (skeleton, work, epilogue, launch, params): main before it (.device/
# pre27: 6ebe2d2's library, session 26's kernels) against main after it (.device/main27),
# bench_decode as session 26's r25c ran it (batch 64, 32/8 heads, hdim 128, page 64, every
# cache format, no peer), rounds pre27, main27, main27, pre27 (~3 min).
#   carry [".device/pre27", ".device/main27", ".device/run29d.sh"]
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
unpack .device/pre27 .device/main27
results r29d
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee "$R/gpu.txt"
round() {  # round LIB COMMIT N
  HFA_COMMIT=$2 BENCH_TIMEOUT=120 bench_with "$1" bench_decode.py "$1-$3" --seqlens 1024 8192 32768 --peers
}
round pre27 6ebe2d2 1
round main27 c397a81 1
pack
round main27 c397a81 2
round pre27 6ebe2d2 2
pack
