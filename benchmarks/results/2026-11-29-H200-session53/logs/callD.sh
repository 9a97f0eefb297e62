#!/usr/bin/env bash
# session 53 call D: operands laid out against the kernel copied into rows (guards.copy_into_rows)
# on the GPU: the new configs test and the padded-copy one, the nn catalog's transposed_batchnorm;
# the patchtst step (eager, evt, torch.compile, in turn) with EVT_DEBUG=1's copy report.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_configs.py -k "laid_out_against or tma_cannot_read" > /tmp/d/configs_tests.txt 2>&1
echo "configs rc=$? at $SECONDS s"; tail -n 3 /tmp/d/configs_tests.txt
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py -k "transposed_batchnorm" > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 2 /tmp/d/nn_modules_tests.txt
tar -czf $OUT/callD.tar.gz -C /tmp d
left=$(( 570 - SECONDS ))
EVT_DEBUG=1 timeout $left python3 -m evt.cli bench --baselines eager,evt,compile,in-turn --out /tmp/d/bench \
  --only 'step/patchtst' --time-budget $(( left - 15 )) --item-timeout 200 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; grep -E "\] step|copied into rows|unfused" /tmp/d/bench.log | tail -n 12
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-D.tar.xz > /tmp/d/pack.txt 2>&1
tar -czf $OUT/callD.tar.gz -C /tmp d
