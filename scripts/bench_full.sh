#!/usr/bin/env bash
# The full benchmark on the device machine, as calls of under 10 minutes that continue one results
# folder (benchmarks/README.md, "The full run on the device machine"; parts: evt.bench.plan.PARTS).
#
#   device, call N:  EVT_BENCH_GIT_COMMIT=<sha> bash scripts/bench_full.sh PART
#                    PART 1 (eager, cuBLAS, cuBLASLt, SDPA, evt, torch.compile, evt and
#                    torch.compile in turn on the steps, then max-autotune with the time left), 2 (Inductor's CUTLASS backend, its subset), 3 (the rest of
#                    max-autotune; repeat while the report shows it not measured), 4 (evt's
#                    max-autotune), 5 (evt and torch.compile in turn on the GEMM cases; repeat
#                    while items are left). Carry .whl, and
#                    out/bench-full from the second call on: the results so far, continued here.
#                    Results, report, charts and the log come back in $OUT/bench, and the
#                    kernels the call built (none of the carried .kpack archives holds them: a
#                    region torch's version there traces otherwise) in $OUT/bench/$BUILT. A call
#                    gets at most 8 files back: a call script adds at most one of its own.
#   here, between calls:  bash scripts/bench_full.sh take FILES_AT
#                    copies what a call brought back (FILES_AT/bench) into out/bench-full (ignored
#                    by git: /out/), which the next call carries; its logs are appended to the
#                    ones already there; the kernels it built go into .kpack as the next
#                    kernels-N.tar.xz, so no later call builds them again. A new full run starts
#                    from an empty out/bench-full.
# EVT_BENCH_CALL_S (default 560): seconds this call may take in all; the benchmark gets what the
# setup leaves of it, so the call ends well inside the device's 600 s.
set -uo pipefail
part=${1:?usage: bench_full.sh 1|2|3|4|5 [evt bench options] | take FILES_AT}
shift
carried=out/bench-full
BUILT=kernels-built.tar.xz

if [ "$part" = take ]; then
  src=${1:?usage: bench_full.sh take FILES_AT}/bench
  [ -f "$src/results.json" ] || { echo "no $src/results.json: nothing to take"; exit 1; }
  mkdir -p "$carried" && chmod -R u+w "$carried"  # what a call brings back is read-only
  rm -f "$carried"/*.png
  cp "$src"/results.json "$src"/report.md "$carried"/
  cp "$src"/*.png "$carried"/ 2>/dev/null
  for log in "$src"/*.log; do  # appended: a part run twice (resumed) keeps both calls' logs
    [ -f "$log" ] || continue
    { echo "=== $(basename "$log"), taken from $src at $(date -u +%FT%TZ) ==="
      cat "$log"; [ -z "$(tail -c1 "$log")" ] || echo; } \
      >>"$carried/$(basename "$log")"
  done
  chmod -R u+w "$carried"
  if [ -f "$src/$BUILT" ]; then  # numbered after the last archive, as kernel_pack.py's are
    last=$(ls .kpack 2>/dev/null | sed -n 's/^kernels-\([0-9]*\)\.tar\.xz$/\1/p' | sort -n | tail -1)
    next=.kpack/kernels-$(( ${last:-0} + 1 )).tar.xz
    mkdir -p .kpack && cp "$src/$BUILT" "$next" && chmod u+w "$next"
    echo "the kernels the call built: $next"
  fi
  echo "took $(ls "$src" | grep -vx "$BUILT" | tr '\n' ' ')into $carried: carry it in the next call"
  exit 0
fi

OUT=${OUT:-/tmp/evt-out}
res=$OUT/bench
mkdir -p "$res"
if [ -f "$carried/results.json" ]; then
  cp "$carried/results.json" "$res/" && chmod u+w "$res/results.json"
  echo "continuing $carried/results.json"
fi
[ -n "${EVT_BENCH_GIT_COMMIT:-}" ] || git rev-parse HEAD >/dev/null 2>&1 \
  || echo "warning: no .git and EVT_BENCH_GIT_COMMIT unset: records will name no commit"
. scripts/device_env.sh
export PYTHONUNBUFFERED=1
budget=$(( ${EVT_BENCH_CALL_S:-560} - SECONDS - 45 ))  # python and torch start, the pack below
echo "part $part: $budget s for the benchmark (setup took $SECONDS s)"
python3 -m evt.bench --part "$part" --out "$res" --time-budget "$budget" "$@" 2>&1 \
  | tee "$res/part$part.log"
timeout 30 python3 scripts/kernel_pack.py pack --new --out "$res/$BUILT" 2>&1 | tail -1
rm -f "$res"/*.tmp* "$res"/running.json
