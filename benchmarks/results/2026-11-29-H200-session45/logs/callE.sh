#!/usr/bin/env bash
# session 45 call E: part 4 (evt's max-autotune) on the MLP and BERT steps, their shortlists carried
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=330 bash scripts/bench_full.sh 4 --only step/mlp,step/bert > /tmp/p4.txt 2>&1
echo "part 4 rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]|max-autotune [0-9]+/[0-9]+" /tmp/p4.txt | tail -20
