#!/usr/bin/env bash
# Builds libhfa.so once per tuning variant (compile-time switches of src/sm90/fwd/tile_config.hpp)
# into .device/variants/NAME/, for device_run.sh's `variants` step to time side by side.
#   bench/build_variants.sh 'NAME|-DSWITCH=VALUE ...|bench_fwd.py cell arguments' ...
set -euo pipefail
cd "$(dirname "$0")/.."
for spec in "$@"; do
  IFS='|' read -r name flags cells <<<"$spec"
  build=build/variant-$name
  cmake -S . -B "$build" -G Ninja -DHFA_BUILD_TESTS=OFF -DHFA_PTXAS_VERBOSE=ON \
    -DCMAKE_CUDA_FLAGS="$flags" >/dev/null
  # ptxas's report says "N bytes spill stores": print the kernels that spill at all.
  cmake --build "$build" | grep -E "error|[1-9][0-9]* bytes spill stores" || true
  mkdir -p ".device/variants/$name"
  cp -L "$build/src/libhfa.so" ".device/variants/$name/libhfa.so"
  echo "$flags" > ".device/variants/$name/flags"
  echo "$cells" > ".device/variants/$name/cells"
done
