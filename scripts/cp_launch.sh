#!/usr/bin/env bash
# Runs a Python script of this checkout with one process a GPU under torchrun (single node,
# torch.distributed.run --standalone), the package importable; by default the NCCL check of
# context parallelism (python/tests/nccl_cp_check.py), which on fewer than 2 GPUs says so and
# exits 0. Restrict the GPUs with CUDA_VISIBLE_DEVICES; HFA_PYTHON picks the interpreter
# (one with torch), HFA_LIBRARY the libhfa, as elsewhere.
#   scripts/cp_launch.sh [script.py [args...]]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${HFA_PYTHON:-python3}"
script="${1:-$repo/python/tests/nccl_cp_check.py}"
if (($#)); then shift; fi
if ! gpus="$("$python" -c 'import torch; print(torch.cuda.device_count())')"; then
  echo "cp_launch: $python cannot import torch (set HFA_PYTHON to an interpreter with torch)" >&2
  exit 1
fi
nproc=$((gpus > 0 ? gpus : 1))
echo "cp_launch: torch sees $gpus GPU(s); starting $nproc process(es) of $(basename "$script")"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node="$nproc" \
  "$script" "$@"
