#!/usr/bin/env bash
# One call on the GPU machine: GPU tests, SASS facts, sanitizers and the peer benchmarks.
#
#   bench/device_run.sh STEP...     steps: info tests[:BINARIES] sass sanitize bench[:ARGS] fp8[:ARGS] bwd[:ARGS] features[:ARGS] variants[:ARGS] torch_ops pytest[:FILES]
#
# Binaries come prebuilt from this machine (see bench/README.md) in $HFA_BIN (default .device):
# test_sm90_forward, test_sm90_forward_features, test_sm90_backward, test_sm90_ptx, hfa,
# libhfa.so (+ variants/). Results go to $OUT.
# shellcheck disable=SC2317  # the steps are reached as "step_$name", which shellcheck cannot see
set -uo pipefail
bin=${HFA_BIN:-.device}
out=${OUT:-/tmp/hfa-out}
mkdir -p "$out"
status=0

step_info() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
    --format=csv
  "$bin/hfa" info || status=1
}

step_tests() {  # [BINARY...] (default: all GPU test binaries)
  local tests=("$@")
  [ ${#tests[@]} -gt 0 ] || tests=(test_sm90_ptx test_sm90_forward test_sm90_forward_features test_sm90_backward)
  # The float64 oracle runs on the host, one core a process: shard each binary over the cores.
  local shards=8
  for test in "${tests[@]}"; do
    [ -x "$bin/$test" ] || continue
    for shard in $(seq 0 $((shards - 1))); do
      GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard "$bin/$test" --gtest_brief=1 \
        > "/tmp/$test.$shard.log" 2>&1 &
    done
    wait
    cat /tmp/"$test".*.log >> "$out/gpu-tests.log"
    local failed
    failed=$(cat /tmp/"$test".*.log | grep -c "^\[  FAILED  \] .*\.")
    echo "$test: $(grep -h "PASSED" /tmp/"$test".*.log | awk '{s+=$4} END {print s+0}') passed," \
         "$(grep -h "SKIPPED \]" /tmp/"$test".*.log | grep tests | awk '{s+=$4} END {print s+0}') skipped, $failed failed"
    grep -h "FAILED\|Failure\|error" /tmp/"$test".*.log | head -20
    [ "$failed" -eq 0 ] || status=1
  done
}

# HGMMA must be there and local memory (spills) must not; one line per kernel.
step_sass() {
  cuobjdump -sass "$bin/libhfa.so" > /tmp/hfa.sass
  awk '/Function :/ {name=$3} /HGMMA/ {h[name]++} /LDL|STL/ {l[name]++}
       END {for (n in h) printf "%-100s HGMMA %5d  local %d\n", substr(n,1,100), h[n], l[n]+0}' \
    /tmp/hfa.sass | sort | tee "$out/sass.txt"
}

# Small problems only: the sanitizers slow kernels down a hundredfold and more. The backward's
# NaN-padding test is small and walks varlen, seqused, causal and sinks at every head dim.
step_sanitize() {
  local runs=("test_sm90_forward:*d128_bf16_*_b2_h4_kv1_q255_k1000:*d64_bf16_causal_b2_h4_kv1_q17_k17"
              "test_sm90_backward:BackwardSm90NanPadding.*")
  for run in "${runs[@]}"; do
    local test=${run%%:*} filter=${run#*:}
    for tool in memcheck racecheck; do
      echo "--- $tool $test $filter" | tee -a "$out/sanitizer.txt"
      compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/$test" \
        --gtest_filter="$filter" 2>&1 | tail -6 | tee -a "$out/sanitizer.txt" || status=1
    done
  done
}

step_bench() {
  PYTHONUNBUFFERED=1 HFA_LIBRARY="$bin/libhfa.so" PYTHONPATH=python \
    python3 bench/bench_fwd.py --out "$out" "$@" || status=1
}

step_fp8() {
  PYTHONUNBUFFERED=1 HFA_LIBRARY="$bin/libhfa.so" PYTHONPATH=python \
    python3 bench/bench_fwd_fp8.py --out "$out" "$@" || status=1
}

step_bwd() {
  PYTHONUNBUFFERED=1 HFA_LIBRARY="$bin/libhfa.so" PYTHONPATH=python \
    python3 bench/bench_bwd.py --out "$out" "$@" || status=1
}

step_features() {
  PYTHONUNBUFFERED=1 HFA_LIBRARY="$bin/libhfa.so" PYTHONPATH=python \
    python3 bench/bench_features.py --out "$out" "$@" || status=1
}

# The C++ torch ops (src/torch) built beside $bin/libhfa.so against the machine's torch, where
# python/hfa/_torch.py finds them; a minute or two of the machine's time, so once a session.
step_torch_ops() {
  { cmake -S src/torch -B /tmp/hfa-torch -DHFA_LIBRARY="$bin/libhfa.so" -DCMAKE_BUILD_TYPE=Release \
      && cmake --build /tmp/hfa-torch -j"$(nproc)"; } > "$out/torch-ops-build.log" 2>&1 || status=1
  tail -1 "$out/torch-ops-build.log"
}

# The Python suites (default: every torch one) on this library, 8 workers; the log in $out.
step_pytest() {  # [FILE...]
  local files=("$@")
  [ ${#files[@]} -gt 0 ] || files=(python/tests)
  # -v: one line per test as it ends, so a run cut by a time limit still names its failures.
  HFA_LIBRARY="$bin/libhfa.so" PYTHONPATH=python python3 -m pytest -v -n 8 -p no:cacheprovider \
    "${files[@]}" > "$out/pytest.txt" 2>&1 || status=1
  grep -E " (FAILED|ERROR) " "$out/pytest.txt" | head -20
  tail -1 "$out/pytest.txt"
}

# Each variant of .device/variants (bench/build_variants.sh) on its cells, hfa alone.
step_variants() {
  for lib in "$bin"/variants/*/libhfa.so; do
    local dir name
    dir=$(dirname "$lib")
    name=$(basename "$dir")
    echo "--- variant $name: $(cat "$dir/flags")"
    # shellcheck disable=SC2046
    PYTHONUNBUFFERED=1 HFA_LIBRARY="$lib" PYTHONPATH=python \
      python3 bench/bench_fwd.py --out /tmp/hfa-variants --tag "variant-$name" --impls hfa --no-plot \
      $(cat "$dir/cells") "$@" || status=1
  done
  tar -C /tmp -czf "$out/variants.tar.gz" hfa-variants  # one file back, however many variants
}

for step in "$@"; do
  name=${step%%:*}
  args=""
  [ "$name" != "$step" ] && args=${step#*:}
  echo "=== $name $args"
  # shellcheck disable=SC2086
  "step_$name" $args
done
exit $status
