#!/bin/bash
# Session 11, call 2: the new library (new/, double-buffered Q) on what call 1 did not touch.
#   1. the C++ torch ops against new/ (the native path the overhead and model benchmarks need);
#   2. host time per call beside SDPA, with torch's own floor (one pointwise op) in each mode;
#   3. the Llama model at 8k, hfa and SDPA alternated over rounds on one model;
#   4. long grid cells and the FP8 grid, base/ and new/ alternated, hfa alone.
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device
R=/tmp/r11b; mkdir -p $R
for d in base new; do [ -f $B/$d/libhfa.so.0.1.0 ] || xz -d -T8 -f $B/$d/libhfa.so.0.1.0.xz & done
wait
for d in base new; do ln -sf libhfa.so.0.1.0 $B/$d/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/$d/libhfa.so; done
export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1
# 1. native ops beside new/'s library
{ cmake -S src/torch -B /tmp/hfa-torch -DHFA_LIBRARY=$B/new/libhfa.so -DCMAKE_BUILD_TYPE=Release \
    && cmake --build /tmp/hfa-torch -j16; } > $R/torch-ops-build.log 2>&1; echo "torch ops rc=$?"
cp /tmp/hfa-torch/libhfa_torch.so $B/new/ 2>/dev/null
export HFA_LIBRARY=$B/new/libhfa.so HFA_TORCH_LIBRARY=$B/new/libhfa_torch.so HFA_TORCH_OPS=native
# 2. host time
timeout 150 python3 bench/bench_overhead.py --out $R > $R/overhead.txt 2>&1; echo "overhead rc=$?"
grep "bench:" $R/overhead.txt
# 3. the model
timeout 200 python3 bench/bench_model.py --out $R --rounds 3 > $R/model.txt 2>&1; echo "model rc=$?"
grep "bench:" $R/model.txt
unset HFA_TORCH_LIBRARY HFA_TORCH_OPS
# 4. long cells and FP8, hfa alone, base new base new
run() {  # lib bench tag args...
  local lib=$1 bench=$2 tag=$3; shift 3
  export HFA_LIBRARY=$B/$lib/libhfa.so
  timeout 80 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-70)"
}
LONG="--hdims 64 128 256 --causal both --seqlens 4096 16384 --impls hfa --no-plot"
F8="--hdims 128 256 --causal both --seqlens 2048 8192 16384 --impls hfa --no-plot"
for round in 1 2; do
  run base bench_fwd.py long-base$round $LONG
  run new bench_fwd.py long-new$round $LONG
  run base bench_fwd_fp8.py fp8-base$round $F8
  run new bench_fwd_fp8.py fp8-new$round $F8
done
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md 2>/dev/null
tar -C /tmp -czf $OUT/r11b.tar.gz r11b
