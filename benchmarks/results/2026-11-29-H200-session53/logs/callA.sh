#!/usr/bin/env bash
# session 53 call A: BatchNorm1d of a transposed Linear output (unpermute_reductions): the nn
# catalog's transposed_batchnorm and encoder_pre_norm_gelu (a new region) on real kernels
# against fp32 eager; the new patchtst training step (eager, evt, torch.compile, evt and
# torch.compile in turn). Kernels built here, carried in .kpack.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py -k "transposed_batchnorm or encoder_pre_norm_gelu or linear_batchnorm" > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 3 /tmp/d/nn_modules_tests.txt
tar -czf $OUT/callA.tar.gz -C /tmp d
left=$(( 575 - SECONDS ))
timeout $left python3 -m evt.cli bench --baselines eager,evt,compile,in-turn --out /tmp/d/bench \
  --only 'step/patchtst' --time-budget $(( left - 15 )) --item-timeout 200 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; grep -E "\] step" /tmp/d/bench.log | tail -n 10
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-A.tar.xz > /tmp/d/pack.txt 2>&1
tar -czf $OUT/callA.tar.gz -C /tmp d
