#!/usr/bin/env bash
# session 46 call B: part 4 (evt's max-autotune) --redo on attention_scores/* (index masks computed; the
# unfused path computes its constant inputs), then part 4 on step/lm_head and step/vit (shortlists packed)
set -uo pipefail
export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/b
EVT_BENCH_CALL_S=200 bash scripts/bench_full.sh 4 --redo --only attention_scores/gpt2,attention_scores/bert,attention_scores/vit > /tmp/b/p4_scores.txt 2>&1
echo "part 4 scores rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]|max-autotune [0-9]+/[0-9]+" /tmp/b/p4_scores.txt | tail -12
# the second run continues what the first wrote (bench_full.sh starts from out/bench-full)
cp $OUT/bench/results.json out/bench-full/results.json; cp $OUT/bench/part4.log /tmp/b/part4_scores.log
left=$(( 585 - SECONDS )); EVT_BENCH_CALL_S=$left bash scripts/bench_full.sh 4 --only step/lm_head,step/vit > /tmp/b/p4_steps.txt 2>&1
echo "part 4 steps rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]|max-autotune [0-9]+/[0-9]+" /tmp/b/p4_steps.txt | tail -20
tar -czf $OUT/callB.tar.gz -C /tmp b
