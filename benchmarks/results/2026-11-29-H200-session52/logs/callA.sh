#!/usr/bin/env bash
# session 52 call A: (1) BatchNorm1d's statistics over M (evt::Sm90ColumnStatistics): the GPU
# statistics tests (its kernels at three configs, edge cases in columns, determinism, 32768 rows
# against float64), the nn catalog's linear_batchnorm and prelu and the compiled-autograd test
# against fp32 eager, fuzz seed 1011 (which draws the node); (2) the suite's batchnorm_stats
# cases: mm, evt, torch.compile, eager. Kernels built here, carried in .kpack.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_statistics.py > /tmp/d/statistics_tests.txt 2>&1
echo "statistics rc=$? at $SECONDS s"; tail -n 25 /tmp/d/statistics_tests.txt
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py -k "linear_batchnorm or prelu or compiled_autograd" > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 15 /tmp/d/nn_modules_tests.txt
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_fuzz.py -k "1011" > /tmp/d/fuzz_tests.txt 2>&1
echo "fuzz rc=$? at $SECONDS s"; tail -n 8 /tmp/d/fuzz_tests.txt
tar -czf $OUT/callA.tar.gz -C /tmp d
left=$(( 570 - SECONDS ))
timeout $left python3 -m evt.cli bench --baselines eager,mm,evt,compile --out /tmp/d/bench \
  --only 'batchnorm_stats/*' --time-budget $(( left - 15 )) --item-timeout 120 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; tail -n 25 /tmp/d/bench.log
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-A.tar.xz > /tmp/d/pack.txt 2>&1
tar -czf $OUT/callA.tar.gz -C /tmp d
