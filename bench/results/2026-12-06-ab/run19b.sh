#!/bin/bash
# Session 19, call 2 (issue 36): the Python suite on the GPU over main's library, ctypes ops (as
# in r18b, where one test failed unnamed), -v so that its failures are named.
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
unpack .device/base
results r19b
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv | tee "$R/gpu.txt"
OUT=$R HFA_BIN=$PWD/.device/base HFA_TORCH_OPS=ctypes timeout 280 bash bench/device_run.sh pytest
grep -E " (FAILED|ERROR) |passed|failed" "$R/pytest.txt" | tail -12
pack
