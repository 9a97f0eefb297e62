#!/usr/bin/env bash
# session 55 call D: evt_column_statistics.h without its unused warp index and stale step number
# (the column-statistics kernels re-keyed, rebuilt here and carried): the batch-statistics config,
# statistics and nn catalog GPU tests; then the BatchNorm cases and PatchTST's step (its GELU
# backward region now at 256x128) against mm and torch.compile, and in turn with torch.compile.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 130 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_configs.py -k batch_statistics > /tmp/d/configs_tests.txt 2>&1
echo "configs rc=$? at $SECONDS s"; tail -n 2 /tmp/d/configs_tests.txt
timeout 130 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_statistics.py -k batch_statistics > /tmp/d/statistics_tests.txt 2>&1
echo "statistics rc=$? at $SECONDS s"; tail -n 2 /tmp/d/statistics_tests.txt
timeout 130 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py \
  -k "linear_batchnorm or transposed_batchnorm or column_statistics" > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 2 /tmp/d/nn_modules_tests.txt
tar -czf $OUT/callD.tar.gz -C /tmp d
left=$(( 570 - SECONDS ))
timeout $left python3 -m evt.cli bench --baselines mm,evt,compile,in-turn --out /tmp/d/bench \
  --only 'batchnorm_stats/*,step/patchtst' --time-budget $(( left - 10 )) --item-timeout 150 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; grep -E "\] (step|batchnorm)" /tmp/d/bench.log | cut -c1-200 | tail -n 14
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-D.tar.xz > /dev/null 2>&1
tar -czf $OUT/callD.tar.gz -C /tmp d
