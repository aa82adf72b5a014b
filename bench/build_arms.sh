#!/usr/bin/env bash
# Builds the arms of an A/B call: HEAD with a list of patches applied (candidates kept as
# `git format-patch` files, since a branch does not outlive its session's checkout), each arm's
# library xz-packed into .device/NAME/ as device_call.sh's unpack expects; NAME+ also packs
# every GPU suite (GPU_SUITES) beside it, for bench/device_suites.sh.
#
#   bench/build_arms.sh ARM...       ARM: NAME[+][=PATCH[,PATCH...]]
#   bench/build_arms.sh headlib fma4=P/fma4.patch stack=P/fma4.patch,P/hint.patch \
#                       snopp+=P/fma4.patch,P/hint.patch,P/nopp.patch
#
# The arms share one worktree (build/arms) and its release build. Each arm is a commit made
# without touching that worktree (the patches applied to a scratch index), then checked out over
# the previous arm's, which rewrites only the files in which the two differ: ninja rebuilds what
# the arms tell apart, so an arm after one whose patches it extends builds only its own change.
# Each arm's ptxas report names the kernels whose spills differ from the first arm's.
set -euo pipefail
export LC_ALL=C  # sort and join, on the kernels' names
cd "$(dirname "$0")/.."
source bench/device_call.sh
root=$PWD
tree=$root/build/arms
base=$(git rev-parse HEAD)
[ -e "$tree/.git" ] || git worktree add -q --detach "$tree" "$base"

arm_commit() {  # arm_commit NAME PATCHES: HEAD with PATCHES (comma-separated) applied
  local index
  index=$(mktemp)
  GIT_INDEX_FILE=$index git read-tree "$base"
  local patch
  for patch in ${2//,/ }; do
    GIT_INDEX_FILE=$index git apply --cached "$root/$patch" ||
      { echo "build_arms: $1: $patch does not apply on HEAD" >&2; rm -f "$index"; exit 1; }
  done
  local arm_tree
  arm_tree=$(GIT_INDEX_FILE=$index git write-tree)
  rm -f "$index"
  git commit-tree "$arm_tree" -p "$base" -m "arm $1: ${2:-HEAD}"
}

for spec in "$@"; do
  name=${spec%%=*}
  patches=""
  [[ $spec == *=* ]] && patches=${spec#*=}
  suites=""
  if [[ $name == *+ ]]; then
    name=${name%+}
    suites=$GPU_SUITES
  fi
  git -C "$tree" checkout -q --detach "$(arm_commit "$name" "$patches")"
  [ -e "$tree/build/release/build.ninja" ] ||
    (cd "$tree" && cmake --preset release -DHFA_PTXAS_VERBOSE=ON > /dev/null)
  suite_paths=""
  for suite in $suites; do
    suite_paths+=" $(ninja -C "$tree/build/release" -t targets all | grep -o "^[^:]*/$suite:" | tr -d :)"
  done
  start=$SECONDS
  built=true
  # shellcheck disable=SC2086  # suite_paths: one word each
  ninja -C "$tree/build/release" libhfa.so $suite_paths > "$tree/build/$name.log" || built=false
  # The arm's spill table (kernel, bytes of spill stores): the build folder's (spills.txt, kept
  # across runs as ninja keeps its objects) updated with what this build recompiled, failed or
  # not. ptxas reports "Function properties for KERNEL", then "N bytes stack frame, S bytes
  # spill stores, ...": S is the fifth field.
  table=$tree/build/spills-$name.txt
  awk '/Function properties for/ { kernel = $NF } / bytes spill stores/ { print kernel, $5 }' \
    "$tree/build/$name.log" | sort -u -k1,1 |
    join -a1 -a2 -o 0,2.2,1.2 -e - - <(cat "$tree/build/spills.txt" 2>/dev/null) |
    awk '{ print $1, ($3 != "-" ? $3 : $2) }' > "$table"
  cp "$table" "$tree/build/spills.txt"
  $built || { tail -20 "$tree/build/$name.log"; exit 1; }
  first_table=${first_table:-$table}
  changed=$(join "$first_table" "$table" | awk '$2 != $3 { print "  " $1 ": " $2 " -> " $3 " bytes" }')
  echo "$name: built in $((SECONDS - start)) s; $(awk '$2 > 0' "$table" | wc -l) kernels spill" \
       "(build/arms/build/$name.log)${changed:+; spills changed from the first arm:}"
  [ -z "$changed" ] || echo "$changed"
  rm -rf ".device/$name"
  mkdir -p ".device/$name"
  xz -T0 -6 -c "$tree/build/release/src/libhfa.so.0.1.0" > ".device/$name/libhfa.so.0.1.0.xz"
  if [ -n "$suites" ]; then
    # One archive: the static suites share most of their bytes (see unpack).
    # shellcheck disable=SC2086
    (cd "$tree/build/release" && tar -cf - --transform 's#.*/##' $suite_paths) |
      xz -T0 --lzma2=preset=5,dict=192MiB > ".device/$name/suites.tar.xz"
  fi
  echo "$name: $(du -sh ".device/$name" | cut -f1) in .device/$name"
done
