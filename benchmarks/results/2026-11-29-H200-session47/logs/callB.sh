#!/usr/bin/env bash
# session 47 call B: part 2 (Inductor's CUTLASS backend on its 4 cases); carry .whl and out/bench-full
EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha) EVT_BENCH_CALL_S=560 bash scripts/bench_full.sh 2 2>&1 | tail -n 40
