#!/usr/bin/env bash
# session 44 call A: part 4 (evt's max-autotune) on 17 of the 33 GEMM cases it has not measured,
# shortlists carried in .kpack; the first GPU run of the unfused path timed in the candidates' rounds
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=${CALL_S:-575} bash scripts/bench_full.sh 4 --only "$(cat devcalls/${CASES:-callA}.cases)" > /tmp/p4.txt 2>&1
echo "part 4 rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]" /tmp/p4.txt | tail -40
