#!/usr/bin/env bash
# session 39 call 1: time the folded tanh-GELU backward, then GPU tests
set -uo pipefail
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=200 bash scripts/bench_full.sh 1 --redo --only 'dgrad_gelu_tanh/*,dgrad_gelu_tanh_bias_grad/*' 2>&1 | tail -40
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
left=$(( 585 - SECONDS ))
echo "pytest gets $left s"
timeout $left python3 -m pytest -m gpu -q -rs -p no:cacheprovider --durations=15 \
  tests/test_gpu_ops.py tests/test_gpu_statistics.py tests/test_gpu_models.py tests/test_gpu_fuzz.py \
  > $OUT/pytest.log 2>&1
echo "pytest rc=$?"; tail -40 $OUT/pytest.log
