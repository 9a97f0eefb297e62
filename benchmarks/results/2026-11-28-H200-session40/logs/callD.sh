#!/usr/bin/env bash
# session 40 call D: GPT-2 and BERT (attention written out) trained against fp32 with
# attention_to_sdpa on (EVT_SDPA=1), side by side
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_SDPA=1
EVT_COMPILE_JOBS=8 bash scripts/gpu_parallel.sh 170 \
  "gpt2: tests/test_gpu_models.py -k 'test_training_step_matches_fp32 and gpt2 and not untied'" \
  "bert: tests/test_gpu_models.py -k 'test_training_step_matches_fp32 and bert and not cls'"
echo "done at $SECONDS s"
