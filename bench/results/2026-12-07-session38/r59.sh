#!/bin/bash
# Prepared in session 37 for the next device session, after r58's suites pass: the committed
# grids of HEAD beside the peers, replacing the stale ones (the backward's of dcb218d, the
# MLA grid of aecb8fc): the GQA table and the backward grid beside FA3 and cuDNN (as session
# 34's r46), then bench_mla's grid beside FlashMLA (as r45). Carry .device/head .device/fa3
# .device/flashmlax (46 MB). Commit the JSON/MD under bench/results/ with the commit's hash in
# their names (bench/README.md), regenerate RESULTS.md.
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/head
results r59
export HFA_FA3_DIR=$PWD/.device/fa3 HFA_FLASHMLA_DIR=$PWD/.device/flashmlax
C=ffd4499  # the commit .device/head was built from
HFA_COMMIT=$C BENCH_TIMEOUT=200 bench_with head bench_bwd.py gqa --gqa --impls hfa fa3 cudnn --modes bwd; pack
HFA_COMMIT=$C BENCH_TIMEOUT=300 bench_with head bench_bwd.py bwd-bf16-fa3 --impls hfa fa3 hfa_det fa3_det cudnn --modes bwd --no-plot; pack
HFA_COMMIT=$C BENCH_TIMEOUT=200 bench_with head bench_mla.py $C; pack
