#!/usr/bin/env bash
# session 40 call C: the GPU tests call A did not reach, in the default mode (EVT_PDL=1): every
# candidate tile config against the reference (kernels carried in .kpack), the model tests left
# (LLaMA with recompute_outside, autocast), checkpointing; then attention_to_sdpa (EVT_SDPA=1)
# timed: the written-out attention cases and GPT-2's math-attention step
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_COMPILE_JOBS=8 bash scripts/gpu_parallel.sh 280 \
  "configs: tests/test_gpu_configs.py --durations=10" \
  "models: tests/test_gpu_models.py -k 'autocast or (recompute_outside and llama)' --durations=10" \
  "checkpointing: tests/test_gpu_checkpointing.py --durations=10"
left=$(( 555 - SECONDS ))
echo "SDPA bench gets $left s"
EVT_SDPA=1 timeout $left python3 -m evt.bench --only 'attention/*,step/gpt2_math' \
  --baselines mm,sdpa,evt,compile --out $OUT/sdpa > $OUT/sdpa.log 2>&1
echo "bench rc=$?"; grep -E "^\[(evt|compile|sdpa|mm)\]" $OUT/sdpa.log | tail -20
echo "done at $SECONDS s"
