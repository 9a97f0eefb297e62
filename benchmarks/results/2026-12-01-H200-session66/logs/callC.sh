#!/usr/bin/env bash
# session 66 call C: (1) evt's host time per call, this checkout against session 51's (14c9100,
# the last whole-suite run: 58 us median against 87 us in call B), in alternating processes on
# one machine; a cProfile of each; (2) the nn catalog's GPU tests call A did not reach.
# Carry .whl, .kpack.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
mkdir -p $OUT/logs; cp devcalls/callC.sh devcalls/host_ab.py $OUT/logs/
tar -xJf devcalls/k51.tar.xz -C "$EVT_CACHE_DIR"
date +%T; nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
lscpu | grep -E "Model name|^CPU\(s\)|MHz" | head -4
CASES='bias_gelu/bert,layernorm_stats/vit,dgrad_bias_grad/vit,bias_gelu_tanh_aux/gpt2'
for r in 1 2; do
  P=""; [ $r = 2 ] && P=--profile
  PYTHONPATH=/tmp/site:$PWD timeout 90 python3 devcalls/host_ab.py "$CASES" head $P >> $OUT/logs/host_ab.txt 2>&1; echo "head $r rc=$? at $SECONDS s"
  PYTHONPATH=/tmp/site:$PWD/devcalls/s51 timeout 90 python3 devcalls/host_ab.py "$CASES" s51 $P >> $OUT/logs/host_ab.txt 2>&1; echo "s51 $r rc=$? at $SECONDS s"
done
grep '^{' $OUT/logs/host_ab.txt | python3 -c "
import sys, json
for l in sys.stdin:
    d = json.loads(l); print(d['tag'], d['case'], d['host_us_median'], d['host_us_min'], d['region_cpp_us'], d['fast_loaded'], d['py_launches'], d['cpp_launches'])"
date +%T
timeout $(( 560 - SECONDS )) python3 -m pytest -v -m gpu -p no:cacheprovider --tb=short -rf $(cat devcalls/nn_rest.txt | grep -v "eager\[parallel_residual\]") "tests/test_gpu_nn_modules.py::test_module_trains_like_fp32_eager[parallel_residual]" > $OUT/logs/gpu_tests_C.txt 2>&1; echo "nn rc=$?"; grep -E "passed|failed" $OUT/logs/gpu_tests_C.txt | tail -2
date +%T
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $OUT/kernels-C.tar.xz 2>&1 | tail -1
