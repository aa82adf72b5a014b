#!/bin/bash
# Session 11, call 1: double-buffered Q (new/) against the session's start (base/, f4c373d).
#   1. the forward's GPU tests on new/ (forward, features, FP8, sm_margin: one CTA walks every
#      tile, so the Q ring wraps);
#   2. the short shapes (CUDA-graph replay) and the short grid cells beside cuDNN, base then new,
#      then new with problems without a window of at most 2048 keys on the windowed kernels
#      (HFA_EXP_FULL_ON_WINDOWED_KEYS, a knob of the experiment library only);
#   3. the spread of hdim 128 non-causal cells, within a process (same and fresh inputs).
set -u
cd "$(dirname "$0")/../../.."
B=$PWD/.device
R=/tmp/r11a; mkdir -p $R
for d in base new; do xz -d -T8 -f $B/$d/libhfa.so.0.1.0.xz & done
for t in $B/new/test_*.xz; do xz -d -T8 -f $t & done
wait
chmod +x $B/new/test_*
for d in base new; do ln -sf libhfa.so.0.1.0 $B/$d/libhfa.so.0.1; ln -sf libhfa.so.0.1 $B/$d/libhfa.so; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $R/info.txt
cat $R/info.txt

# 1. Tests (the float64 oracle on the host: 8 shards a binary).
for test in test_sm90_forward test_sm90_forward_features test_sm90_forward_fp8 test_sm90_sm_margin; do
  for shard in 0 1 2 3 4 5 6 7; do
    GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=$shard timeout 150 $B/new/$test --gtest_brief=1 > $R/$test.$shard.txt 2>&1 &
  done
  wait
  cat $R/$test.*.txt > $R/$test.txt; rm $R/$test.*.txt
  echo "$test: $(grep -h PASSED $R/$test.txt | awk '{s+=$4} END {print s+0}') passed, $(grep -c '^\[  FAILED  \] .*\.' $R/$test.txt) failed"
  grep -h "^\[  FAILED  \] .*\." $R/$test.txt | head -5
done

export HFA_COMMIT=${HFA_COMMIT:-unknown} PYTHONPATH=python PYTHONUNBUFFERED=1
run() {  # lib keys bench tag args...
  local lib=$1 keys=$2 bench=$3 tag=$4; shift 4
  export HFA_LIBRARY=$B/$lib/libhfa.so
  if [ "$keys" != 0 ]; then export HFA_EXP_FULL_ON_WINDOWED_KEYS=$keys; else unset HFA_EXP_FULL_ON_WINDOWED_KEYS; fi
  timeout 100 python3 bench/$bench --out $R --tag $tag "$@" > $R/$tag.txt 2>&1; echo "$tag rc=$? $(tail -1 $R/$tag.txt | cut -c1-70)"
}
# 2. Short shapes, then the short grid cells.
run base 0 bench_fwd_shapes.py shapes-base --impls hfa cudnn
run new 0 bench_fwd_shapes.py shapes-new --impls hfa cudnn
run new 2048 bench_fwd_shapes.py shapes-newwin --impls hfa cudnn
SHORT="--hdims 64 128 256 --causal both --seqlens 512 1024 2048 --no-plot"
run base 0 bench_fwd.py grid-base $SHORT --impls hfa cudnn
run new 0 bench_fwd.py grid-new $SHORT --impls hfa cudnn
run new 2048 bench_fwd.py grid-newwin --hdims 64 128 256 --causal false --seqlens 512 1024 2048 --no-plot --impls hfa cudnn
run base 0 bench_fwd.py grid-base2 $SHORT --impls hfa
run new 0 bench_fwd.py grid-new2 $SHORT --impls hfa
# 3. The spread of hdim 128 non-causal (and hdim 64 at 16k), base library.
export HFA_LIBRARY=$B/base/libhfa.so; unset HFA_EXP_FULL_ON_WINDOWED_KEYS
timeout 60 python3 bench/fwd_spread.py --out $R --tag same --cells 128:0:2048 128:0:16384 64:0:16384 --rounds 6 > $R/spread-same.txt 2>&1; echo "spread same rc=$?"
timeout 60 python3 bench/fwd_spread.py --out $R --tag fresh --fresh --cells 128:0:2048 128:0:16384 64:0:16384 --rounds 6 > $R/spread-fresh.txt 2>&1; echo "spread fresh rc=$?"
grep -h "spread" $R/spread-*.txt
sed -i -e "s#$PWD/#./#g" $R/*.txt $R/*.json $R/*.md 2>/dev/null
tar -C /tmp -czf $OUT/r11a.tar.gz r11a
