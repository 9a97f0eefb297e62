#!/usr/bin/env bash
# session 44 call B: part 4 on the other 16 unmeasured GEMM cases, then --redo on swiglu/llama and
# the GPT-J down cases (the unfused path now timed in the candidates' rounds)
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=330 bash scripts/bench_full.sh 4 --only "$(cat devcalls/callB.cases)" > /tmp/p4.txt 2>&1
echo "part 4 rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]" /tmp/p4.txt | tail -40
cp $OUT/bench/results.json out/bench-full/results.json; mv $OUT/bench/part4.log /tmp/part4a.log
EVT_BENCH_CALL_S=$(( 580 - SECONDS )) bash scripts/bench_full.sh 4 --redo --only swiglu/llama,bias_gelu_tanh/gptj-down,bias_gelu_tanh_aux/gptj-down,bias_gelu_aux/gptj-down > /tmp/p4b.txt 2>&1
echo "part 4 redo rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]" /tmp/p4b.txt | tail -40
cat /tmp/part4a.log $OUT/bench/part4.log > /tmp/p && mv /tmp/p $OUT/bench/part4.log
