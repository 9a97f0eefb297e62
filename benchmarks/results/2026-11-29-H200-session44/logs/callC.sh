#!/usr/bin/env bash
# session 44 call C: part 4 on the 6 cases call B's time limit left, then the model fuzzer on real
# kernels (the attention blocks' masks: causal, BERT's padding mask, none) with the time left
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=300 bash scripts/bench_full.sh 4 --only "$(cat devcalls/callC.cases)" > /tmp/p4.txt 2>&1
echo "part 4 rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]" /tmp/p4.txt | tail -40
timeout $(( 570 - SECONDS )) python3 scripts/model_fuzz.py --device cuda --count 30 --seed 60000 > $OUT/fuzz.txt 2>&1
echo "fuzz rc=$? at $SECONDS s"; grep -v Warning $OUT/fuzz.txt | tail -15
