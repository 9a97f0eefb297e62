#!/usr/bin/env bash
# session 41 call A: the GPU tests not yet run on the grid-dependency kernels or with
# attention_to_sdpa on by default: the new SDPA training test, autocast (BERT bf16, GPT-2 fp16),
# nested batch (its model test pins EVT_SDPA=0), the padded-copy aux and max-autotune training
# config tests, then the MLP's binary-reuse test alone
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
EVT_COMPILE_JOBS=8 bash scripts/gpu_parallel.sh 380 \
  "models: tests/test_gpu_models.py -k 'sdpa or (autocast and not dtype0)' --durations=10" \
  "nested: tests/test_gpu_nested_batch.py --durations=5" \
  "configs: tests/test_gpu_configs.py -k 'padded_copies or max_autotune' --durations=5"
echo "reuse at $SECONDS s"
bash scripts/gpu_parallel.sh $(( 540 - SECONDS )) \
  "reuse: tests/test_gpu_mlp.py -k test_new_batch_size_reuses_binaries"
echo "done at $SECONDS s"
