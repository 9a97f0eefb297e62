#!/usr/bin/env bash
# session 46 call C: part 4 (evt's max-autotune) on step/bert and step/bert_math (shortlists packed)
set -uo pipefail
export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=585 bash scripts/bench_full.sh 4 --only step/bert,step/bert_math > /tmp/p4.txt 2>&1
echo "part 4 rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]|faster than|slower than|unfused" /tmp/p4.txt | cut -c1-300 | tail -30
