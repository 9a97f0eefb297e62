#!/usr/bin/env bash
# session 42 call B: the full run's part 3 (Inductor's max-autotune) continued on the 13 GEMM
# cases it has not measured yet (the steps left for later calls)
set -uo pipefail
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=${CALL_S:-575} bash scripts/bench_full.sh 3 --only "$(cat devcalls/callB.cases)" > /tmp/p3.txt 2>&1
echo "part 3 rc=$? at $SECONDS s"; grep -E "^\[max-autotune\]" /tmp/p3.txt | tail -30
