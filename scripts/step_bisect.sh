#!/usr/bin/env bash
# Time one training step under evt at several commits, in one device call (carry .whl): which
# commit changed it. Each commit runs from bisect_trees/COMMIT when that folder exists (make it
# here with `git archive COMMIT | tar -x -C bisect_trees/COMMIT`: untracked, it travels with the
# working tree), else from a worktree of the device copy's git; the bench's evt stage runs the
# step in-process; the working tree runs too.
# Usage (device): bash scripts/step_bisect.sh STEP COMMIT...   e.g. step/mlp 707d480 a87d047
set -uo pipefail
OUT=${OUT:-/tmp/evt-out}
mkdir -p "$OUT"
. scripts/device_env.sh
step=${1:?usage: step_bisect.sh STEP COMMIT...}
shift
run() {  # run DIR LABEL
  (cd "$1" && PYTHONPATH=/tmp/site:$1 python3 -m evt.cli bench --only "$step" \
     --baselines eager,evt --isolate none --out "/tmp/bisect-out/$2" > "/tmp/bisect-$2.log" 2>&1)
  { echo "=== $2"; cat "/tmp/bisect-$2.log"; } >> "$OUT/bisect.log"  # one file back for every commit
  echo "$2: $(grep -h "^\[evt\] $step\|^\[eager\] $step" "/tmp/bisect-$2.log" | tr -s ' ' | cut -c1-120 | tr '\n' ' ')"
}
for c in "$@"; do
  dir=/tmp/bisect/$c
  rm -rf "$dir"
  if [ -d "bisect_trees/$c" ]; then
    run "$PWD/bisect_trees/$c" "$c"
  elif git worktree add -q -f "$dir" "$c" 2>/dev/null; then
    run "$dir" "$c"
  else
    echo "$c: not in this copy's git history"
  fi
done
run "$PWD" worktree
