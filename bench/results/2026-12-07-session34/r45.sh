#!/bin/bash
# Session 34, issue 34: the landed seesaw + grid order (aecb8fc; .device/order is its build, the
# same SASS): the MLA Python suites on the GPU, the whole MLA grid beside FlashMLA (committed),
# profile_mla of two cells, ncu of the attention at b64 1k and 4k, 128 heads, s_q 2 (FlashMLA's
# at 4k too; its 1k page is r42's).
set -u
cd "$(dirname "$0")/../../.."
source bench/device_call.sh
unpack .device/order .device/flashmlax
results r45
export HFA_FLASHMLA_DIR=$PWD/.device/flashmlax
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $R/gpu.txt
OUT=$R HFA_BIN=$PWD/.device/order timeout 200 bash bench/device_run.sh \
  "pytest:python/tests/test_mla.py python/tests/test_torch_mla.py" 2>&1 | tail -4
pack
HFA_COMMIT=aecb8fc BENCH_TIMEOUT=200 bench_with order bench_mla.py aecb8fc
pack
for a in "64 1024 128 2" "64 4096 16 1" "64 4096 128 2"; do
  set -- $a
  HFA_LIBRARY=$PWD/.device/order/libhfa.so timeout 60 python3 bench/profile_mla.py --batch $1 \
    --seqlen $2 --heads $3 --seqlen-q $4 --json $R/profile-b$1-s$2-h$3-q$4.json > $R/profile-b$1-s$2-h$3-q$4.txt 2>&1
  echo "profile $a rc=$?"; tail -6 $R/profile-b$1-s$2-h$3-q$4.txt
done
pack
for k in "hfa mla_decode_kernel 1024" "hfa mla_decode_kernel 4096" "flashmla flash_fwd_splitkv_mla 4096"; do
  set -- $k
  HFA_LIBRARY=$PWD/.device/order/libhfa.so timeout 120 ncu --set full --import-source yes -k regex:$2 -s 3 -c 1 \
    -o $R/ncu-$1-$3 python3 bench/profile_mla.py --impls $1 --batch 64 --seqlen $3 --heads 128 --seqlen-q 2 > $R/ncu-$1-$3.log 2>&1
  echo "ncu $1 $3 rc=$?"
  ncu --import $R/ncu-$1-$3.ncu-rep --page raw --csv | gzip > $R/$1-$3-raw.csv.gz
  ncu --import $R/ncu-$1-$3.ncu-rep --page source --csv --print-source sass | gzip > $R/$1-$3-sass.csv.gz
  rm -f $R/ncu-$1-$3.ncu-rep
  pack
done
python3 bench/ncu_pipes.py $R/hfa-1024-raw.csv.gz $R/hfa-4096-raw.csv.gz $R/flashmla-4096-raw.csv.gz > $R/pipes.md 2>&1
cat $R/pipes.md
pack
