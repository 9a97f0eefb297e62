#!/usr/bin/env bash
# session 54 call C: with each call's input layouts recorded (exact strides): GPT-2's and BERT's
# dynamic-shape steps on real kernels (symbolic strides in eager_input_vals) and the MLP's tests;
# GPT-2's, BERT's and LLaMA's steps in turn with torch.compile. Kernels built here, carried in
# .kpack (the 30 that tests/test_gpu_models.py and test_gpu_mlp.py need added this session).
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 260 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_models.py tests/test_gpu_mlp.py -k "dynamic or test_gpu_mlp" > /tmp/d/models_tests.txt 2>&1
echo "models rc=$? at $SECONDS s"; tail -n 4 /tmp/d/models_tests.txt
tar -czf $OUT/callC.tar.gz -C /tmp d
left=$(( 580 - SECONDS ))
timeout $left python3 -m evt.cli bench --baselines in-turn --out /tmp/d/bench \
  --only 'step/gpt2,step/bert,step/llama' --time-budget $(( left - 15 )) --item-timeout 150 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; grep -E "\] step" /tmp/d/bench.log | tail -n 10
tar -czf $OUT/callC.tar.gz -C /tmp d
