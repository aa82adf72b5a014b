#!/bin/bash
# r30b (issue 32, backward vs FA3): branch issue32-pp30's build (.device/pp30: 189a125, whose
# library is bebca9f's, the merge of issue32-pp6 onto main c397a81). In the keys-split tiles
# (hdim 64 and 128), launches whose CTAs walk 16 steps or more on average run a kernel of their
# own in which the consumer warpgroups take turns at P's exponentials, dQ a step late
# (TileConfig::kTurnsFromSteps, TakingTurnsTileConfig; decision 041 items 5-7): on this grid hdim
# 64 at 4k and 16k, hdim 128 at 4k and 16k, both masks; 1k, softcap, ALiBi, block-sparse and the
# deterministic mode run main's kernels (SASS main's). Against main's library (.device/main27,
# c397a81), FA3 beside.
#   .device/run30b.sh 1    test_sm90_backward of pp30, sharded (device_run.sh; ~1-3 min);
#                          BackwardSm90Turns.LongWalks is the one made for the turns kernel
#   .device/run30b.sh 2    ABBA bench_bwd, hdim 64/128, 1k/4k/16k, both masks, rounds in the
#                          order main27, pp30, pp30, main27 (the first two check accuracy, the
#                          last two do not), then compare_runs.py --arms (r25a's rounds took
#                          about 20 s each; 100 s at most)
#   .device/run30b.sh all  both (~3-5 min, 8 at most)
#   run (from a checkout of main: bench/ is the same on the branch):
#     carry [".device/main27", ".device/pp30", ".device/fa3", ".device/run30b.sh"]
#     command: .device/run30b.sh all        timeout_s 600
set -u
cd "$(dirname "$0")/.."
source bench/device_call.sh
# pp30: its library and test_sm90_backward; main27: its library alone (its 18 test binaries, 1.8
# GB unpacked, are not run here).
unpack .device/pp30
xz -d -k -f -T8 .device/main27/libhfa.so.0.1.0.xz
ln -sf libhfa.so.0.1.0 .device/main27/libhfa.so.0.1
ln -sf libhfa.so.0.1 .device/main27/libhfa.so
results r30b
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee "$R/gpu.txt"
mode=${1:-all}

if [ "$mode" = 1 ] || [ "$mode" = all ]; then
  # device_run.sh shards the binary over 8 processes (the float64 oracle runs on the host).
  OUT=$R HFA_BIN=$PWD/.device/pp30 timeout 180 bash bench/device_run.sh "tests:test_sm90_backward" \
    2>&1 | grep -v "^Running main" | tee "$R/tests.txt" | tail -30
  pack
fi

if [ "$mode" = 2 ] || [ "$mode" = all ]; then
  export HFA_FA3_DIR=$PWD/.device/fa3 BENCH_TIMEOUT=100
  GRID="--impls hfa fa3 --modes bwd --hdims 64 128 --seqlens 1024 4096 16384 --causal both --no-plot"
  HFA_COMMIT=c397a81 bench_with main27 bench_bwd.py main27-1 $GRID
  HFA_COMMIT=189a125 bench_with pp30 bench_bwd.py pp30-1 $GRID
  pack
  HFA_COMMIT=189a125 bench_with pp30 bench_bwd.py pp30-2 $GRID --acc-max-seqlen 0
  HFA_COMMIT=c397a81 bench_with main27 bench_bwd.py main27-2 $GRID --acc-max-seqlen 0
  j() { ls "$R"/*-"$1".json | head -1; }
  python3 bench/compare_runs.py --arms main27="$(j main27-1)","$(j main27-2)" \
    pp30="$(j pp30-1)","$(j pp30-2)" 2>&1 | tee "$R/ab.md" | tail -20
  # hfa ÷ FA3 per cell and round, from the rounds' own lines.
  for f in "$R"/main27-*.txt "$R"/pp30-*.txt; do echo "== $(basename "$f")"; grep -E '^hdim' "$f"; done \
    > "$R/summary.txt"
  pack
fi
