#!/usr/bin/env bash
# Time two variants of evt in alternating `evt bench` runs on the device machine (A, B, A, B, ...;
# each run times the bare cuBLAS GEMM beside evt, so a clock that drifts between runs falls on
# both) and compare them with scripts/ab_compare.py, under CUDA graphs and as run.
#   scripts/ab_runs.sh SECONDS CASES "LABEL: VAR=value ..." "LABEL: VAR=value ..." [ROUNDS]
#   e.g. scripts/ab_runs.sh 300 'bias/gpt2,bias_gelu/gpt2' "pdl2: EVT_PDL=2" "pdl1: EVT_PDL=1"
# A run starts only while SECONDS (counted from this script's start) are not yet gone, each run
# under `timeout` for what is left; ROUNDS (default 2) runs of each. Results: $OUT/ab/LABELi/
# (packed into $OUT/ab.tar.gz at the end: a call gets 8 files back), logs $OUT/ab/LABELi.log,
# tables $OUT/ab_graphs.md and $OUT/ab_as_run.md. AB_BENCH_ARGS: more `evt bench` options (a
# smoke run here: AB_BENCH_ARGS="--device cpu --small").  Source scripts/device_env.sh first.
set -u
limit=${1:?usage: ab_runs.sh SECONDS CASES "LABEL: VARS" "LABEL: VARS" [ROUNDS]}
cases=${2:?cases}; a=${3:?variant A}; b=${4:?variant B}; rounds=${5:-2}
out=${OUT:-.}; mkdir -p "$out/ab"
label() { local l=${1%%:*}; echo "${l// /}"; }
vars() { echo "${1#*:}"; }
start=$SECONDS
dirs_a=(); dirs_b=()
for ((i = 1; i <= rounds; i++)); do
  for v in "$a" "$b"; do
    left=$(( limit - (SECONDS - start) ))
    run=$(label "$v")$i
    [ "$left" -gt 30 ] || { echo "skipping $run: ${left} s left"; continue; }
    # shellcheck disable=SC2046 - the variables are words by design
    env $(vars "$v") timeout "$left" python3 -m evt.bench --only "$cases" --baselines mm,evt \
      ${AB_BENCH_ARGS:-} --out "$out/ab/$run" >"$out/ab/$run.log" 2>&1
    echo "$run ($(vars "$v" | xargs)) rc=$? at $(( SECONDS - start )) s"
    [ -f "$out/ab/$run/results.json" ] || continue
    if [ "$v" = "$a" ]; then dirs_a+=("$out/ab/$run"); else dirs_b+=("$out/ab/$run"); fi
  done
done
if [ ${#dirs_a[@]} -gt 0 ] && [ ${#dirs_b[@]} -gt 0 ]; then
  join() { local IFS=,; echo "$*"; }
  for mode in graphs as_run; do
    flag=(); [ $mode = as_run ] && flag=(--as-run)
    python3 scripts/ab_compare.py --a "$(join "${dirs_a[@]}")" --b "$(join "${dirs_b[@]}")" \
      --labels "$(label "$a"),$(label "$b")" "${flag[@]}" >"$out/ab_$mode.md"
  done
  cat "$out/ab_graphs.md"
else
  echo "ab_runs: not every variant has a finished run: nothing to compare"
fi
(cd "$out" && tar -czf ab.tar.gz ab && rm -rf ab)
