# Helpers for the script of one call on the GPU machine (bench/results/<date>-calls/runNNx.sh),
# sourced by it after `cd` to the repository root:
#
#   source bench/device_call.sh
#   unpack .device/base .device/new             # binaries built here, carried xz-packed
#   results r14a                                # $R: where this call's files go
#   bench_with new bench_fwd_shapes.py shapes-new-1 --impls hfa --timings graph
#   ab shapes base new                          # the A/B table of rounds 1 and 2
#   pack                                        # one tarball in $OUT
#
# The machine hands back at most 8 files from $OUT (README of the device tool), so a call's files
# leave as one tarball; `pack` also strips this tree's absolute path from them.

# Every GPU suite (test binaries of a release build), in the order device_suites.sh runs them:
# the quick suites first, so that a timeout cuts the long forward suites, not the decode's.
GPU_SUITES="test_sm90_ptx test_sm90_decode test_sm90_mla_decode test_sm90_quantize test_quant_gpu
  test_sm90_merge_partials test_sm90_partials test_sm90_quantize_fp8 test_sm90_sm_margin
  test_sm90_tile_maps test_sm90_tile_order test_sm90_backward_workspace
  test_sm90_backward_block_sparse test_sm90_backward test_sm90_forward_fp8
  test_sm90_forward_features test_sm90_forward"

# Decompresses every *.xz in each folder, makes its test binaries executable and links the
# library's soname chain (libhfa.so -> libhfa.so.0.1 -> libhfa.so.0.1.0). A *.tar.xz is
# unpacked into its folder: the test binaries are static, each holds every kernel, so packed
# together with a dictionary larger than one of them they share it (13 binaries of 68 MB: 7 MB
# with `tar -cf - test_* | xz --lzma2=preset=5,dict=192MiB`, about 50 MB one by one).
unpack() {
  local dir f
  for dir in "$@"; do
    for f in "$dir"/*.tar.xz; do [ -e "$f" ] && xz -dc "$f" | tar -C "$dir" -xf - && rm "$f"; done
  done
  for dir in "$@"; do
    for f in "$dir"/*.xz "$dir"/*/*.xz; do [ -e "$f" ] && xz -d -T8 -f "$f" & done
  done
  wait
  for dir in "$@"; do
    chmod +x "$dir"/test_* "$dir"/hfa 2>/dev/null
    if [ -e "$dir/libhfa.so.0.1.0" ]; then
      ln -sf libhfa.so.0.1.0 "$dir/libhfa.so.0.1"
      ln -sf libhfa.so.0.1 "$dir/libhfa.so"
    fi
  done
}

# R=/tmp/NAME, created, with the GPU's state at the start in $R/gpu.txt (and on the output);
# the benchmarks' environment.
results() {
  CALL_NAME=$1
  R=/tmp/$CALL_NAME
  mkdir -p "$R"
  export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv |
    tee "$R/gpu.txt"
}

# bench_with LIB BENCH TAG ARGS...: bench/BENCH over .device/LIB's library, its output in
# $R/TAG.txt, one line of summary on the call's output. BENCH_TIMEOUT seconds at most (90).
bench_with() {
  local lib=$1 bench=$2 tag=$3
  shift 3
  HFA_LIBRARY=$PWD/.device/$lib/libhfa.so timeout "${BENCH_TIMEOUT:-90}" \
    python3 "bench/$bench" --out "$R" --tag "$tag" "$@" > "$R/$tag.txt" 2>&1
  echo "$tag rc=$? $(tail -1 "$R/$tag.txt" | cut -c1-70)"
}

# suites_of ARM SECONDS SUITE...: the GPU suites of .device/ARM (device_run.sh's tests step),
# their log in $R/tests-ARM.txt, its last lines (the counts) on the output.
suites_of() {
  local arm=$1 seconds=$2
  shift 2
  OUT=$R HFA_BIN=$PWD/.device/$arm timeout "$seconds" bash bench/device_run.sh "tests:$*" 2>&1 |
    grep -v "^Running main" > "$R/tests-$arm.txt"
  tail -4 "$R/tests-$arm.txt"
}

# ab NAME ARM...: the A/B table (bench/compare_runs.py --arms) of bench_with's runs tagged
# NAME-ARM-1 and NAME-ARM-2 (each arm's two rounds), in $R/ab-NAME.md and the output's tail.
ab() {
  local name=$1 arm arms=()
  shift
  for arm in "$@"; do
    arms+=("$arm=$(echo "$R"/*-"$name-$arm"-1.json),$(echo "$R"/*-"$name-$arm"-2.json)")
  done
  python3 bench/compare_runs.py --arms "${arms[@]}" 2>&1 | tee "$R/ab-$name.md" |
    tail -"${AB_LINES:-30}"
}

# Strips the tree's path from the text files and packs $R into $OUT/NAME.tar.gz.
pack() {
  sed -i -e "s#$PWD/#./#g" -e "s#$R/#./#g" "$R"/*.txt "$R"/*.json "$R"/*.md "$R"/*.log 2>/dev/null
  tar -C /tmp -czf "$OUT/$CALL_NAME.tar.gz" "$CALL_NAME"
}
