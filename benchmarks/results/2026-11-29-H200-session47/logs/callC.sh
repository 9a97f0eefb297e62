#!/usr/bin/env bash
# session 47 call C: part 4 (evt's max-autotune) on GPT-2's checkpointed, selective and math steps (shortlists carried)
set -uo pipefail
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=555 bash scripts/bench_full.sh 4 --only step/gpt2_checkpointed,step/gpt2_selective,step/gpt2_math 2>&1 | grep -v "^W1129\|^I1129\|^V1129" | tail -n 40
