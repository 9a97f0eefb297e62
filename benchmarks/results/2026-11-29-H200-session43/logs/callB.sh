#!/usr/bin/env bash
# session 43 call B: the full run's part 3 (Inductor's max-autotune) on LLaMA's step alone (session
# 42's call C gave it only its last ~45 s)
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=${CALL_S:-575} bash scripts/bench_full.sh 3 --only step/llama > /tmp/p3.txt 2>&1
echo "part 3 rc=$? at $SECONDS s"; grep -E "^\[max-autotune\]" /tmp/p3.txt | tail -30
