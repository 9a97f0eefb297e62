#!/usr/bin/env bash
# session 45 call C: part 3 (Inductor's max-autotune) on two of the four steps it has not measured
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=${CALL_S:-580} bash scripts/bench_full.sh 3 --only ${CASES:-step/lm_head,step/bert_math} > /tmp/p3.txt 2>&1
echo "part 3 rc=$? at $SECONDS s"; grep -E "^\[max-autotune\]" /tmp/p3.txt | tail -20
