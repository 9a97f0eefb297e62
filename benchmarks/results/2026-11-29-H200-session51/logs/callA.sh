#!/usr/bin/env bash
# session 51 call A: (1) tests/test_gpu_nn_modules.py's 13 new modules and compiled autograd (bf16
# on real kernels against fp32 eager; their kernels built here, carried in .kpack); (2) the
# GEMM+epilogue suite, mm and evt, as run and under CUDA graphs, one commit (--resume in call B
# if it runs out of time). Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
K="autocast_bf16 or parallel_residual or gated_gelu_rmsnorm or regression_head or narrow_k or frozen_base or alibi_scores or column_statistics or top_two_experts or masked_softmax or activations or unbiased_statistics or single_row or compiled_autograd"
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py -k "$K" > /tmp/d/nn_modules_tests.txt 2>&1
echo "tests rc=$? at $SECONDS s"; tail -n 30 /tmp/d/nn_modules_tests.txt
tar -czf $OUT/callA.tar.gz -C /tmp d
left=$(( 575 - SECONDS ))
timeout $left python3 -m evt.cli bench --baselines mm,evt --out /tmp/d/bench \
  --only 'bias*,dgrad*,residual*,layernorm*,swiglu*,softmax*,ce_*,attention*' \
  --time-budget $(( left - 15 )) --item-timeout 150 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; tail -n 5 /tmp/d/bench.log
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-A.tar.xz > /tmp/d/pack.txt 2>&1
tar -czf $OUT/callA.tar.gz -C /tmp d
