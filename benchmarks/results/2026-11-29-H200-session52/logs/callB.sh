#!/usr/bin/env bash
# session 52 call B: the column statistics' fast path (full tiles of finite values: (mean, M2)
# per column, equal-count combines, no reciprocal): the batch-statistics GPU tests, the nn
# catalog's linear_batchnorm, fuzz seed 1011; the batchnorm_stats cases: eager, mm, evt,
# torch.compile and evt's max-autotune (its candidates built here, carried in .kpack).
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_statistics.py -k "batch_statistics or column" > /tmp/d/statistics_tests.txt 2>&1
echo "statistics rc=$? at $SECONDS s"; tail -n 4 /tmp/d/statistics_tests.txt
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py -k "linear_batchnorm" > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 3 /tmp/d/nn_modules_tests.txt
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fuzz.py -k "1011" > /tmp/d/fuzz_tests.txt 2>&1
echo "fuzz rc=$? at $SECONDS s"; tail -n 3 /tmp/d/fuzz_tests.txt
tar -czf $OUT/callB.tar.gz -C /tmp d
left=$(( 570 - SECONDS ))
timeout $left python3 -m evt.cli bench --baselines eager,mm,evt,compile,evt-max-autotune --out /tmp/d/bench \
  --only 'batchnorm_stats/*' --time-budget $(( left - 15 )) --item-timeout 150 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; grep -E "\] batchnorm" /tmp/d/bench.log | tail -n 20
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-B.tar.xz > /tmp/d/pack.txt 2>&1
tar -czf $OUT/callB.tar.gz -C /tmp d
