#!/usr/bin/env bash
# session 48 call A: the bf16 GELU's one-ex2 tail (normal_tail_exp2) on the GPU: test_gpu_ops
# (its new float64 check of the 16-bit GELUs among them), then evt and cuBLAS again on the exact
# GELU's GEMM cases (bias_gelu, bias_gelu_aux: 6 shapes each) in the full run's results.
# Carry .whl, .kpack (their kernels) and out/bench-full.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/a
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_ops.py -p no:cacheprovider > /tmp/a/ops_tests.txt 2>&1
echo "ops tests rc=$? at $SECONDS s"; tail -n 12 /tmp/a/ops_tests.txt
EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha) EVT_BENCH_CALL_S=$(( 575 - SECONDS )) bash scripts/bench_full.sh 1 \
  --only 'bias_gelu/*,bias_gelu_aux/*' --baselines mm,evt --redo > /tmp/a/bench.txt 2>&1
echo "bench rc=$? at $SECONDS s"; grep -v "Warning\|^W11" /tmp/a/bench.txt | tail -n 40
grep -h "C7510\|lmem\|local memory" $EVT_CACHE_DIR/*/build.log 2>/dev/null | head -5
tar -czf $OUT/callA.tar.gz -C /tmp a
