#!/usr/bin/env bash
# session 42 call A: the attention rewrite's additive mask and dropout on the GPU (test_gpu_models
# -k sdpa: its BERT case carries a padding mask), then the new step step/bert_math timed in the
# full run's part 1 (evt, torch.compile, in turn; max-autotune with the time left)
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
EVT_COMPILE_JOBS=8 bash scripts/gpu_parallel.sh 230 \
  "models: tests/test_gpu_models.py -k sdpa --durations=5"
echo "bench at $SECONDS s"
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=$(( 575 - SECONDS )) bash scripts/bench_full.sh 1 --only step/bert_math > /tmp/p1.txt 2>&1
echo "part 1 rc=$? at $SECONDS s"; grep -E "bert_math" /tmp/p1.txt | tail -40
