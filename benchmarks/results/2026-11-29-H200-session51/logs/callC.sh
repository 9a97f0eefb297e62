#!/usr/bin/env bash
# session 51 call C: (1) issue #7's compile targets at this commit (BERT's layer forward +
# backward, cold and warm, fresh processes; last measured in session 40); (2) the models' GPU
# training steps against fp32 eager (with the time left). Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
EVT_CACHE_DIR= timeout 300 python3 scripts/compile_targets.py --step step/bert --out /tmp/d/compile_targets.json > /tmp/d/compile_targets.log 2>&1
echo "compile targets rc=$? at $SECONDS s"; tail -n 12 /tmp/d/compile_targets.log
tar -czf $OUT/callC.tar.gz -C /tmp d
left=$(( 570 - SECONDS ))
timeout $left python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_models.py -k "test_training_step_matches_fp32 or autocast" > /tmp/d/models_tests.txt 2>&1
echo "model tests rc=$? at $SECONDS s"; grep -v "^DEBUG\|^INFO" /tmp/d/models_tests.txt | tail -n 12
tar -czf $OUT/callC.tar.gz -C /tmp d
