#!/usr/bin/env bash
# session 66 call A: the GPU tests session 65 did not reach: the nn catalog's (its 52 kernels
# built here and carried) and the last 5 of test_gpu_models.py. Carry .whl, .kpack.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
mkdir -p $OUT/logs; cp devcalls/callA.sh $OUT/logs/
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
date +%T
timeout 150 python3 -m pytest -v -m gpu -p no:cacheprovider --tb=short -rf tests/test_gpu_models.py -k "recompute_outside_step_matches_fp32 and (bert or llama) or autocast" > $OUT/logs/gpu_tests_A1.txt 2>&1; echo "models rc=$?"; grep -E "passed|failed" $OUT/logs/gpu_tests_A1.txt | tail -2
date +%T
timeout $(( 540 - SECONDS )) python3 -m pytest -v -m gpu -p no:cacheprovider --tb=short -rf tests/test_gpu_nn_modules.py > $OUT/logs/gpu_tests_A2.txt 2>&1; echo "nn rc=$?"; grep -E "passed|failed" $OUT/logs/gpu_tests_A2.txt | tail -2
date +%T
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $OUT/kernels-A.tar.xz 2>&1 | tail -1
