#!/usr/bin/env bash
# session 43 call D: the full run's part 4 (evt's max-autotune) on the 10 lowest GEMM cases it has
# not measured (their shortlists built here, .kpack/kernels-3), the session's last device time
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=${CALL_S:-360} bash scripts/bench_full.sh 4 --only "$(cat devcalls/callD.cases)" > /tmp/p4.txt 2>&1
echo "part 4 rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]" /tmp/p4.txt | tail -30
