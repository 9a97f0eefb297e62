#!/usr/bin/env bash
# Time one training step under evt at several commits, in one device call (carry .whl): which
# commit changed it. Each commit is checked out into a worktree (it must be in the device copy's
# git history) and runs the bench's evt stage for the step in-process; the working tree runs too.
# Usage (device): bash scripts/step_bisect.sh STEP COMMIT...   e.g. step/mlp 707d480 a87d047
set -uo pipefail
OUT=${OUT:-/tmp/evt-out}
mkdir -p "$OUT"
. scripts/device_env.sh
step=${1:?usage: step_bisect.sh STEP COMMIT...}
shift
run() {  # run DIR LABEL
  (cd "$1" && PYTHONPATH=/tmp/site:$1 python3 -m evt.cli bench --only "$step" \
     --baselines eager,evt --isolate none --out "$OUT/bisect-$2" > "$OUT/bisect-$2.log" 2>&1)
  echo "$2: $(grep -h "^\[evt\] $step\|^\[eager\] $step" "$OUT/bisect-$2.log" | tr -s ' ' | cut -c1-120 | tr '\n' ' ')"
}
for c in "$@"; do
  dir=/tmp/bisect/$c
  rm -rf "$dir"
  if git worktree add -q -f "$dir" "$c" 2>/dev/null; then
    run "$dir" "$c"
  else
    echo "$c: not in this copy's git history"
  fi
done
run "$PWD" worktree
