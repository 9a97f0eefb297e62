#!/usr/bin/env bash
# session 42 call D: the full run's part 4 (evt's max-autotune) on the lowest GEMM cases it has
# not measured (their shortlists built here and carried in .kpack/kernels-115), the time left
set -uo pipefail
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=${CALL_S:-240} bash scripts/bench_full.sh 4 --only "$(cat devcalls/callD.cases)" > /tmp/p4.txt 2>&1
echo "part 4 rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]|autotune" /tmp/p4.txt | tail -40
